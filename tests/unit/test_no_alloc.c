/* "No allocation in the steady-state training step": after a warm-up step, full training steps
 * (zero_grad, forward, loss, backward, clipping, optimizer) of an MLP and a CNN with batch norm and
 * dropout call malloc, calloc, realloc and aligned_alloc zero times. The test binary is linked with
 * --wrap for those functions (tests/CMakeLists.txt), so every call from the library is counted. */
#include <stdlib.h>
#include <string.h>

#include "core/ops/ops.h"
#include "core/util.h"
#include "data/loader.h"
#include "model/layers.h"
#include "model/loss.h"
#include "model/model.h"
#include "optim/clip.h"
#include "optim/optimizer.h"
#include "testlib.h"

static long allocations;
static int counting;
void *__real_malloc(size_t n);
void *__real_calloc(size_t a, size_t b);
void *__real_realloc(void *p, size_t n);
void *__real_aligned_alloc(size_t a, size_t n);
void *__wrap_malloc(size_t n) {
    allocations += counting;
    return __real_malloc(n);
}
void *__wrap_calloc(size_t a, size_t b) {
    allocations += counting;
    return __real_calloc(a, b);
}
void *__wrap_realloc(void *p, size_t n) {
    allocations += counting;
    return __real_realloc(p, n);
}
void *__wrap_aligned_alloc(size_t a, size_t n) {
    allocations += counting;
    return __real_aligned_alloc(a, n);
}

static void steady_state(const char *label, const char *spec_text, ct_shape in, int64_t batch) {
    json_error_t jerr;
    json_t *spec = json_loads(spec_text, 0, &jerr);
    CHECK(spec != NULL, "%s: spec does not parse: %s", label, jerr.text);
    ct_module *root;
    CHECK_OK(ct_module_from_json(spec, "model", &root));
    json_decref(spec);
    ct_model model;
    ct_model_options mo = {.dtype = CT_F32, .max_batch = batch, .seed = ct_test_seed};
    ct_status built = ct_model_build(&model, root, &in, &mo);
    CHECK(built == CT_OK, "%s: build failed: %s", label, ct_last_error());
    if (built != CT_OK) return;
    ct_loss *loss;
    ct_cross_entropy_opts xo = ct_cross_entropy_defaults();
    xo.label_smoothing = 0.1;
    CHECK_OK(ct_cross_entropy_loss_create(&xo, &loss));
    ct_optim_config oc = ct_optim_config_default();
    oc.weight_decay = 0.01;
    oc.amsgrad = true;
    ct_optimizer *opt;
    CHECK_OK(ct_optimizer_create(&oc, &model.params, &opt));
    int ndim;
    int64_t shape[CT_MAX_DIMS], dshape[2] = {batch, model.out_shape.dims[0]};
    ct_shape_with_batch(&in, batch, &ndim, shape);
    ct_tensor x, labels, dlogits;
    ct_tensor_alloc(&x, CT_F32, CT_CPU, ndim, shape);
    ct_tensor_alloc(&labels, CT_I64, CT_CPU, 1, &batch);
    ct_tensor_alloc(&dlogits, CT_F32, CT_CPU, 2, dshape);
    ct_rng rng;
    ct_rng_init(&rng, ct_test_seed, 0, CT_RNG_USER);
    for (int step = 0; step < 6; step++) {
        for (int64_t i = 0; i < ct_tensor_numel(&x); i++) ((float *)x.data)[i] = (float)ct_rng_normal(&rng);
        for (int64_t i = 0; i < batch; i++) ((int64_t *)labels.data)[i] = (int64_t)ct_rng_below(&rng, 10);
        /* Batches of every size up to the largest, as a short last batch would be. */
        int64_t b = step == 5 ? batch - 1 : batch;
        ct_tensor xb = ct_tensor_rows(&x, 0, b), lb = ct_tensor_rows(&labels, 0, b), db = ct_tensor_rows(&dlogits, 0, b);
        counting = step > 0; /* step 0 is the warm-up: libraries may set themselves up */
        ct_model_set_step(&model, (uint64_t)step, step * batch);
        ct_model_zero_grad(&model);
        ct_tensor logits;
        ct_loss_value lv;
        double norm;
        CHECK_OK(ct_model_forward(&model, &xb, &logits));
        CHECK_OK(ct_loss_forward(loss, &logits, &lb, &lv));
        CHECK_OK(ct_loss_backward(loss, &logits, &lb, 1.0 / lv.count, &db));
        CHECK_OK(ct_model_backward(&model, &db));
        CHECK_OK(ct_clip_grad_norm(&model.params.grads, 1.0, &norm));
        CHECK_OK(ct_optimizer_step(opt, 1e-3));
        counting = 0;
    }
    CHECK(allocations == 0, "%s: %ld allocations in 5 steady-state training steps", label, allocations);
    printf("%s: %ld allocations in 5 steady-state steps\n", label, allocations);
    allocations = 0;
    ct_tensor_free(&x);
    ct_tensor_free(&labels);
    ct_tensor_free(&dlogits);
    ct_optimizer_destroy(opt);
    ct_loss_free(loss);
    ct_model_free(&model);
}

/* A dataset whose sample i is the value i everywhere: cheap, and enough to drive the loader. */
static int64_t counting_length(ct_dataset *ds) { return 1000; }
static ct_status counting_fetch(ct_dataset *ds, const int64_t *idx, int64_t n, const ct_fetch_ctx *ctx, ct_tensor *f,
                                ct_tensor *l) {
    for (int64_t i = 0; i < n; i++) {
        for (int64_t j = 0; j < 16; j++) ((float *)f->data)[i * 16 + j] = (float)idx[i];
        ((int64_t *)l->data)[i] = idx[i] % 10;
    }
    return CT_OK;
}
static const ct_dataset_ops counting_ops = {
    .size = sizeof(ct_dataset_ops), .name = "counting", .length = counting_length, .get_batch = counting_fetch};

/* Whole epochs, repositioning included, through loaders with 0 to 3 workers. */
static void loader_steady_state(void) {
    for (int workers = 0; workers <= 3; workers++)
        for (int eval = 0; eval <= 1; eval++) {
            ct_dataset *ds = calloc(1, sizeof *ds);
            ct_dataset_base_init(ds, &counting_ops);
            ds->spec.feature_shape = (ct_shape){1, {16}};
            ds->spec.num_classes = 10;
            ds->thread_safe = workers != 2; /* also the serialised path */
            snprintf(ds->source, sizeof ds->source, "counting dataset");
            ct_loader_config cfg = {.batch_size = 32, .shuffle = true, .eval = eval, .seed = ct_test_seed,
                                    .world_size = 1, .num_workers = workers};
            ct_loader *l;
            CHECK_OK(ct_loader_create(ds, &cfg, &l));
            ct_batch *b;
            CHECK_OK(ct_loader_start_epoch(l, 0));
            CHECK_OK(ct_loader_next(l, &b)); /* warm-up: threads start */
            counting = 1;
            int64_t batches = 1;
            for (int epoch = 0; epoch < 2; epoch++) {
                if (epoch) CHECK_OK(ct_loader_start_epoch(l, epoch));
                for (;;) {
                    ct_status s = ct_loader_next(l, &b);
                    if (s != CT_OK || !b) break;
                    batches++;
                }
            }
            CHECK_OK(ct_loader_set_position(l, (ct_loader_position){.epoch = 5, .batch = 7}));
            CHECK_OK(ct_loader_next(l, &b));
            counting = 0;
            CHECK(batches == 2 * ct_loader_num_batches(l), "loader produced %lld batches", (long long)batches);
            CHECK(allocations == 0, "loader (%d workers, eval %d): %ld allocations over two epochs", workers, eval,
                  allocations);
            allocations = 0;
            ct_loader_free(l);
            ct_dataset_free(ds);
        }
}

int main(void) {
    ct_test_begin("test_no_alloc");
    ct_set_num_threads(2);
    /* The wrap must see the library's calls, or a zero count would prove nothing. */
    counting = 1;
    ct_tensor probe;
    int64_t n = 8;
    ct_tensor_alloc(&probe, CT_F32, CT_CPU, 1, &n);
    ct_tensor_free(&probe);
    counting = 0;
    CHECK(allocations > 0, "the allocation counter does not see the library's allocations");
    allocations = 0;
    steady_state("mlp", "{\"type\": \"sequential\", \"layers\": [{\"type\": \"flatten\"},"
                        " {\"type\": \"linear\", \"out_features\": 64}, {\"type\": \"layernorm\"}, {\"type\": \"gelu\"},"
                        " {\"type\": \"dropout\", \"p\": 0.2}, {\"type\": \"linear\", \"out_features\": 10}]}",
                 (ct_shape){3, {1, 8, 8}}, 16);
    steady_state("cnn", "{\"type\": \"sequential\", \"layers\": ["
                        " {\"type\": \"conv2d\", \"out_channels\": 4, \"kernel_size\": 3, \"padding\": 1},"
                        " {\"type\": \"batchnorm2d\"}, {\"type\": \"relu\"}, {\"type\": \"maxpool2d\", \"kernel_size\": 2},"
                        " {\"type\": \"conv2d\", \"out_channels\": 6, \"kernel_size\": 3},"
                        " {\"type\": \"avgpool2d\", \"kernel_size\": 2}, {\"type\": \"flatten\"},"
                        " {\"type\": \"residual\", \"layers\": [{\"type\": \"linear\", \"out_features\": 24},"
                        " {\"type\": \"tanh\"}]}, {\"type\": \"linear\", \"out_features\": 10}]}",
                 (ct_shape){3, {1, 12, 12}}, 16);
    loader_steady_state();
    return ct_test_finish();
}
