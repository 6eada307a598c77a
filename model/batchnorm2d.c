/* BatchNorm2d (nn.BatchNorm2d) over [B, C, H, W]: per-channel statistics over batch and space.
 *
 * Parameters "weight" (init 1) and "bias" (init 0) when affine, both excluded from weight decay;
 * buffers "running_mean" (0) and "running_var" (1). A training forward normalises with the batch
 * statistics and updates the running ones with PyTorch's rule (unbiased variance, `momentum` the
 * weight of the new batch); an eval forward (m->training false) uses the running statistics.
 * PyTorch's cumulative average (momentum=None) and its num_batches_tracked counter are not kept.
 * Statistics are per process: under data parallelism each rank normalises with its own batch. */
#include <stdlib.h>

#include "core/json.h"
#include "core/ops/ops.h"
#include "core/util.h"
#include "model/layers.h"
#include "model/params.h"

typedef struct batchnorm2d {
    ct_module base;
    int64_t num_features;
    double eps, momentum;
    bool affine;
    ct_tensor weight, bias, dweight, dbias;
    ct_tensor running_mean, running_var;
    ct_tensor save_mean, save_rstd; /* float64 [C]: the statistics the last forward used */
    ct_tensor out, dinput;
    ct_tensor x;
    bool trained_forward; /* whether the last forward used batch statistics */
} batchnorm2d;

static batchnorm2d *self(ct_module *m) { return ct_container_of(m, batchnorm2d, base); }

static ct_status infer(ct_module *m, const ct_shape *in, ct_shape *out) {
    batchnorm2d *b = self(m);
    char s[96];
    if (in->ndim != 3)
        return ct_error(CT_ERR_SHAPE, "input %s is not [N, C, H, W]", ct_sample_shape_str(in, s, sizeof s));
    if (b->num_features == 0) b->num_features = in->dims[0];
    if (in->dims[0] != b->num_features)
        return ct_error(CT_ERR_SHAPE, "input %s has %lld channels, expected num_features=%lld",
                        ct_sample_shape_str(in, s, sizeof s), (long long)in->dims[0], (long long)b->num_features);
    *out = *in;
    return CT_OK;
}

static ct_status declare(ct_module *m, ct_param_store *ps) {
    batchnorm2d *b = self(m);
    int64_t c = b->num_features;
    if (b->affine) {
        /* decayed: Hugging Face exempts biases and LayerNorm's parameters only (ALL_LAYERNORM_LAYERS) */
        CT_TRY(ct_params_declare(ps, m, "weight", 1, &c, 0, &b->weight, &b->dweight));
        CT_TRY(ct_params_declare(ps, m, "bias", 1, &c, CT_PARAM_NO_DECAY, &b->bias, &b->dbias));
    }
    CT_TRY(ct_params_declare(ps, m, "running_mean", 1, &c, CT_PARAM_BUFFER, &b->running_mean, NULL));
    CT_TRY(ct_params_declare(ps, m, "running_var", 1, &c, CT_PARAM_BUFFER, &b->running_var, NULL));
    return CT_OK;
}

/* PyTorch's reset_parameters and reset_running_stats; no randomness. */
static void init(ct_module *m, ct_rng *rng) {
    (void)rng;
    batchnorm2d *b = self(m);
    if (b->affine) {
        ct_op_fill(&b->weight, 1.0);
        ct_op_fill(&b->bias, 0.0);
    }
    ct_op_fill(&b->running_mean, 0.0);
    ct_op_fill(&b->running_var, 1.0);
}

static ct_status reserve(ct_module *m, const ct_reserve_ctx *ctx) {
    batchnorm2d *b = self(m);
    CT_TRY(ct_reserve_activation(ctx, m->dtype, m->device, &m->out_shape, &b->out));
    if (m->need_input_grad) CT_TRY(ct_reserve_backward(ctx, m->dtype, m->device, &m->in_shape, &b->dinput));
    /* The saved statistics are float64 whatever the model's dtype (see ops_norm.h). */
    int64_t c = b->num_features;
    b->save_mean = ct_tensor_view(NULL, CT_F64, m->device, 1, &c);
    b->save_rstd = ct_tensor_view(NULL, CT_F64, m->device, 1, &c);
    CT_TRY(ct_arena_alloc(ctx->arena, ct_tensor_nbytes(&b->save_mean), &b->save_mean.data));
    CT_TRY(ct_arena_alloc(ctx->arena, ct_tensor_nbytes(&b->save_rstd), &b->save_rstd.data));
    return CT_OK;
}

static ct_status forward(ct_module *m, const ct_tensor *x, ct_tensor *y) {
    batchnorm2d *b = self(m);
    int64_t per_channel = x->shape[0] * x->shape[2] * x->shape[3];
    if (m->training && per_channel < 2) {
        char s[128];
        return ct_error(CT_ERR_SHAPE, "expected more than 1 value per channel when training, got input %s",
                        ct_tensor_str(x, s, sizeof s));
    }
    b->x = *x;
    b->trained_forward = m->training;
    *y = ct_tensor_rows(&b->out, 0, x->shape[0]);
    ct_op_batchnorm_forward(x, b->affine ? &b->weight : NULL, b->affine ? &b->bias : NULL, &b->running_mean,
                            &b->running_var, m->training, b->momentum, b->eps, y, &b->save_mean, &b->save_rstd);
    return CT_OK;
}

static ct_status backward(ct_module *m, const ct_tensor *dy, ct_tensor *dx) {
    batchnorm2d *b = self(m);
    if (dx) {
        CT_ASSERT(m->need_input_grad);
        *dx = ct_tensor_rows(&b->dinput, 0, dy->shape[0]);
    }
    ct_op_batchnorm_backward(&b->x, dy, b->affine ? &b->weight : NULL, &b->save_mean, &b->save_rstd,
                             b->trained_forward, dx, b->affine ? &b->dweight : NULL, b->affine ? &b->dbias : NULL);
    return CT_OK;
}

static ct_status to_json(const ct_module *m, json_t **out) {
    const batchnorm2d *b = ct_container_of(m, batchnorm2d, base);
    *out = json_pack("{s:s, s:I, s:f, s:f, s:b}", "type", "batchnorm2d", "num_features", (json_int_t)b->num_features,
                     "eps", b->eps, "momentum", b->momentum, "affine", b->affine);
    return *out ? CT_OK : ct_error(CT_ERR_NOMEM, "out of memory");
}

static const ct_module_ops batchnorm2d_ops = {
    .size = sizeof(ct_module_ops),
    .type = "batchnorm2d",
    .infer = infer,
    .declare = declare,
    .init = init,
    .reserve = reserve,
    .forward = forward,
    .backward = backward,
    .to_json = to_json,
};

ct_status ct_batchnorm2d_create(int64_t num_features, double eps, double momentum, bool affine, ct_module **out) {
    if (num_features < 0)
        return ct_error(CT_ERR_INVALID_ARG, "batchnorm2d: num_features=%lld (need >= 0, 0 to infer)",
                        (long long)num_features);
    if (!(eps > 0.0))
        return ct_error(CT_ERR_INVALID_ARG, "batchnorm2d: eps=%g (need > 0)", eps);
    if (!(momentum >= 0.0 && momentum <= 1.0))
        return ct_error(CT_ERR_INVALID_ARG, "batchnorm2d: momentum=%g (need 0 <= momentum <= 1)", momentum);
    batchnorm2d *b = calloc(1, sizeof *b);
    if (!b) return ct_error(CT_ERR_NOMEM, "batchnorm2d: out of memory");
    ct_module_base_init(&b->base, &batchnorm2d_ops);
    b->num_features = num_features;
    b->eps = eps;
    b->momentum = momentum;
    b->affine = affine;
    *out = &b->base;
    return CT_OK;
}

/* {"type": "batchnorm2d", "num_features": 16, "eps": 1e-5, "momentum": 0.1, "affine": true};
 * num_features may be left out (inferred from the input's channels). */
ct_status ct_batchnorm2d_from_json(const json_t *spec, const char *path, ct_module **out) {
    static const char *const keys[] = {"type", "num_features", "eps", "momentum", "affine", NULL};
    CT_TRY(ct_json_check_keys(spec, path, keys));
    int64_t c;
    double eps, momentum;
    bool affine;
    CT_TRY(ct_json_int(spec, path, "num_features", false, 0, &c));
    CT_TRY(ct_json_real(spec, path, "eps", false, 1e-5, &eps));
    CT_TRY(ct_json_real(spec, path, "momentum", false, 0.1, &momentum));
    CT_TRY(ct_json_bool(spec, path, "affine", false, true, &affine));
    ct_status s = ct_batchnorm2d_create(c, eps, momentum, affine, out);
    return s == CT_OK ? s : ct_error_prefix(CT_ERR_CONFIG, "%s: ", path);
}
