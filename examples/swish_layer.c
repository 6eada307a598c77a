/* Swish with a learnable slope: a layer written outside the library, as an application writes one.
 *
 *   y = x * s,  s = sigmoid(beta_f * x)          for every element x of feature f (the last dimension)
 *   dL/dx      = dy * (s + beta_f * x * s * (1 - s))
 *   dL/dbeta_f = sum over the rows of dy * x^2 * s * (1 - s)
 *
 * The layer is a struct whose first member is a ct_module, and a const ct_module_ops table says what
 * it does (model/module.h): infer checks the input shape and gives the output's; declare names its
 * parameter "beta" in the model's parameter store, which binds `beta` and `dbeta` to slices of the
 * model's flat parameter and gradient buffers (so optimizers, checkpoints, DDP and model.h5 handle
 * it with no code here); init sets it; reserve takes the output and input-gradient buffers for the
 * largest batch from the model's arena (nothing is allocated per step); forward keeps what backward
 * needs; backward writes dx and ADDS to dbeta (gradients accumulate over micro-batches).
 *
 * It computes on the CPU in float32 (training) or float64 (the gradient check), with plain loops over
 * ct_tensor_get / ct_tensor_set (core/tensor.h), which read and write either type. */
#include "swish_layer.h"

#include <math.h>
#include <stdlib.h>

#include "core/json.h"
#include "core/util.h"
#include "model/params.h"

typedef struct swish {
    ct_module base; /* first: the core hands hooks a ct_module *, container_of gives this back */
    int64_t features;
    double beta0;
    ct_tensor beta, dbeta; /* [features], bound by the parameter store */
    ct_tensor out, dinput; /* [max_batch, ...], from the arena */
    ct_tensor x;           /* the last forward's input, for backward */
    double *dbeta_sum;     /* [features] scratch of backward, from the arena */
} swish;

static swish *self(ct_module *m) { return ct_container_of(m, swish, base); }

static ct_status infer(ct_module *m, const ct_shape *in, ct_shape *out) {
    swish *l = self(m);
    if (m->device.kind != CT_DEVICE_CPU) return ct_error(CT_ERR_INVALID_ARG, "swish runs on the CPU only");
    if (m->dtype != CT_F32 && m->dtype != CT_F64) return ct_error(CT_ERR_INVALID_ARG, "swish computes in f32 or f64");
    if (in->ndim < 1) return ct_error(CT_ERR_SHAPE, "input must have at least one feature dimension");
    int64_t f = in->dims[in->ndim - 1];
    if (l->features == 0) l->features = f;
    if (f != l->features)
        return ct_error(CT_ERR_SHAPE, "input has %lld features in its last dimension, expected %lld", (long long)f,
                        (long long)l->features);
    *out = *in; /* elementwise */
    return CT_OK;
}

static ct_status declare(ct_module *m, ct_param_store *ps) {
    swish *l = self(m);
    /* "<layer name>.beta"; like a norm's weight, a slope is not decayed towards 0 */
    return ct_params_declare(ps, m, "beta", 1, &l->features, CT_PARAM_NO_DECAY, &l->beta, &l->dbeta);
}

static void init(ct_module *m, ct_rng *rng) {
    (void)rng; /* deterministic: every feature starts at beta0 */
    swish *l = self(m);
    for (int64_t f = 0; f < l->features; f++) ct_tensor_set(&l->beta, f, l->beta0);
}

static ct_status reserve(ct_module *m, const ct_reserve_ctx *ctx) {
    swish *l = self(m);
    CT_TRY(ct_reserve_activation(ctx, m->dtype, m->device, &m->out_shape, &l->out));
    if (m->need_input_grad) CT_TRY(ct_reserve_activation(ctx, m->dtype, m->device, &m->in_shape, &l->dinput));
    void *p;
    CT_TRY(ct_arena_alloc(ctx->arena, (size_t)l->features * sizeof(double), &p));
    l->dbeta_sum = p;
    return CT_OK;
}

static double sigmoid(double z) { return 1.0 / (1.0 + exp(-z)); }

static ct_status forward(ct_module *m, const ct_tensor *x, ct_tensor *y) {
    swish *l = self(m);
    l->x = *x;
    *y = ct_tensor_rows(&l->out, 0, x->shape[0]);
    int64_t n = ct_tensor_numel(x), F = l->features;
    for (int64_t i = 0; i < n; i++) {
        double v = ct_tensor_get(x, i);
        ct_tensor_set(y, i, v * sigmoid(ct_tensor_get(&l->beta, i % F) * v));
    }
    return CT_OK;
}

static ct_status backward(ct_module *m, const ct_tensor *dy, ct_tensor *dx) {
    swish *l = self(m);
    if (dx) *dx = ct_tensor_rows(&l->dinput, 0, dy->shape[0]);
    int64_t n = ct_tensor_numel(dy), F = l->features;
    /* the slope's gradient summed in double over the rows, then added once per feature */
    double *db = l->dbeta_sum;
    for (int64_t f = 0; f < F; f++) db[f] = 0;
    for (int64_t i = 0; i < n; i++) {
        double v = ct_tensor_get(&l->x, i), b = ct_tensor_get(&l->beta, i % F), g = ct_tensor_get(dy, i);
        double s = sigmoid(b * v), ds = s * (1.0 - s);
        if (dx) ct_tensor_set(dx, i, g * (s + b * v * ds));
        db[i % F] += g * v * v * ds;
    }
    for (int64_t f = 0; f < F; f++) ct_tensor_set(&l->dbeta, f, ct_tensor_get(&l->dbeta, f) + db[f]);
    return CT_OK;
}

static const ct_module_ops swish_ops = {
    .size = sizeof(ct_module_ops),
    .type = "swish",
    .infer = infer,
    .declare = declare,
    .init = init,
    .reserve = reserve,
    .forward = forward,
    .backward = backward,
    /* destroy NULL: nothing of its own to free (the buffers belong to the store and the arena) */
};

ct_status swish_create(int64_t features, double beta0, ct_module **out) {
    if (features < 0)
        return ct_error(CT_ERR_INVALID_ARG, "swish: features=%lld (need >= 0, 0 to infer)", (long long)features);
    if (!isfinite(beta0)) return ct_error(CT_ERR_INVALID_ARG, "swish: beta=%g (need a finite number)", beta0);
    swish *l = calloc(1, sizeof *l);
    if (!l) return ct_error(CT_ERR_NOMEM, "swish: out of memory");
    ct_module_base_init(&l->base, &swish_ops);
    l->features = features;
    l->beta0 = beta0;
    *out = &l->base;
    return CT_OK;
}

ct_status swish_from_json(const json_t *spec, const char *path, ct_module **out) {
    static const char *const keys[] = {"type", "features", "beta", NULL};
    CT_TRY(ct_json_check_keys(spec, path, keys)); /* a misspelt key gets a "did you mean" */
    int64_t features;
    double beta0;
    CT_TRY(ct_json_int(spec, path, "features", false, 0, &features));
    CT_TRY(ct_json_real(spec, path, "beta", false, 1.0, &beta0));
    ct_status s = swish_create(features, beta0, out);
    return s == CT_OK ? s : ct_error_prefix(CT_ERR_CONFIG, "%s: ", path);
}
