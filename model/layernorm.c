/* LayerNorm (nn.LayerNorm(features)) over the last dimension, for [B, F], [B, T, F] or any
 * [B, ..., F]. Parameters "weight" (init 1) and "bias" (init 0), both excluded from weight decay;
 * elementwise_affine=false drops both, bias=false only the bias (PyTorch >= 2.1's argument). The
 * mean and 1/std of every row are kept, in float64, for backward. features = 0 infers F from the
 * input. It can take a residual stream's add into its pass (forward_residual: the norm of x + r,
 * the sum written for the caller; backward_residual: the residual path's gradient added to dx). */
#include <stdlib.h>

#include "core/json.h"
#include "core/ops/ops.h"
#include "core/util.h"
#include "model/layers.h"
#include "model/params.h"

typedef struct layernorm {
    ct_module base;
    int64_t features;
    double eps;
    bool affine, has_bias;
    ct_tensor weight, bias, dweight, dbias;
    ct_tensor save_mean, save_rstd; /* float64, one per row of the largest batch */
    ct_tensor out, dinput;
    ct_tensor x;
} layernorm;

static layernorm *self(ct_module *m) { return ct_container_of(m, layernorm, base); }

static ct_status infer(ct_module *m, const ct_shape *in, ct_shape *out) {
    layernorm *l = self(m);
    char s[96];
    if (in->ndim < 1) return ct_error(CT_ERR_SHAPE, "input must have at least one feature dimension");
    int64_t f = in->dims[in->ndim - 1];
    if (l->features == 0) l->features = f;
    if (f != l->features)
        return ct_error(CT_ERR_SHAPE, "input %s has %lld features in its last dimension, expected %lld",
                        ct_sample_shape_str(in, s, sizeof s), (long long)f, (long long)l->features);
    *out = *in;
    return CT_OK;
}

static ct_status declare(ct_module *m, ct_param_store *ps) {
    layernorm *l = self(m);
    if (!l->affine) return CT_OK;
    CT_TRY(ct_params_declare(ps, m, "weight", 1, &l->features, CT_PARAM_NO_DECAY, &l->weight, &l->dweight));
    if (l->has_bias) CT_TRY(ct_params_declare(ps, m, "bias", 1, &l->features, CT_PARAM_NO_DECAY, &l->bias, &l->dbias));
    return CT_OK;
}

static void init(ct_module *m, ct_rng *rng) {
    (void)rng;
    layernorm *l = self(m);
    if (l->affine) ct_op_fill(&l->weight, 1.0);
    if (l->affine && l->has_bias) ct_op_fill(&l->bias, 0.0);
}

static ct_status reserve(ct_module *m, const ct_reserve_ctx *ctx) {
    layernorm *l = self(m);
    CT_TRY(ct_reserve_activation(ctx, m->dtype, m->device, &m->out_shape, &l->out));
    if (m->need_input_grad) CT_TRY(ct_reserve_backward(ctx, m->dtype, m->device, &m->in_shape, &l->dinput));
    int64_t rows = ctx->max_batch * (ct_shape_numel(&m->in_shape) / l->features);
    l->save_mean = ct_tensor_view(NULL, CT_F64, m->device, 1, &rows);
    l->save_rstd = ct_tensor_view(NULL, CT_F64, m->device, 1, &rows);
    CT_TRY(ct_arena_alloc(ctx->arena, ct_tensor_nbytes(&l->save_mean), &l->save_mean.data));
    CT_TRY(ct_arena_alloc(ctx->arena, ct_tensor_nbytes(&l->save_rstd), &l->save_rstd.data));
    return CT_OK;
}

static ct_tensor *opt(layernorm *l, ct_tensor *t, bool present) { return l->affine && present ? t : NULL; }

/* The norm of x, or of x + residual written to sum (forward_residual: the block's residual add). */
static ct_status norm_forward(ct_module *m, const ct_tensor *x, const ct_tensor *residual, ct_tensor *sum,
                              ct_tensor *y) {
    layernorm *l = self(m);
    l->x = residual ? *sum : *x; /* what is normalised, which backward reads */
    *y = ct_tensor_rows(&l->out, 0, x->shape[0]);
    ct_op_layernorm_forward(x, residual, opt(l, &l->weight, true), opt(l, &l->bias, l->has_bias), l->eps, sum, y,
                            &l->save_mean, &l->save_rstd);
    return CT_OK;
}

static ct_status forward(ct_module *m, const ct_tensor *x, ct_tensor *y) { return norm_forward(m, x, NULL, NULL, y); }

static ct_status forward_residual(ct_module *m, const ct_tensor *x, const ct_tensor *residual, ct_tensor *sum,
                                  ct_tensor *y) {
    return norm_forward(m, x, residual, sum, y);
}

static ct_status backward(ct_module *m, const ct_tensor *dy, ct_tensor *dx) {
    layernorm *l = self(m);
    if (dx) {
        CT_ASSERT(m->need_input_grad);
        *dx = ct_tensor_rows(&l->dinput, 0, dy->shape[0]);
    }
    ct_op_layernorm_backward(&l->x, dy, opt(l, &l->weight, true), &l->save_mean, &l->save_rstd, NULL, dx,
                             opt(l, &l->dweight, true), opt(l, &l->dbias, l->has_bias));
    return CT_OK;
}

/* dx = dresidual + the norm's input gradient, in the caller's buffer. */
static ct_status backward_residual(ct_module *m, const ct_tensor *dy, const ct_tensor *dresidual, ct_tensor *dx) {
    layernorm *l = self(m);
    ct_op_layernorm_backward(&l->x, dy, opt(l, &l->weight, true), &l->save_mean, &l->save_rstd, dresidual, dx,
                             opt(l, &l->dweight, true), opt(l, &l->dbias, l->has_bias));
    return CT_OK;
}

static ct_status to_json(const ct_module *m, json_t **out) {
    const layernorm *l = ct_container_of(m, layernorm, base);
    *out = json_pack("{s:s, s:[I], s:f, s:b, s:b}", "type", "layernorm", "normalized_shape", (json_int_t)l->features,
                     "eps", l->eps, "elementwise_affine", l->affine, "bias", l->has_bias);
    return *out ? CT_OK : ct_error(CT_ERR_NOMEM, "out of memory");
}

static const ct_module_ops layernorm_ops = {
    .size = sizeof(ct_module_ops),
    .type = "layernorm",
    .infer = infer,
    .declare = declare,
    .init = init,
    .reserve = reserve,
    .forward = forward,
    .backward = backward,
    .to_json = to_json,
    .forward_residual = forward_residual,
    .backward_residual = backward_residual,
};

ct_status ct_layernorm_create(int64_t features, double eps, bool elementwise_affine, bool bias, ct_module **out) {
    if (features < 0)
        return ct_error(CT_ERR_INVALID_ARG, "layernorm: features=%lld (need >= 0, 0 to infer)", (long long)features);
    if (!(eps > 0.0)) return ct_error(CT_ERR_INVALID_ARG, "layernorm: eps=%g (need > 0)", eps);
    layernorm *l = calloc(1, sizeof *l);
    if (!l) return ct_error(CT_ERR_NOMEM, "layernorm: out of memory");
    ct_module_base_init(&l->base, &layernorm_ops);
    l->features = features;
    l->eps = eps;
    l->affine = elementwise_affine;
    l->has_bias = bias;
    *out = &l->base;
    return CT_OK;
}

/* {"type": "layernorm", "normalized_shape": 64, "eps": 1e-5, "elementwise_affine": true, "bias": true};
 * normalized_shape (PyTorch's name; an int or a list of one int) may be left out to infer it. */
ct_status ct_layernorm_from_json(const json_t *spec, const char *path, ct_module **out) {
    static const char *const keys[] = {"type", "normalized_shape", "eps", "elementwise_affine", "bias", NULL};
    CT_TRY(ct_json_check_keys(spec, path, keys));
    json_t *ns = json_object_get(spec, "normalized_shape");
    if (json_is_array(ns) && json_array_size(ns) != 1)
        return ct_error(CT_ERR_CONFIG, "%s.normalized_shape: only the last dimension can be normalised (one size, "
                        "got a list of %zu)", path, json_array_size(ns));
    int64_t f;
    double eps;
    bool affine, bias;
    CT_TRY(ct_json_ints(spec, path, "normalized_shape", false, 0, 1, &f));
    CT_TRY(ct_json_real(spec, path, "eps", false, 1e-5, &eps));
    CT_TRY(ct_json_bool(spec, path, "elementwise_affine", false, true, &affine));
    CT_TRY(ct_json_bool(spec, path, "bias", false, true, &bias));
    ct_status s = ct_layernorm_create(f, eps, affine, bias, out);
    return s == CT_OK ? s : ct_error_prefix(CT_ERR_CONFIG, "%s: ", path);
}
