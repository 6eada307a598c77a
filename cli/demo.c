/* `ctrainer demo`: trains an MLP (784-256-128-10) or a small CNN on Fashion-MNIST with ctrainer's
 * layers, cross-entropy and AdamW, and reports the loss, test accuracy and throughput per epoch.
 * With --json it ends with one line in the format of the PyTorch peer benchmark, which bench/ reads.
 * This is the main job until the Trainer drives runs from JSON configs. */
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "core/ops/ops.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "model/layers.h"
#include "model/loss.h"
#include "model/model.h"
#include "optim/optimizer.h"
#include "core/util.h"

static const char *const MLP_SPEC =
    "{\"type\": \"sequential\", \"layers\": [{\"type\": \"flatten\"},"
    " {\"type\": \"linear\", \"out_features\": 256}, {\"type\": \"relu\"},"
    " {\"type\": \"linear\", \"out_features\": 128}, {\"type\": \"relu\"},"
    " {\"type\": \"linear\", \"out_features\": 10}]}";

static const char *const CNN_SPEC =
    "{\"type\": \"sequential\", \"layers\": ["
    " {\"type\": \"conv2d\", \"out_channels\": 32, \"kernel_size\": 3, \"padding\": 1}, {\"type\": \"relu\"},"
    " {\"type\": \"maxpool2d\", \"kernel_size\": 2},"
    " {\"type\": \"conv2d\", \"out_channels\": 64, \"kernel_size\": 3, \"padding\": 1}, {\"type\": \"relu\"},"
    " {\"type\": \"maxpool2d\", \"kernel_size\": 2}, {\"type\": \"flatten\"},"
    " {\"type\": \"linear\", \"out_features\": 128}, {\"type\": \"relu\"},"
    " {\"type\": \"linear\", \"out_features\": 10}]}";

typedef struct demo_opts {
    const char *model, *data_dir;
    int epochs, threads, workers;
    int64_t batch, eval_batch;
    double lr, weight_decay;
    uint64_t seed;
    bool json;
} demo_opts;

/* Everything run() owns, so one cleanup path releases it whichever step failed. */
typedef struct demo_state {
    ct_dataset *train_set, *test_set;
    ct_loader *train_loader, *test_loader;
    ct_model model;
    bool model_built;
    ct_loss *loss;
    ct_optimizer *opt;
    ct_tensor dlogits;
} demo_state;

static void demo_state_free(demo_state *d) {
    ct_loader_free(d->train_loader);
    ct_loader_free(d->test_loader);
    ct_dataset_free(d->train_set);
    ct_dataset_free(d->test_set);
    ct_tensor_free(&d->dlogits);
    ct_optimizer_destroy(d->opt);
    ct_loss_free(d->loss);
    if (d->model_built) ct_model_free(&d->model);
}

static ct_status open_split(const char *dir, const char *images, const char *labels, ct_dataset **out) {
    char ipath[1024], lpath[1024];
    snprintf(ipath, sizeof ipath, "%s/%s", dir, images);
    snprintf(lpath, sizeof lpath, "%s/%s", dir, labels);
    CT_TRY(ct_idx_dataset_create(ipath, lpath, 0, 10, out));
    const ct_shape *f = &(*out)->spec.feature_shape;
    if (f->ndim != 3 || f->dims[0] != 1 || f->dims[1] != 28 || f->dims[2] != 28)
        return ct_error(CT_ERR_FORMAT, "%s: expected 28x28 images", ipath);
    return CT_OK;
}

static ct_status setup(const demo_opts *o, demo_state *d) {
    CT_TRY(open_split(o->data_dir, "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", &d->train_set));
    CT_TRY(open_split(o->data_dir, "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz", &d->test_set));
    ct_loader_config train_cfg = {.batch_size = o->batch, .shuffle = true, .seed = o->seed, .world_size = 1,
                                  .num_workers = o->workers},
                     test_cfg = {.batch_size = o->eval_batch, .eval = true, .world_size = 1, .num_workers = o->workers};
    CT_TRY(ct_loader_create(d->train_set, &train_cfg, &d->train_loader));
    CT_TRY(ct_loader_create(d->test_set, &test_cfg, &d->test_loader));
    json_error_t jerr;
    json_t *spec = json_loads(strcmp(o->model, "cnn") == 0 ? CNN_SPEC : MLP_SPEC, 0, &jerr);
    CT_ASSERT(spec);
    ct_module *root;
    ct_status s = ct_module_from_json(spec, "model", &root);
    json_decref(spec);
    CT_TRY(s);
    int64_t max_batch = o->batch > o->eval_batch ? o->batch : o->eval_batch;
    ct_model_options mo = {.dtype = CT_F32, .device = CT_CPU, .max_batch = max_batch, .seed = o->seed};
    CT_TRY(ct_model_build(&d->model, root, &d->train_set->spec.feature_shape, &mo));
    d->model_built = true;
    CT_TRY(ct_cross_entropy_loss_create(&(ct_cross_entropy_opts){.ignore_index = -100}, &d->loss));
    ct_optim_config oc = ct_optim_config_default();
    oc.optim = CT_OPTIM_ADAMW;
    oc.learning_rate = o->lr;
    oc.weight_decay = o->weight_decay;
    CT_TRY(ct_optimizer_create(&oc, &d->model.params, &d->opt));
    int64_t dshape[2] = {o->batch, 10};
    return ct_tensor_alloc(&d->dlogits, CT_F32, CT_CPU, 2, dshape);
}

/* Accuracy over the test set, counting only rows the eval sampler marks as real. */
static ct_status evaluate(demo_state *d, double *accuracy, double *seconds) {
    ct_model_train(&d->model, false);
    double t0 = ct_monotonic_seconds();
    int64_t correct = 0, total = 0;
    CT_TRY(ct_loader_start_epoch(d->test_loader, 0));
    for (;;) {
        ct_batch *b;
        CT_TRY(ct_loader_next(d->test_loader, &b));
        if (!b) break;
        ct_tensor y;
        CT_TRY(ct_model_forward(&d->model, &b->features, &y));
        const float *logits = y.data;
        const int64_t *labels = b->labels.data;
        const uint8_t *mask = b->mask.data;
        for (int64_t i = 0; i < b->rows; i++) {
            int best = 0;
            for (int c = 1; c < 10; c++)
                if (logits[i * 10 + c] > logits[i * 10 + best]) best = c;
            correct += mask[i] && best == labels[i];
        }
        total += b->valid;
    }
    *seconds = ct_monotonic_seconds() - t0;
    *accuracy = (double)correct / (double)total;
    ct_model_train(&d->model, true);
    return CT_OK;
}

static ct_status train(const demo_opts *o, demo_state *d) {
    ct_model *model = &d->model;
    int64_t n = ct_dataset_length(d->train_set), steps_per_epoch = ct_loader_num_batches(d->train_loader);
    if (!o->json)
        printf("ctrainer demo: %s on Fashion-MNIST, %lld parameters, batch %lld, AdamW lr %g, %d threads\n", o->model,
               (long long)ct_params_count(&model->params), (long long)o->batch, o->lr, ct_get_num_threads());
    double t_train = 0, t_eval = 0, accuracy = 0;
    ct_model_zero_grad(model);
    for (int epoch = 0; epoch < o->epochs; epoch++) {
        CT_TRY(ct_loader_start_epoch(d->train_loader, epoch));
        ct_loss_value epoch_loss = {0, 0};
        double t0 = ct_monotonic_seconds();
        for (;;) {
            ct_batch *b;
            CT_TRY(ct_loader_next(d->train_loader, &b));
            if (!b) break;
            ct_tensor logits, dl = ct_tensor_rows(&d->dlogits, 0, b->rows);
            /* Dropout-style randomness is keyed by the global step and the sample's global position. */
            ct_model_set_step(model, (uint64_t)(epoch * steps_per_epoch + b->index), epoch * n + b->index * o->batch);
            CT_TRY(ct_model_forward(model, &b->features, &logits));
            /* The mean over the batch (Fashion-MNIST labels are never the ignored index), forward and
             * backward in one pass over the logits as the Trainer's step computes it. */
            ct_loss_value lv;
            CT_TRY(ct_loss_forward_backward(d->loss, &logits, &b->labels, 1.0 / (double)b->rows, &dl, &lv));
            CT_TRY(ct_model_backward(model, &dl));
            /* the update clears each gradient as it reads it: the next backward starts from zero */
            CT_TRY(ct_optimizer_step_zero_grad(d->opt, o->lr));
            epoch_loss = ct_loss_value_add(epoch_loss, lv);
        }
        double dt = ct_monotonic_seconds() - t0, et;
        t_train += dt;
        CT_TRY(evaluate(d, &accuracy, &et));
        t_eval += et;
        if (!o->json)
            printf("epoch %d: train loss %.4f  test accuracy %.4f  %.0f samples/s\n", epoch + 1,
                   ct_loss_value_mean(epoch_loss), accuracy, n / dt);
    }
    if (o->json)
        printf("{\"peer\": \"ctrainer\", \"model\": \"%s\", \"epochs\": %d, \"batch\": %lld, \"threads\": %d, "
               "\"train_samples_per_s\": %.0f, \"eval_samples_per_s\": %.0f, \"test_accuracy\": %.4f}\n",
               o->model, o->epochs, (long long)o->batch, ct_get_num_threads(), o->epochs * n / t_train,
               o->epochs * ct_dataset_length(d->test_set) / t_eval, accuracy);
    return CT_OK;
}

static ct_status run(const demo_opts *o) {
    demo_state d = {0};
    ct_status s = setup(o, &d);
    if (s == CT_OK) s = train(o, &d);
    demo_state_free(&d);
    return s;
}

static void demo_usage(FILE *f) {
    fprintf(f, "usage: ctrainer demo [--model mlp|cnn] [--epochs N] [--batch N] [--threads N] [--lr X]\n"
               "                     [--weight-decay X] [--seed N] [--workers N] [--data DIR] [--json]\n"
               "Trains on Fashion-MNIST (default data: /usr/share/datasets/fashion-mnist).\n");
}

/* Parses a positive integer option or fails with a usage error naming it. */
static bool parse_int(const char *name, const char *text, int64_t *out) {
    char *end;
    long long v = strtoll(text, &end, 10);
    if (*text == '\0' || *end != '\0' || v <= 0) {
        fprintf(stderr, "ctrainer demo: --%s expects a positive integer, got '%s'\n", name, text);
        return false;
    }
    *out = v;
    return true;
}

int ct_cli_demo(int argc, char **argv) {
    demo_opts o = {.model = "mlp", .data_dir = "/usr/share/datasets/fashion-mnist", .epochs = 3, .threads = 0,
                   .batch = 128, .eval_batch = 1000, .lr = 1e-3, .weight_decay = 0.01, .seed = 42};
    static const struct option longopts[] = {
        {"model", required_argument, 0, 'm'}, {"epochs", required_argument, 0, 'e'},
        {"batch", required_argument, 0, 'b'}, {"threads", required_argument, 0, 't'},
        {"lr", required_argument, 0, 'l'},    {"weight-decay", required_argument, 0, 'w'},
        {"seed", required_argument, 0, 's'},  {"data", required_argument, 0, 'd'},
        {"workers", required_argument, 0, 'k'}, {"json", no_argument, 0, 'j'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    int c;
    int64_t v;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case 'm': o.model = optarg; break;
        case 'e': if (!parse_int("epochs", optarg, &v)) return 2; o.epochs = (int)v; break;
        case 'b': if (!parse_int("batch", optarg, &v)) return 2; o.batch = v; break;
        case 't': if (!parse_int("threads", optarg, &v)) return 2; o.threads = (int)v; break;
        case 's': if (!parse_int("seed", optarg, &v)) return 2; o.seed = (uint64_t)v; break;
        case 'l': o.lr = atof(optarg); break;
        case 'w': o.weight_decay = atof(optarg); break;
        case 'd': o.data_dir = optarg; break;
        case 'k': {
            char *end;
            long k = strtol(optarg, &end, 10);
            if (*optarg == '\0' || *end != '\0' || k < 0 || k > 64) {
                fprintf(stderr, "ctrainer demo: --workers expects 0 to 64, got '%s'\n", optarg);
                return 2;
            }
            o.workers = (int)k;
            break;
        }
        case 'j': o.json = true; break;
        case 'h': demo_usage(stdout); return 0;
        default: demo_usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "ctrainer demo: unexpected argument '%s'\n", argv[optind]);
        demo_usage(stderr);
        return 2;
    }
    if (strcmp(o.model, "mlp") != 0 && strcmp(o.model, "cnn") != 0) {
        fprintf(stderr, "ctrainer demo: unknown model '%s' (expected mlp or cnn)\n", o.model);
        return 2;
    }
    if (o.threads) ct_set_num_threads(o.threads);
    ct_set_flush_denormal(true);
    ct_status s = run(&o);
    if (s != CT_OK) {
        fprintf(stderr, "ctrainer demo: %s\n", ct_last_error());
        return s == CT_ERR_CONFIG || s == CT_ERR_INVALID_ARG ? 2 : 1;
    }
    return 0;
}
