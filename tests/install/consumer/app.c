/* An application of ctrainer's, built the way a user builds one: against the INSTALLED library, with
 * find_package(ctrainer) (CMakeLists.txt next to this file) or pkg-config, and only the umbrella
 * header. tests/install/test_install.sh builds it every way and checks what it prints.
 *
 * It builds an MLP with the C API (Linear 4->16, ReLU, Linear 16->2), trains it with the Trainer on
 * data made in memory (two classes split by the line x0 + x1 = 0, learnable to near 100%), evaluates
 * on held-out samples and prints one line per fact the test checks. Exit 0 only when the run learnt.
 *
 *   consumer OUTPUT_DIR */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <ctrainer/ctrainer.h>

#define FEATURES 4
#define CLASSES 2
#define TRAIN_N 256
#define EVAL_N 128
#define BATCH 16
#define EPOCHS 8

/* n samples: features uniform in [-1, 1), label 1 where x0 + x1 > 0. */
static ct_status make_data(int64_t n, uint64_t seed, ct_dataset **out) {
    ct_rng rng;
    ct_rng_init(&rng, seed, 0, CT_RNG_USER);
    ct_tensor x, y;
    int64_t xs[2] = {n, FEATURES}, ys[1] = {n};
    CT_TRY(ct_tensor_alloc(&x, CT_F32, CT_CPU, 2, xs));
    ct_status s = ct_tensor_alloc(&y, CT_I64, CT_CPU, 1, ys);
    if (s != CT_OK) {
        ct_tensor_free(&x);
        return s;
    }
    float *xv = x.data;
    int64_t *yv = y.data;
    for (int64_t i = 0; i < n; i++) {
        for (int j = 0; j < FEATURES; j++) xv[i * FEATURES + j] = (float)(ct_rng_uniform(&rng) * 2 - 1);
        yv[i] = xv[i * FEATURES] + xv[i * FEATURES + 1] > 0;
    }
    s = ct_tensor_dataset_create(&x, &y, CLASSES, out);
    ct_tensor_free(&x);
    ct_tensor_free(&y);
    return s;
}

/* Sequential(Linear(4, 16), ReLU, Linear(16, 2)), built for batches up to BATCH. */
static ct_status make_model(ct_model *m) {
    ct_module *seq, *layer;
    CT_TRY(ct_sequential_create(&seq));
    ct_status s = ct_linear_create(FEATURES, 16, true, &layer);
    if (s == CT_OK) s = ct_module_add_child(seq, layer, NULL);
    if (s == CT_OK) s = ct_activation_create(CT_ACT_RELU, &layer);
    if (s == CT_OK) s = ct_module_add_child(seq, layer, NULL);
    if (s == CT_OK) s = ct_linear_create(16, CLASSES, true, &layer);
    if (s == CT_OK) s = ct_module_add_child(seq, layer, NULL);
    if (s != CT_OK) {
        ct_module_destroy(seq);
        return s;
    }
    ct_shape in = {.ndim = 1, .dims = {FEATURES}};
    ct_model_options o = {.dtype = CT_F32, .device = CT_CPU, .max_batch = BATCH, .seed = 42};
    return ct_model_build(m, seq, &in, &o);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: consumer OUTPUT_DIR\n");
        return 2;
    }
    printf("ctrainer version %s\n", CTRAINER_VERSION);
    ct_dataset *train = NULL, *eval = NULL;
    ct_model model;
    if (make_data(TRAIN_N, 1, &train) != CT_OK || make_data(EVAL_N, 2, &eval) != CT_OK || make_model(&model) != CT_OK) {
        fprintf(stderr, "consumer: %s\n", ct_last_error());
        return 1;
    }
    printf("parameters %lld\n", (long long)ct_params_count(&model.params));

    ct_training_args args;
    ct_training_args_default(&args);
    snprintf(args.output_dir, sizeof args.output_dir, "%s", argv[1]);
    args.disable_tqdm = true;
    args.save_strategy = CT_INTERVAL_NO;
    args.logging_strategy = CT_INTERVAL_NO;
    args.learning_rate = 1e-2;
    args.per_device_train_batch_size = BATCH;
    args.per_device_eval_batch_size = BATCH;
    args.num_train_epochs = EPOCHS;
    args.seed = 42;
    json_t *metrics_spec = json_pack("[s]", "accuracy");
    ct_trainer_setup setup = {.model = &model, .train_dataset = train, .n_eval = 1, .metrics = metrics_spec};
    setup.eval_datasets[0] = eval;

    ct_trainer trainer;
    ct_train_output out = {0};
    json_t *metrics = NULL;
    int rc = 1;
    if (ct_trainer_init(&trainer, NULL, &args, &setup) != CT_OK) {
        fprintf(stderr, "consumer: %s\n", ct_last_error());
        goto done;
    }
    if (ct_trainer_train(&trainer, NULL, &out) != CT_OK || ct_trainer_evaluate(&trainer, NULL, "eval", &metrics) != CT_OK) {
        fprintf(stderr, "consumer: %s\n", ct_last_error());
        ct_trainer_free(&trainer);
        goto done;
    }
    double accuracy = json_number_value(json_object_get(metrics, "eval_accuracy"));
    printf("global_step %lld\n", (long long)out.global_step);
    printf("training_loss %.4f\n", out.training_loss);
    printf("eval_accuracy %.4f\n", accuracy);
    /* Chance is 0.5 and a loss of log 2; the line is learnt within these steps. */
    if (out.global_step == TRAIN_N / BATCH * EPOCHS && out.training_loss < log(2.0) && accuracy >= 0.9) {
        printf("consumer ok\n");
        rc = 0;
    }
    ct_trainer_free(&trainer);
done:
    json_decref(metrics);
    ct_train_output_free(&out);
    json_decref(metrics_spec);
    ct_training_args_free(&args);
    ct_model_free(&model);
    ct_dataset_free(train);
    ct_dataset_free(eval);
    return rc;
}
