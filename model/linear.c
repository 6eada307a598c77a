/* Linear: y = x W^T + b over the last dimension (nn.Linear), with W of shape [out, in].
 * Leading dimensions are flattened into rows, so [B, T, in] works as the transformer needs.
 * On backends with ct_op_linear_forward the bias is added inside the GEMM, and a ReLU or a tanh GELU
 * after the layer in a Sequential is applied by it too (fuse_activation; the activation module then
 * passes through). With GELU the layer keeps the activation's input as well (the GEMM writes both).
 * Backward first takes the output gradient through the activation, as its own backward would, into
 * a buffer of the layer's. */
#include <math.h>
#include <stdlib.h>

#include "core/json.h"
#include "core/ops/backend.h"
#include "core/ops/ops.h"
#include "core/util.h"
#include "model/layers.h"
#include "model/params.h"

typedef struct linear {
    ct_module base;
    int64_t in_features, out_features;
    bool has_bias;
    ct_activation act; /* the activation after the layer, applied here (fuse_activation), or none */
    ct_tensor weight, bias, dweight, dbias;
    ct_tensor out, dinput; /* [max_batch, ..., out] and [max_batch, ..., in] */
    ct_tensor pre;         /* with GELU: the activation's input, [max_batch, ..., out] */
    ct_tensor dpre;        /* with an activation: the gradient before it, [max_batch, ..., out] */
    ct_tensor x;           /* the last input, for backward */
} linear;

static linear *self(ct_module *m) { return ct_container_of(m, linear, base); }

static ct_status infer(ct_module *m, const ct_shape *in, ct_shape *out) {
    linear *l = self(m);
    if (in->ndim < 1) return ct_error(CT_ERR_SHAPE, "input must have at least one feature dimension");
    int64_t features = in->dims[in->ndim - 1];
    if (l->in_features == 0) l->in_features = features;
    if (features != l->in_features) {
        char s[96];
        return ct_error(CT_ERR_SHAPE, "input %s has %lld features, expected in_features=%lld",
                        ct_sample_shape_str(in, s, sizeof s), (long long)features, (long long)l->in_features);
    }
    *out = *in;
    out->dims[out->ndim - 1] = l->out_features;
    l->act = CT_ACT_NONE; /* until the enclosing Sequential fuses it again */
    return CT_OK;
}

static ct_status declare(ct_module *m, ct_param_store *ps) {
    linear *l = self(m);
    int64_t wshape[2] = {l->out_features, l->in_features};
    CT_TRY(ct_params_declare(ps, m, "weight", 2, wshape, 0, &l->weight, &l->dweight));
    if (l->has_bias) CT_TRY(ct_params_declare(ps, m, "bias", 1, &l->out_features, CT_PARAM_NO_DECAY, &l->bias, &l->dbias));
    return CT_OK;
}

/* PyTorch's reset_parameters: kaiming_uniform_(a=sqrt(5)) is U(-1/sqrt(in), 1/sqrt(in)), and so is the bias. */
static void init(ct_module *m, ct_rng *rng) {
    linear *l = self(m);
    double bound = 1.0 / sqrt((double)l->in_features);
    int64_t n = ct_tensor_numel(&l->weight);
    for (int64_t i = 0; i < n; i++) ct_tensor_set(&l->weight, i, (2.0 * ct_rng_uniform(rng) - 1.0) * bound);
    if (l->has_bias)
        for (int64_t i = 0; i < l->out_features; i++)
            ct_tensor_set(&l->bias, i, (2.0 * ct_rng_uniform(rng) - 1.0) * bound);
}

static ct_status reserve(ct_module *m, const ct_reserve_ctx *ctx) {
    linear *l = self(m);
    CT_TRY(ct_reserve_activation(ctx, m->dtype, m->device, &m->out_shape, &l->out));
    if (l->act == CT_ACT_GELU_TANH) CT_TRY(ct_reserve_activation(ctx, m->dtype, m->device, &m->out_shape, &l->pre));
    if (l->act != CT_ACT_NONE) CT_TRY(ct_reserve_backward(ctx, m->dtype, m->device, &m->out_shape, &l->dpre));
    if (m->need_input_grad) CT_TRY(ct_reserve_backward(ctx, m->dtype, m->device, &m->in_shape, &l->dinput));
    return CT_OK;
}

/* The [rows, features] matrix view of a batch-major tensor. */
static ct_tensor as_matrix(const ct_tensor *t, int64_t features) {
    int64_t shape[2] = {ct_tensor_numel(t) / features, features};
    return ct_tensor_view(t->data, t->dtype, t->device, 2, shape);
}

/* The first `rows` rows of a layer buffer's matrix view (an empty view of a buffer not reserved). */
static ct_tensor first_rows(const ct_tensor *buf, int64_t rows, int64_t features) {
    if (!buf->data) return (ct_tensor){0};
    ct_tensor all = as_matrix(buf, features);
    return ct_tensor_rows(&all, 0, rows);
}

static ct_status forward(ct_module *m, const ct_tensor *x, ct_tensor *y) {
    linear *l = self(m);
    l->x = *x;
    *y = ct_tensor_rows(&l->out, 0, x->shape[0]);
    ct_tensor xm = as_matrix(x, l->in_features), ym = as_matrix(y, l->out_features);
    ct_tensor pre = first_rows(&l->pre, xm.shape[0], l->out_features);
    ct_op_linear_forward(&xm, &l->weight, l->has_bias ? &l->bias : NULL, l->act,
                         l->act == CT_ACT_GELU_TANH ? &pre : NULL, &ym);
    return CT_OK;
}

static ct_status backward(ct_module *m, const ct_tensor *dy, ct_tensor *dx) {
    linear *l = self(m);
    ct_tensor dym = as_matrix(dy, l->out_features), xm = as_matrix(&l->x, l->in_features);
    if (l->act != CT_ACT_NONE) {
        const int64_t rows = dym.shape[0];
        ct_tensor y = first_rows(&l->out, rows, l->out_features), dpre = first_rows(&l->dpre, rows, l->out_features);
        /* the activation's input: the GELU's formula needs it, the ReLU's only the output */
        ct_tensor in = l->act == CT_ACT_GELU_TANH ? first_rows(&l->pre, rows, l->out_features) : y;
        ct_op_activation_backward(l->act, &in, &y, &dym, &dpre);
        dym = dpre;
    }
    ct_tensor dxm;
    if (dx) {
        CT_ASSERT(m->need_input_grad);
        *dx = ct_tensor_rows(&l->dinput, 0, dy->shape[0]);
        dxm = as_matrix(dx, l->in_features);
    }
    ct_op_linear_backward(&dym, &xm, &l->weight, &l->dweight, l->has_bias ? &l->dbias : NULL, dx ? &dxm : NULL);
    return CT_OK;
}

/* A following ReLU or tanh GELU is applied by ct_op_linear_forward where the backend has it. */
static bool fuse_activation(ct_module *m, int act) {
    linear *l = self(m);
    const bool fusable = act == CT_ACT_RELU || act == CT_ACT_GELU_TANH;
    l->act = fusable && CT_BACKEND_HAS(m->device, linear_forward) ? (ct_activation)act : CT_ACT_NONE;
    return l->act != CT_ACT_NONE;
}

/* The layer's JSON spec (ct_module_to_json): what ct_linear_from_json reads back. */
static ct_status to_json(const ct_module *m, json_t **out) {
    const linear *l = ct_container_of(m, linear, base);
    *out = json_pack("{s:s, s:I, s:I, s:b}", "type", "linear", "in_features", (json_int_t)l->in_features,
                     "out_features", (json_int_t)l->out_features, "bias", l->has_bias);
    return *out ? CT_OK : ct_error(CT_ERR_NOMEM, "out of memory");
}

/* Every row of the sample (one, or T tokens) times the weight. */
static double forward_flops(const ct_module *m) {
    const linear *l = ct_container_of(m, linear, base);
    return 2.0 * (double)ct_shape_numel(&m->in_shape) * (double)l->out_features;
}

static const ct_module_ops linear_ops = {
    .size = sizeof(ct_module_ops),
    .type = "linear",
    .infer = infer,
    .declare = declare,
    .init = init,
    .reserve = reserve,
    .forward = forward,
    .backward = backward,
    .fuse_activation = fuse_activation,
    .to_json = to_json,
    .forward_flops = forward_flops,
};

ct_status ct_linear_create(int64_t in_features, int64_t out_features, bool bias, ct_module **out) {
    if (in_features < 0 || out_features <= 0)
        return ct_error(CT_ERR_INVALID_ARG, "linear: in_features=%lld out_features=%lld (need in >= 0, out > 0)",
                        (long long)in_features, (long long)out_features);
    linear *l = calloc(1, sizeof *l);
    if (!l) return ct_error(CT_ERR_NOMEM, "linear: out of memory");
    ct_module_base_init(&l->base, &linear_ops);
    l->in_features = in_features;
    l->out_features = out_features;
    l->has_bias = bias;
    *out = &l->base;
    return CT_OK;
}

ct_status ct_linear_from_json(const json_t *spec, const char *path, ct_module **out) {
    static const char *const keys[] = {"type", "in_features", "out_features", "bias", NULL};
    CT_TRY(ct_json_check_keys(spec, path, keys));
    int64_t in, outf;
    bool bias;
    CT_TRY(ct_json_int(spec, path, "in_features", false, 0, &in));
    CT_TRY(ct_json_int(spec, path, "out_features", true, 0, &outf));
    CT_TRY(ct_json_bool(spec, path, "bias", false, true, &bias));
    ct_status s = ct_linear_create(in, outf, bias, out);
    return s == CT_OK ? s : ct_error_prefix(s, "%s: ", path);
}
