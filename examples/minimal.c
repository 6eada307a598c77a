/* The shortest complete program: train, evaluate, save, reload, predict (README's library section).
 *
 *   minimal [OUTPUT_DIR]      (default runs/minimal)
 *
 * Data made in memory (label: whether x0 + x1 > 0), an MLP from its JSON spec, the stock Trainer;
 * ct_model_from_pretrained then rebuilds the saved model, which predicts without a Trainer. */
#include <stdio.h>

#include <ctrainer/ctrainer.h>

static ct_status make_data(int64_t n, uint64_t seed, ct_dataset **out) {
    ct_tensor x, y;
    CT_TRY(ct_tensor_alloc(&x, CT_F32, CT_CPU, 2, (int64_t[]){n, 2}));
    CT_TRY(ct_tensor_alloc(&y, CT_I64, CT_CPU, 1, (int64_t[]){n}));
    ct_rng rng;
    ct_rng_init(&rng, seed, 0, CT_RNG_USER);
    float *xv = x.data;
    for (int64_t i = 0; i < n; i++) {
        xv[2 * i] = (float)(2 * ct_rng_uniform(&rng) - 1);
        xv[2 * i + 1] = (float)(2 * ct_rng_uniform(&rng) - 1);
        ((int64_t *)y.data)[i] = xv[2 * i] + xv[2 * i + 1] > 0;
    }
    ct_status s = ct_tensor_dataset_create(&x, &y, 2, out); /* copies x and y */
    ct_tensor_free(&x);
    ct_tensor_free(&y);
    return s;
}

static ct_status run(const char *dir) {
    ct_dataset *train, *eval;
    CT_TRY(make_data(512, 1, &train));
    CT_TRY(make_data(128, 2, &eval));
    json_t *spec = json_loads("{\"type\": \"mlp\", \"hidden\": [16], \"num_classes\": 2}", 0, NULL);
    ct_module *root;
    CT_TRY(ct_module_from_json(spec, "model", &root));
    json_decref(spec);
    ct_model model;
    ct_shape in = {.ndim = 1, .dims = {2}};
    CT_TRY(ct_model_build(&model, root, &in, &(ct_model_options){.dtype = CT_F32, .max_batch = 32}));

    ct_training_args args;
    ct_training_args_default(&args); /* then Hugging Face's TrainingArguments names */
    snprintf(args.output_dir, sizeof args.output_dir, "%s", dir);
    args.num_train_epochs = 5;
    args.learning_rate = 1e-2;
    args.disable_tqdm = true;
    json_t *metrics_list = json_pack("[s]", "accuracy");
    ct_trainer_setup setup = {.model = &model, .train_dataset = train, .n_eval = 1, .eval_datasets = {eval},
                              .metrics = metrics_list};
    ct_trainer t;
    ct_train_output out = {0};
    json_t *metrics = NULL;
    ct_status s = ct_trainer_init(&t, NULL, &args, &setup); /* NULL: no hooks overridden */
    if (s == CT_OK) s = ct_trainer_train(&t, NULL, &out);
    if (s == CT_OK) s = ct_trainer_evaluate(&t, NULL, "eval", &metrics);
    if (s == CT_OK) s = ct_trainer_save_model(&t, NULL); /* output_dir/model.h5 */
    if (s == CT_OK) printf("eval_accuracy %.4f\n", json_number_value(json_object_get(metrics, "eval_accuracy")));
    ct_trainer_free(&t); /* safe after a failed init too */
    ct_train_output_free(&out);
    json_decref(metrics);
    json_decref(metrics_list);
    ct_model_free(&model);
    ct_training_args_free(&args);

    ct_model again; /* the saved model, architecture and weights, in one call */
    if (s == CT_OK) s = ct_model_from_pretrained(dir, NULL, &again);
    if (s == CT_OK) {
        float xv[2] = {0.6f, 0.3f};
        ct_tensor x = ct_tensor_view(xv, CT_F32, CT_CPU, 2, (int64_t[]){1, 2}), y;
        s = ct_model_forward(&again, &x, &y);
        if (s == CT_OK)
            printf("predicted class of (0.6, 0.3): %d\n", ct_tensor_get(&y, 1) > ct_tensor_get(&y, 0));
        ct_model_free(&again);
    }
    ct_dataset_free(train);
    ct_dataset_free(eval);
    return s;
}

int main(int argc, char **argv) {
    ct_status s = run(argc > 1 ? argv[1] : "runs/minimal");
    if (s != CT_OK) fprintf(stderr, "minimal: %s\n", ct_last_error());
    return s == CT_OK ? 0 : 1;
}
