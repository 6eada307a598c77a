/* A residual stream's add taken into the layer that reads the new stream (ct_module_forward_residual,
 * ct_module_backward_residual; the GPT block's ln_2 and ln_1): the same bits as the add and the
 * layer one after the other, float32 and float64, forward (the sum and the output) and backward
 * (dx with the residual path's gradient, the parameter gradients), at 1 and 2 threads; a layer
 * without the fused pass (linear) gives the same through the fallback; and the errors a misfit
 * residual gets. The layer's own gradient is checked against finite differences in
 * test_norm_misc, the GPT block's against PyTorch in oracle.test_gpt. */
#include <string.h>

#include "core/ops/ops.h"
#include "model/layers.h"
#include "model/model.h"
#include "testlib.h"

static ct_rng rng;

static ct_tensor random_tensor(ct_dtype dt, int ndim, const int64_t *shape) {
    ct_tensor t;
    CT_ASSERT(ct_tensor_alloc(&t, dt, CT_CPU, ndim, shape) == CT_OK);
    for (int64_t i = 0; i < ct_tensor_numel(&t); i++) ct_tensor_set(&t, i, 4.0 * ct_rng_uniform(&rng) - 1.0);
    return t;
}

static bool same_bits(const ct_tensor *a, const ct_tensor *b) {
    return ct_tensor_nbytes(a) == ct_tensor_nbytes(b) && memcmp(a->data, b->data, ct_tensor_nbytes(a)) == 0;
}

/* Runs module `m` (of a model built for [B, T, F]) fused and then as two steps from the same inputs,
 * comparing every result. */
static void compare(const char *what, ct_model *model, ct_dtype dt, int64_t B, int64_t T, int64_t F) {
    ct_module *m = model->root;
    const int64_t shape[3] = {B, T, F};
    ct_tensor x = random_tensor(dt, 3, shape), r = random_tensor(dt, 3, shape);
    const int64_t oshape[3] = {B, T, m->out_shape.dims[m->out_shape.ndim - 1]};
    ct_tensor dres = random_tensor(dt, 3, shape), dy = random_tensor(dt, 3, oshape);
    ct_tensor sum[2], dx[2], y[2], grads[2];
    for (int k = 0; k < 2; k++) {
        CT_ASSERT(ct_tensor_alloc(&sum[k], dt, CT_CPU, 3, shape) == CT_OK);
        CT_ASSERT(ct_tensor_alloc(&dx[k], dt, CT_CPU, 3, shape) == CT_OK);
        CT_ASSERT(ct_tensor_alloc(&y[k], dt, CT_CPU, 3, oshape) == CT_OK);
        CT_ASSERT(ct_tensor_alloc(&grads[k], dt, CT_CPU, 1, model->params.grads.shape) == CT_OK);
    }
    for (int k = 0; k < 2; k++) {
        ct_model_zero_grad(model);
        ct_tensor out, h;
        if (k == 0) {
            CHECK_OK(ct_module_forward_residual(m, &x, &r, &sum[0], &out));
            ct_op_copy(&y[0], &out);
            CHECK_OK(ct_module_backward_residual(m, &dy, &dres, &dx[0]));
        } else {
            ct_op_add(&x, &r, &sum[1]);
            CHECK_OK(ct_module_forward(m, &sum[1], &out));
            ct_op_copy(&y[1], &out);
            CHECK_OK(ct_module_backward(m, &dy, &h));
            ct_op_add(&dres, &h, &dx[1]);
        }
        ct_op_copy(&grads[k], &model->params.grads);
    }
    CHECK(same_bits(&sum[0], &sum[1]), "%s: the sum differs from x + r", what);
    CHECK(same_bits(&y[0], &y[1]), "%s: the output differs from the layer's on x + r", what);
    CHECK(same_bits(&dx[0], &dx[1]), "%s: dx differs from dres + the layer's input gradient", what);
    CHECK(same_bits(&grads[0], &grads[1]), "%s: the parameter gradients differ", what);
    ct_tensor *all[] = {&x, &r, &dres, &dy, &sum[0], &sum[1], &dx[0], &dx[1], &y[0], &y[1], &grads[0], &grads[1]};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) ct_tensor_free(all[i]);
}

static void layer_case(bool layernorm, ct_dtype dt, int threads) {
    const int64_t B = 1 + (int64_t)ct_rng_below(&rng, 3), T = 1 + (int64_t)ct_rng_below(&rng, 40);
    const int64_t F = 1 + (int64_t)ct_rng_below(&rng, 300);
    ct_module *m;
    if (layernorm)
        CHECK_OK(ct_layernorm_create(F, 1e-5, true, ct_rng_below(&rng, 2), &m));
    else
        CHECK_OK(ct_linear_create(F, 1 + (int64_t)ct_rng_below(&rng, 20), true, &m));
    ct_shape in = {2, {T, F}};
    ct_model_options mo = {.dtype = dt, .max_batch = B, .seed = ct_test_seed};
    ct_model model;
    if (ct_model_build(&model, m, &in, &mo) != CT_OK) {
        CHECK(false, "build: %s", ct_last_error());
        return;
    }
    CHECK_OK(ct_model_enable_input_grad(&model)); /* the residual path's gradient is an input gradient */
    /* a parameter that is not 1 or 0 */
    for (int64_t i = 0; i < ct_tensor_numel(&model.params.values); i++)
        ct_tensor_set(&model.params.values, i, 0.5 + ct_rng_uniform(&rng));
    ct_model_train(&model, true);
    ct_set_num_threads(threads);
    char what[128];
    snprintf(what, sizeof what, "%s %s [%lld, %lld, %lld], %d threads", layernorm ? "layernorm" : "linear",
             ct_dtype_name(dt), (long long)B, (long long)T, (long long)F, threads);
    compare(what, &model, dt, B, T, F);
    ct_model_free(&model);
}

/* A residual that does not fit the layer's input is refused, naming it. */
static void misfit_residual(void) {
    ct_module *m;
    CHECK_OK(ct_layernorm_create(8, 1e-5, true, true, &m));
    ct_shape in = {2, {4, 8}};
    ct_model_options mo = {.dtype = CT_F32, .max_batch = 2, .seed = ct_test_seed};
    ct_model model;
    CHECK_OK(ct_model_build(&model, m, &in, &mo));
    const int64_t good[3] = {2, 4, 8}, bad[3] = {2, 4, 7};
    ct_tensor x = random_tensor(CT_F32, 3, good), r = random_tensor(CT_F32, 3, bad), sum, y;
    CT_ASSERT(ct_tensor_alloc(&sum, CT_F32, CT_CPU, 3, good) == CT_OK);
    CHECK_ERR(ct_module_forward_residual(model.root, &x, &r, &sum, &y), CT_ERR_SHAPE, "residual", "[2, 4, 7]");
    /* a backward with the residual path's gradient needs the layer to make an input gradient */
    ct_tensor dy = random_tensor(CT_F32, 3, good);
    CHECK_OK(ct_module_forward(model.root, &x, &y));
    CHECK_ERR(ct_module_backward_residual(model.root, &dy, &dy, &sum), CT_ERR_STATE, "input gradient");
    ct_tensor_free(&dy);
    ct_tensor_free(&x);
    ct_tensor_free(&r);
    ct_tensor_free(&sum);
    ct_model_free(&model);
}

int main(void) {
    ct_test_begin("test_fused_residual");
    ct_rng_init(&rng, ct_test_seed, 0, CT_RNG_USER);
    const ct_dtype dts[] = {CT_F32, CT_F64};
    for (int i = 0; i < 12; i++) layer_case(true, dts[i % 2], 1 + (i / 2) % 2);
    for (int i = 0; i < 4; i++) layer_case(false, dts[i % 2], 1 + i / 2);
    misfit_residual();
    return ct_test_finish();
}
