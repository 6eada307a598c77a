/* Conv2d: nn.Conv2d with groups=1 and zero padding over NCHW input; weight [out, in, kh, kw].
 *
 * The layer checks shapes and hyperparameters (so users get messages naming the layer) and leaves
 * the arithmetic to ct_op_conv2d_* (im2col + GEMM, backends/cpu/conv.c). Its workspace (a column matrix
 * and partial gradient sums per thread) is reserved with the activations; forward and backward
 * allocate nothing. On the CPU a ReLU that follows it in a Sequential is applied here, per sample
 * while the output is in cache (fuse_activation), and so is a 2x2 max pooling after that ReLU
 * (fuse_maxpool): the un-pooled output then never leaves the thread's cache, and the layer's output
 * is the pooled one with its argmax indices.
 *
 * In the C config, in_channels 0 means "inferred from the input", and stride or dilation 0 means
 * PyTorch's default of 1, so a designated initialiser only needs the fields it cares about. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/json.h"
#include "core/ops/backend.h"
#include "core/ops/ops.h"
#include "core/util.h"
#include "model/layers.h"
#include "model/params.h"

typedef struct conv2d {
    ct_module base;
    ct_conv2d_config cfg;
    ct_conv2d_geom geom;
    ct_tensor weight, bias, dweight, dbias;
    ct_tensor out, dinput, ws;
    ct_tensor indices; /* with a fused pooling: each window's argmax */
    ct_tensor x, y;    /* the last input and output, for backward */
} conv2d;

static conv2d *self(ct_module *m) { return ct_container_of(m, conv2d, base); }

static ct_status infer(ct_module *m, const ct_shape *in, ct_shape *out) {
    conv2d *l = self(m);
    const ct_conv2d_config *c = &l->cfg;
    char s[96];
    ct_sample_shape_str(in, s, sizeof s);
    if (in->ndim != 3)
        return ct_error(CT_ERR_SHAPE, "input %s must be [N, C, H, W] (in_channels=%lld)", s,
                        (long long)c->in_channels);
    if (l->cfg.in_channels == 0) l->cfg.in_channels = in->dims[0];
    if (in->dims[0] != c->in_channels)
        return ct_error(CT_ERR_SHAPE, "input %s has %lld channels, expected in_channels=%lld", s,
                        (long long)in->dims[0], (long long)c->in_channels);
    ct_conv2d_geom *g = &l->geom;
    *g = (ct_conv2d_geom){.in_channels = c->in_channels, .in_h = in->dims[1], .in_w = in->dims[2],
                          .out_channels = c->out_channels};
    for (int i = 0; i < 2; i++) {
        g->kernel[i] = c->kernel[i];
        g->stride[i] = c->stride[i];
        g->padding[i] = c->padding[i];
        g->dilation[i] = c->dilation[i];
    }
    /* PyTorch's check: the dilated kernel must fit in the padded input. */
    int64_t eff_h = c->dilation[0] * (c->kernel[0] - 1) + 1, eff_w = c->dilation[1] * (c->kernel[1] - 1) + 1;
    int64_t pad_h = g->in_h + 2 * c->padding[0], pad_w = g->in_w + 2 * c->padding[1];
    if (pad_h < eff_h || pad_w < eff_w)
        return ct_error(CT_ERR_SHAPE,
                        "input %s padded to %lldx%lld is smaller than the kernel %lldx%lld (kernel_size=(%lld, %lld), "
                        "dilation=(%lld, %lld), padding=(%lld, %lld))",
                        s, (long long)pad_h, (long long)pad_w, (long long)eff_h, (long long)eff_w,
                        (long long)c->kernel[0], (long long)c->kernel[1], (long long)c->dilation[0],
                        (long long)c->dilation[1], (long long)c->padding[0], (long long)c->padding[1]);
    g->out_h = ct_conv_out_size(g->in_h, g->kernel[0], g->stride[0], g->padding[0], g->dilation[0]);
    g->out_w = ct_conv_out_size(g->in_w, g->kernel[1], g->stride[1], g->padding[1], g->dilation[1]);
    *out = (ct_shape){3, {g->out_channels, g->out_h, g->out_w}};
    return CT_OK;
}

static ct_status declare(ct_module *m, ct_param_store *ps) {
    conv2d *l = self(m);
    int64_t wshape[4] = {l->cfg.out_channels, l->cfg.in_channels, l->cfg.kernel[0], l->cfg.kernel[1]};
    CT_TRY(ct_params_declare(ps, m, "weight", 4, wshape, 0, &l->weight, &l->dweight));
    if (l->cfg.bias)
        CT_TRY(ct_params_declare(ps, m, "bias", 1, &l->cfg.out_channels, CT_PARAM_NO_DECAY, &l->bias, &l->dbias));
    return CT_OK;
}

/* PyTorch's reset_parameters: kaiming_uniform_(a=sqrt(5)) is U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with
 * fan_in = in*kh*kw, and the bias uses the same bound. */
static void init(ct_module *m, ct_rng *rng) {
    conv2d *l = self(m);
    double bound = 1.0 / sqrt((double)(l->cfg.in_channels * l->cfg.kernel[0] * l->cfg.kernel[1]));
    int64_t n = ct_tensor_numel(&l->weight);
    for (int64_t i = 0; i < n; i++) ct_tensor_set(&l->weight, i, (2.0 * ct_rng_uniform(rng) - 1.0) * bound);
    if (l->cfg.bias)
        for (int64_t i = 0; i < l->cfg.out_channels; i++)
            ct_tensor_set(&l->bias, i, (2.0 * ct_rng_uniform(rng) - 1.0) * bound);
}

static ct_status reserve(ct_module *m, const ct_reserve_ctx *ctx) {
    conv2d *l = self(m);
    CT_TRY(ct_reserve_activation(ctx, m->dtype, m->device, &m->out_shape, &l->out));
    if (l->geom.pool2x2) CT_TRY(ct_reserve_activation(ctx, CT_I32, m->device, &m->out_shape, &l->indices));
    if (m->need_input_grad) CT_TRY(ct_reserve_backward(ctx, m->dtype, m->device, &m->in_shape, &l->dinput));
    int64_t ws = ct_conv2d_workspace_numel(&l->geom, ctx->max_batch);
    l->ws = ct_tensor_view(NULL, m->dtype, m->device, 1, &ws);
    return ct_arena_alloc(ctx->arena, ct_tensor_nbytes(&l->ws), &l->ws.data);
}

static ct_status forward(ct_module *m, const ct_tensor *x, ct_tensor *y) {
    conv2d *l = self(m);
    l->x = *x;
    *y = ct_tensor_rows(&l->out, 0, x->shape[0]);
    const ct_tensor *bias = l->cfg.bias ? &l->bias : NULL;
    if (l->geom.pool2x2) {
        ct_tensor idx = ct_tensor_rows(&l->indices, 0, x->shape[0]);
        ct_op_conv2d_relu_pool_forward(&l->geom, x, &l->weight, bias, y, &idx, &l->ws);
    } else {
        ct_op_conv2d_forward(&l->geom, x, &l->weight, bias, y, &l->ws);
    }
    l->y = *y;
    return CT_OK;
}

static ct_status backward(ct_module *m, const ct_tensor *dy, ct_tensor *dx) {
    conv2d *l = self(m);
    if (dx) {
        CT_ASSERT(m->need_input_grad);
        *dx = ct_tensor_rows(&l->dinput, 0, dy->shape[0]);
    }
    ct_tensor *dbias = l->cfg.bias ? &l->dbias : NULL;
    if (l->geom.pool2x2) {
        ct_tensor idx = ct_tensor_rows(&l->indices, 0, dy->shape[0]);
        ct_op_conv2d_relu_pool_backward(&l->geom, &l->x, &l->weight, &l->y, &idx, dy, &l->dweight, dbias, dx, &l->ws);
    } else if (l->geom.relu)
        ct_op_conv2d_relu_backward(&l->geom, &l->x, &l->weight, &l->y, dy, &l->dweight, dbias, dx, &l->ws);
    else
        ct_op_conv2d_backward(&l->geom, &l->x, &l->weight, dy, &l->dweight, dbias, dx, &l->ws);
    return CT_OK;
}

/* A following ReLU is applied by the convolution kernels while each sample's output is in cache,
 * on backends that have the fused kernels (the CPU's; the checked device's, which are the CPU's). */
static bool fuse_activation(ct_module *m, int act) {
    conv2d *l = self(m);
    l->geom.relu = act == CT_ACT_RELU && CT_BACKEND_HAS(m->device, conv2d_relu_backward);
    return l->geom.relu;
}

/* A 2x2 / stride 2 max pooling after the fused ReLU is applied per output plane while it is in
 * cache; the layer's output becomes the pooled one. */
static bool fuse_maxpool(ct_module *m, const ct_pool2d_geom *p) {
    conv2d *l = self(m);
    const ct_conv2d_geom *g = &l->geom;
    l->geom.pool2x2 = g->relu && CT_BACKEND_HAS(m->device, conv2d_relu_pool_forward) &&
                      CT_BACKEND_HAS(m->device, conv2d_relu_pool_backward) && p->kernel[0] == 2 && p->kernel[1] == 2 &&
                      p->stride[0] == 2 && p->stride[1] == 2 && p->padding[0] == 0 && p->padding[1] == 0 &&
                      p->dilation[0] == 1 && p->dilation[1] == 1 && p->in_h == g->out_h && p->in_w == g->out_w &&
                      p->channels == g->out_channels && g->out_h * g->out_w <= INT32_MAX;
    if (l->geom.pool2x2) m->out_shape = (ct_shape){3, {g->out_channels, g->out_h / 2, g->out_w / 2}};
    return l->geom.pool2x2;
}

static ct_status to_json(const ct_module *m, json_t **out) {
    const ct_conv2d_config *c = &ct_container_of(m, conv2d, base)->cfg;
    *out = json_pack("{s:s, s:I, s:I, s:[I,I], s:[I,I], s:[I,I], s:[I,I], s:b}", "type", "conv2d", "in_channels",
                     (json_int_t)c->in_channels, "out_channels", (json_int_t)c->out_channels, "kernel_size",
                     (json_int_t)c->kernel[0], (json_int_t)c->kernel[1], "stride", (json_int_t)c->stride[0],
                     (json_int_t)c->stride[1], "padding", (json_int_t)c->padding[0], (json_int_t)c->padding[1],
                     "dilation", (json_int_t)c->dilation[0], (json_int_t)c->dilation[1], "bias", c->bias);
    return *out ? CT_OK : ct_error(CT_ERR_NOMEM, "out of memory");
}

/* Every output element is a dot product over in_channels x kernel taps. */
static double forward_flops(const ct_module *m) {
    const ct_conv2d_geom *g = &ct_container_of(m, conv2d, base)->geom;
    return 2.0 * (double)(g->in_channels * g->kernel[0] * g->kernel[1]) * (double)(g->out_channels * g->out_h * g->out_w);
}

static const ct_module_ops conv2d_ops = {
    .size = sizeof(ct_module_ops),
    .type = "conv2d",
    .infer = infer,
    .declare = declare,
    .init = init,
    .reserve = reserve,
    .forward = forward,
    .backward = backward,
    .fuse_activation = fuse_activation,
    .fuse_maxpool = fuse_maxpool,
    .to_json = to_json,
    .forward_flops = forward_flops,
};

ct_status ct_conv2d_create(const ct_conv2d_config *cfg, ct_module **out) {
    ct_conv2d_config c = *cfg;
    for (int i = 0; i < 2; i++) {
        if (c.stride[i] == 0) c.stride[i] = 1;
        if (c.dilation[i] == 0) c.dilation[i] = 1;
    }
    if (c.in_channels < 0 || c.out_channels <= 0)
        return ct_error(CT_ERR_INVALID_ARG, "conv2d: in_channels=%lld out_channels=%lld (need in >= 0, out > 0)",
                        (long long)c.in_channels, (long long)c.out_channels);
    if (c.kernel[0] <= 0 || c.kernel[1] <= 0 || c.stride[0] < 0 || c.stride[1] < 0 || c.padding[0] < 0 ||
        c.padding[1] < 0 || c.dilation[0] < 0 || c.dilation[1] < 0)
        return ct_error(CT_ERR_INVALID_ARG,
                        "conv2d: kernel_size=(%lld, %lld) stride=(%lld, %lld) padding=(%lld, %lld) "
                        "dilation=(%lld, %lld) (need kernel, stride, dilation > 0 and padding >= 0)",
                        (long long)c.kernel[0], (long long)c.kernel[1], (long long)c.stride[0],
                        (long long)c.stride[1], (long long)c.padding[0], (long long)c.padding[1],
                        (long long)c.dilation[0], (long long)c.dilation[1]);
    conv2d *l = calloc(1, sizeof *l);
    if (!l) return ct_error(CT_ERR_NOMEM, "conv2d: out of memory");
    ct_module_base_init(&l->base, &conv2d_ops);
    l->cfg = c;
    *out = &l->base;
    return CT_OK;
}

/* A pair of positive ints from the spec (int or [h, w]); 0 and negatives are config errors. */
static ct_status positive_pair(const json_t *spec, const char *path, const char *key, bool required, int64_t *out) {
    CT_TRY(ct_json_ints(spec, path, key, required, 1, 2, out));
    if (out[0] < 1 || out[1] < 1)
        return ct_error(CT_ERR_CONFIG, "%s.%s: expected positive values, got (%lld, %lld)", path, key,
                        (long long)out[0], (long long)out[1]);
    return CT_OK;
}

ct_status ct_conv2d_from_json(const json_t *spec, const char *path, ct_module **out) {
    static const char *const keys[] = {"type",     "in_channels", "out_channels", "kernel_size", "stride",
                                       "padding",  "dilation",    "bias",         "groups",      NULL};
    CT_TRY(ct_json_check_keys(spec, path, keys));
    ct_conv2d_config c = {0};
    int64_t groups;
    CT_TRY(ct_json_int(spec, path, "in_channels", false, 0, &c.in_channels));
    CT_TRY(ct_json_int(spec, path, "out_channels", true, 0, &c.out_channels));
    CT_TRY(positive_pair(spec, path, "kernel_size", true, c.kernel));
    CT_TRY(positive_pair(spec, path, "stride", false, c.stride));
    CT_TRY(positive_pair(spec, path, "dilation", false, c.dilation));
    CT_TRY(ct_json_ints(spec, path, "padding", false, 0, 2, c.padding));
    CT_TRY(ct_json_bool(spec, path, "bias", false, true, &c.bias));
    CT_TRY(ct_json_int(spec, path, "groups", false, 1, &groups));
    if (groups != 1)
        return ct_error(CT_ERR_UNSUPPORTED, "%s.groups: only groups=1 is supported, got %lld", path, (long long)groups);
    ct_status s = ct_conv2d_create(&c, out);
    return s == CT_OK ? s : ct_error_prefix(s, "%s: ", path);
}
