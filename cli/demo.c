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
#include "core/ops.h"
#include "data/idx.h"
#include "model/layers.h"
#include "model/loss.h"
#include "model/model.h"
#include "optim/optimizer.h"

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
    int epochs, threads;
    int64_t batch, eval_batch;
    double lr, weight_decay;
    uint64_t seed;
    bool json;
} demo_opts;

/* Images as float [N, 1, 28, 28] scaled to [0, 1], labels as int64 [N]. */
typedef struct split {
    ct_tensor images, labels;
} split;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static ct_status load_split(const char *dir, const char *images, const char *labels, split *out) {
    char path[1024];
    ct_tensor raw_images, raw_labels;
    snprintf(path, sizeof path, "%s/%s", dir, images);
    CT_TRY(ct_idx_read(path, &raw_images));
    snprintf(path, sizeof path, "%s/%s", dir, labels);
    ct_status s = ct_idx_read(path, &raw_labels);
    if (s != CT_OK) {
        ct_tensor_free(&raw_images);
        return s;
    }
    int64_t n = raw_images.shape[0];
    char got_i[128], got_l[128];
    if (raw_images.dtype != CT_U8 || raw_images.ndim != 3 || raw_images.shape[1] != 28 || raw_images.shape[2] != 28 ||
        raw_labels.dtype != CT_U8 || raw_labels.ndim != 1 || raw_labels.shape[0] != n)
        s = ct_error(CT_ERR_FORMAT, "%s: expected u8 images [N, 28, 28] and N u8 labels, got %s and %s", dir,
                     ct_tensor_str(&raw_images, got_i, sizeof got_i), ct_tensor_str(&raw_labels, got_l, sizeof got_l));
    for (int64_t i = 0; s == CT_OK && i < n; i++)
        if (((const uint8_t *)raw_labels.data)[i] > 9)
            s = ct_error(CT_ERR_FORMAT, "%s/%s: label %u at position %lld is not a class 0-9", dir, labels,
                         ((const uint8_t *)raw_labels.data)[i], (long long)i);
    int64_t ishape[4] = {n, 1, 28, 28};
    if (s == CT_OK) s = ct_tensor_alloc(&out->images, CT_F32, CT_CPU, 4, ishape);
    if (s == CT_OK) s = ct_tensor_alloc(&out->labels, CT_I64, CT_CPU, 1, &n);
    if (s == CT_OK) {
        const uint8_t *px = raw_images.data;
        float *dst = out->images.data;
        for (int64_t i = 0; i < n * 784; i++) dst[i] = px[i] / 255.0f;
        for (int64_t i = 0; i < n; i++) ((int64_t *)out->labels.data)[i] = ((uint8_t *)raw_labels.data)[i];
    }
    ct_tensor_free(&raw_images);
    ct_tensor_free(&raw_labels);
    return s;
}

/* Copies the rows idx[0..n) of src into the first n rows of dst. */
static void gather(const ct_tensor *src, const int64_t *idx, int64_t n, ct_tensor *dst) {
    size_t row = (size_t)ct_tensor_row_numel(src) * ct_dtype_size(src->dtype);
    for (int64_t i = 0; i < n; i++) memcpy((char *)dst->data + i * row, (const char *)src->data + idx[i] * row, row);
}

static ct_status evaluate(ct_model *model, const split *test, int64_t batch, double *accuracy, double *seconds) {
    ct_model_train(model, false);
    double t0 = now();
    int64_t n = test->labels.shape[0], correct = 0;
    for (int64_t start = 0; start < n; start += batch) {
        int64_t b = n - start < batch ? n - start : batch;
        ct_tensor x = ct_tensor_rows(&test->images, start, b), y;
        CT_TRY(ct_model_forward(model, &x, &y));
        const float *logits = y.data;
        const int64_t *labels = (const int64_t *)test->labels.data + start;
        for (int64_t i = 0; i < b; i++) {
            int best = 0;
            for (int c = 1; c < 10; c++)
                if (logits[i * 10 + c] > logits[i * 10 + best]) best = c;
            correct += best == labels[i];
        }
    }
    *seconds = now() - t0;
    *accuracy = (double)correct / (double)n;
    ct_model_train(model, true);
    return CT_OK;
}

/* Everything run() owns, so one cleanup path releases it whichever step failed. */
typedef struct demo_state {
    split train, test;
    ct_model model;
    bool model_built;
    ct_loss *loss;
    ct_optimizer *opt;
    int64_t *order;
    ct_tensor xb, yb, dlogits;
} demo_state;

static void demo_state_free(demo_state *d) {
    free(d->order);
    ct_tensor_free(&d->xb);
    ct_tensor_free(&d->yb);
    ct_tensor_free(&d->dlogits);
    ct_tensor_free(&d->train.images);
    ct_tensor_free(&d->train.labels);
    ct_tensor_free(&d->test.images);
    ct_tensor_free(&d->test.labels);
    ct_optimizer_destroy(d->opt);
    ct_loss_free(d->loss);
    if (d->model_built) ct_model_free(&d->model);
}

static ct_status setup(const demo_opts *o, demo_state *d) {
    CT_TRY(load_split(o->data_dir, "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", &d->train));
    CT_TRY(load_split(o->data_dir, "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz", &d->test));
    json_error_t jerr;
    json_t *spec = json_loads(strcmp(o->model, "cnn") == 0 ? CNN_SPEC : MLP_SPEC, 0, &jerr);
    CT_ASSERT(spec);
    ct_module *root;
    ct_status s = ct_module_from_json(spec, "model", &root);
    json_decref(spec);
    CT_TRY(s);
    ct_shape in = {3, {1, 28, 28}};
    int64_t max_batch = o->batch > o->eval_batch ? o->batch : o->eval_batch;
    ct_model_options mo = {.dtype = CT_F32, .device = CT_CPU, .max_batch = max_batch, .seed = o->seed};
    CT_TRY(ct_model_build(&d->model, root, &in, &mo));
    d->model_built = true;
    CT_TRY(ct_cross_entropy_loss_create(&(ct_cross_entropy_opts){.ignore_index = -100}, &d->loss));
    ct_optim_config oc = ct_optim_config_default();
    oc.optim = CT_OPTIM_ADAMW;
    oc.learning_rate = o->lr;
    oc.weight_decay = o->weight_decay;
    CT_TRY(ct_optimizer_create(&oc, &d->model.params, &d->opt));
    int64_t n = d->train.labels.shape[0];
    d->order = malloc((size_t)n * sizeof *d->order);
    if (!d->order) return ct_error(CT_ERR_NOMEM, "demo: out of memory");
    int64_t xshape[4] = {o->batch, 1, 28, 28}, dshape[2] = {o->batch, 10};
    CT_TRY(ct_tensor_alloc(&d->xb, CT_F32, CT_CPU, 4, xshape));
    CT_TRY(ct_tensor_alloc(&d->yb, CT_I64, CT_CPU, 1, &o->batch));
    return ct_tensor_alloc(&d->dlogits, CT_F32, CT_CPU, 2, dshape);
}

/* The epoch's order: a permutation keyed by (seed, epoch) only. */
static void shuffle(int64_t *order, int64_t n, uint64_t seed, int epoch) {
    ct_rng rng;
    ct_rng_init(&rng, seed + (uint64_t)epoch, 0, CT_RNG_SAMPLER);
    for (int64_t i = 0; i < n; i++) order[i] = i;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)ct_rng_below(&rng, (uint64_t)i + 1), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
}

static ct_status train(const demo_opts *o, demo_state *d) {
    ct_model *model = &d->model;
    int64_t n = d->train.labels.shape[0], steps_per_epoch = (n + o->batch - 1) / o->batch;
    if (!o->json)
        printf("ctrainer demo: %s on Fashion-MNIST, %lld parameters, batch %lld, AdamW lr %g, %d threads\n", o->model,
               (long long)ct_params_count(&model->params), (long long)o->batch, o->lr, ct_get_num_threads());
    double t_train = 0, t_eval = 0, accuracy = 0;
    for (int epoch = 0; epoch < o->epochs; epoch++) {
        shuffle(d->order, n, o->seed, epoch);
        ct_loss_value epoch_loss = {0, 0};
        double t0 = now();
        for (int64_t start = 0; start < n; start += o->batch) {
            int64_t b = n - start < o->batch ? n - start : o->batch;
            ct_tensor x = ct_tensor_rows(&d->xb, 0, b), labels = ct_tensor_rows(&d->yb, 0, b), logits;
            ct_tensor dl = ct_tensor_rows(&d->dlogits, 0, b);
            gather(&d->train.images, d->order + start, b, &x);
            gather(&d->train.labels, d->order + start, b, &labels);
            /* Dropout-style randomness is keyed by the global step and the sample's global position. */
            ct_model_set_step(model, (uint64_t)(epoch * steps_per_epoch + start / o->batch), epoch * n + start);
            ct_model_zero_grad(model);
            CT_TRY(ct_model_forward(model, &x, &logits));
            ct_loss_value lv;
            CT_TRY(ct_loss_forward(d->loss, &logits, &labels, &lv));
            CT_TRY(ct_loss_backward(d->loss, &logits, &labels, 1.0 / lv.count, &dl));
            CT_TRY(ct_model_backward(model, &dl));
            CT_TRY(ct_optimizer_step(d->opt, o->lr));
            epoch_loss = ct_loss_value_add(epoch_loss, lv);
        }
        double dt = now() - t0, et;
        t_train += dt;
        CT_TRY(evaluate(model, &d->test, o->eval_batch, &accuracy, &et));
        t_eval += et;
        if (!o->json)
            printf("epoch %d: train loss %.4f  test accuracy %.4f  %.0f samples/s\n", epoch + 1,
                   ct_loss_value_mean(epoch_loss), accuracy, n / dt);
    }
    if (o->json)
        printf("{\"peer\": \"ctrainer\", \"model\": \"%s\", \"epochs\": %d, \"batch\": %lld, \"threads\": %d, "
               "\"train_samples_per_s\": %.0f, \"eval_samples_per_s\": %.0f, \"test_accuracy\": %.4f}\n",
               o->model, o->epochs, (long long)o->batch, ct_get_num_threads(), o->epochs * n / t_train,
               o->epochs * d->test.labels.shape[0] / t_eval, accuracy);
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
               "                     [--weight-decay X] [--seed N] [--data DIR] [--json]\n"
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
        {"json", no_argument, 0, 'j'},        {"help", no_argument, 0, 'h'},
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
