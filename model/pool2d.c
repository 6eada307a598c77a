/* MaxPool2d and AvgPool2d over NCHW input (nn.MaxPool2d / nn.AvgPool2d with ceil_mode=False).
 *
 * One struct serves both; the ops table says which. Max pooling keeps the argmax of each window
 * (an int32 tensor reserved with the activations) so backward is a scatter. Hyperparameters follow
 * PyTorch's rules: padding at most half the kernel, an output of at least 1x1.
 *
 * A 2x2 max pooling right after a convolution and its ReLU is done by the convolution on the CPU,
 * while each output plane is in cache (ct_maxpool2d_fuse); this module then passes through.
 *
 * In the C config, stride 0 means PyTorch's default (stride = kernel_size) and dilation 0 means 1. */
#include <stdio.h>
#include <stdlib.h>

#include "core/json.h"
#include "core/ops/ops.h"
#include "core/util.h"
#include "model/layers.h"

typedef struct pool2d {
    ct_module base;
    bool is_max;
    ct_pool2d_config cfg;
    ct_pool2d_geom geom;
    ct_tensor out, dinput, indices; /* indices: max pooling only */
    bool fused; /* the layer before pools: forward and backward pass through */
} pool2d;

static pool2d *self(ct_module *m) { return ct_container_of(m, pool2d, base); }

static ct_status infer(ct_module *m, const ct_shape *in, ct_shape *out) {
    pool2d *l = self(m);
    const ct_pool2d_config *c = &l->cfg;
    char s[96];
    ct_sample_shape_str(in, s, sizeof s);
    if (in->ndim != 3) return ct_error(CT_ERR_SHAPE, "input %s must be [N, C, H, W]", s);
    l->fused = false; /* until the enclosing Sequential fuses it again */
    ct_pool2d_geom *g = &l->geom;
    *g = (ct_pool2d_geom){.channels = in->dims[0], .in_h = in->dims[1], .in_w = in->dims[2],
                          .count_include_pad = c->count_include_pad};
    for (int i = 0; i < 2; i++) {
        g->kernel[i] = c->kernel[i];
        g->stride[i] = c->stride[i];
        g->padding[i] = c->padding[i];
        g->dilation[i] = l->is_max ? c->dilation[i] : 1;
    }
    g->out_h = ct_conv_out_size(g->in_h, g->kernel[0], g->stride[0], g->padding[0], g->dilation[0]);
    g->out_w = ct_conv_out_size(g->in_w, g->kernel[1], g->stride[1], g->padding[1], g->dilation[1]);
    if (g->out_h < 1 || g->out_w < 1)
        return ct_error(CT_ERR_SHAPE,
                        "input %s gives an output of %lldx%lld, too small (kernel_size=(%lld, %lld), "
                        "stride=(%lld, %lld), padding=(%lld, %lld), dilation=(%lld, %lld))",
                        s, (long long)g->out_h, (long long)g->out_w, (long long)g->kernel[0],
                        (long long)g->kernel[1], (long long)g->stride[0], (long long)g->stride[1],
                        (long long)g->padding[0], (long long)g->padding[1], (long long)g->dilation[0],
                        (long long)g->dilation[1]);
    if (l->is_max && (g->out_h * g->out_w > INT32_MAX || g->in_h * g->in_w > INT32_MAX))
        return ct_error(CT_ERR_SHAPE, "input %s: planes over 2^31 elements are not supported", s);
    *out = (ct_shape){3, {g->channels, g->out_h, g->out_w}};
    return CT_OK;
}

static ct_status reserve(ct_module *m, const ct_reserve_ctx *ctx) {
    pool2d *l = self(m);
    if (l->fused) return CT_OK;
    CT_TRY(ct_reserve_activation(ctx, m->dtype, m->device, &m->out_shape, &l->out));
    if (l->is_max) CT_TRY(ct_reserve_activation(ctx, CT_I32, m->device, &m->out_shape, &l->indices));
    if (m->need_input_grad) CT_TRY(ct_reserve_backward(ctx, m->dtype, m->device, &m->in_shape, &l->dinput));
    return CT_OK;
}

static ct_status forward(ct_module *m, const ct_tensor *x, ct_tensor *y) {
    pool2d *l = self(m);
    if (l->fused) {
        *y = *x;
        return CT_OK;
    }
    *y = ct_tensor_rows(&l->out, 0, x->shape[0]);
    if (l->is_max) {
        ct_tensor idx = ct_tensor_rows(&l->indices, 0, x->shape[0]);
        ct_op_maxpool2d_forward(&l->geom, x, y, &idx);
    } else {
        ct_op_avgpool2d_forward(&l->geom, x, y);
    }
    return CT_OK;
}

static ct_status backward(ct_module *m, const ct_tensor *dy, ct_tensor *dx) {
    pool2d *l = self(m);
    if (!dx) return CT_OK; /* no parameters: nothing else to compute */
    if (l->fused) {
        *dx = *dy;
        return CT_OK;
    }
    CT_ASSERT(m->need_input_grad);
    *dx = ct_tensor_rows(&l->dinput, 0, dy->shape[0]);
    if (l->is_max) {
        ct_tensor idx = ct_tensor_rows(&l->indices, 0, dy->shape[0]);
        ct_op_maxpool2d_backward(&l->geom, dy, &idx, dx);
    } else {
        ct_op_avgpool2d_backward(&l->geom, dy, dx);
    }
    return CT_OK;
}

static ct_status to_json(const ct_module *m, json_t **out) {
    const pool2d *p = ct_container_of(m, pool2d, base);
    const ct_pool2d_config *c = &p->cfg;
    *out = json_pack("{s:s, s:[I,I], s:[I,I], s:[I,I]}", "type", m->ops->type, "kernel_size", (json_int_t)c->kernel[0],
                     (json_int_t)c->kernel[1], "stride", (json_int_t)c->stride[0], (json_int_t)c->stride[1],
                     "padding", (json_int_t)c->padding[0], (json_int_t)c->padding[1]);
    if (*out && p->is_max)
        json_object_set_new(*out, "dilation", json_pack("[I,I]", (json_int_t)c->dilation[0], (json_int_t)c->dilation[1]));
    else if (*out)
        json_object_set_new(*out, "count_include_pad", json_boolean(c->count_include_pad));
    return *out ? CT_OK : ct_error(CT_ERR_NOMEM, "out of memory");
}

static const ct_module_ops maxpool2d_ops = {
    .size = sizeof(ct_module_ops),
    .type = "maxpool2d",
    .infer = infer,
    .reserve = reserve,
    .forward = forward,
    .backward = backward,
    .to_json = to_json,
};

static const ct_module_ops avgpool2d_ops = {
    .size = sizeof(ct_module_ops),
    .type = "avgpool2d",
    .infer = infer,
    .reserve = reserve,
    .forward = forward,
    .backward = backward,
    .to_json = to_json,
};

bool ct_maxpool2d_fuse(ct_module *prev, ct_module *pool) {
    if (pool->ops != &maxpool2d_ops) return false;
    pool2d *l = self(pool);
    l->fused = ct_module_fuse_maxpool(prev, &l->geom);
    return l->fused;
}

static ct_status create(const ct_pool2d_config *cfg, bool is_max, ct_module **out) {
    const char *who = is_max ? "maxpool2d" : "avgpool2d";
    ct_pool2d_config c = *cfg;
    for (int i = 0; i < 2; i++) {
        if (c.stride[i] == 0) c.stride[i] = c.kernel[i];
        if (c.dilation[i] == 0 || !is_max) c.dilation[i] = 1;
    }
    if (c.kernel[0] <= 0 || c.kernel[1] <= 0 || c.stride[0] < 0 || c.stride[1] < 0 || c.padding[0] < 0 ||
        c.padding[1] < 0 || c.dilation[0] < 0 || c.dilation[1] < 0)
        return ct_error(CT_ERR_INVALID_ARG,
                        "%s: kernel_size=(%lld, %lld) stride=(%lld, %lld) padding=(%lld, %lld) dilation=(%lld, %lld) "
                        "(need kernel, stride, dilation > 0 and padding >= 0)",
                        who, (long long)c.kernel[0], (long long)c.kernel[1], (long long)c.stride[0],
                        (long long)c.stride[1], (long long)c.padding[0], (long long)c.padding[1],
                        (long long)c.dilation[0], (long long)c.dilation[1]);
    /* PyTorch's rule: a window must never be mostly padding. */
    if (c.padding[0] > c.kernel[0] / 2 || c.padding[1] > c.kernel[1] / 2)
        return ct_error(CT_ERR_CONFIG, "%s: padding=(%lld, %lld) must be at most half of kernel_size=(%lld, %lld)", who,
                        (long long)c.padding[0], (long long)c.padding[1], (long long)c.kernel[0],
                        (long long)c.kernel[1]);
    pool2d *l = calloc(1, sizeof *l);
    if (!l) return ct_error(CT_ERR_NOMEM, "%s: out of memory", who);
    ct_module_base_init(&l->base, is_max ? &maxpool2d_ops : &avgpool2d_ops);
    l->is_max = is_max;
    l->cfg = c;
    *out = &l->base;
    return CT_OK;
}

ct_status ct_maxpool2d_create(const ct_pool2d_config *cfg, ct_module **out) { return create(cfg, true, out); }
ct_status ct_avgpool2d_create(const ct_pool2d_config *cfg, ct_module **out) { return create(cfg, false, out); }

static ct_status from_json(const json_t *spec, const char *path, bool is_max, ct_module **out) {
    static const char *const max_keys[] = {"type", "kernel_size", "stride", "padding", "dilation", "ceil_mode", NULL};
    static const char *const avg_keys[] = {"type",      "kernel_size",       "stride", "padding",
                                           "ceil_mode", "count_include_pad", NULL};
    CT_TRY(ct_json_check_keys(spec, path, is_max ? max_keys : avg_keys));
    ct_pool2d_config c = {.count_include_pad = true};
    bool ceil_mode;
    CT_TRY(ct_json_ints(spec, path, "kernel_size", true, 0, 2, c.kernel));
    /* stride: absent or null means the kernel size, as in PyTorch; explicit values must be positive. */
    if (!json_is_null(json_object_get(spec, "stride"))) {
        CT_TRY(ct_json_ints(spec, path, "stride", false, 0, 2, c.stride));
        if (json_object_get(spec, "stride") && (c.stride[0] < 1 || c.stride[1] < 1))
            return ct_error(CT_ERR_CONFIG, "%s.stride: expected positive values, got (%lld, %lld)", path,
                            (long long)c.stride[0], (long long)c.stride[1]);
    }
    CT_TRY(ct_json_ints(spec, path, "padding", false, 0, 2, c.padding));
    if (is_max) {
        CT_TRY(ct_json_ints(spec, path, "dilation", false, 1, 2, c.dilation));
        if (c.dilation[0] < 1 || c.dilation[1] < 1)
            return ct_error(CT_ERR_CONFIG, "%s.dilation: expected positive values, got (%lld, %lld)", path,
                            (long long)c.dilation[0], (long long)c.dilation[1]);
    } else {
        CT_TRY(ct_json_bool(spec, path, "count_include_pad", false, true, &c.count_include_pad));
    }
    CT_TRY(ct_json_bool(spec, path, "ceil_mode", false, false, &ceil_mode));
    if (ceil_mode) return ct_error(CT_ERR_UNSUPPORTED, "%s.ceil_mode: only ceil_mode=false is supported", path);
    ct_status s = create(&c, is_max, out);
    return s == CT_OK ? s : ct_error_prefix(s, "%s: ", path);
}

ct_status ct_maxpool2d_from_json(const json_t *spec, const char *path, ct_module **out) {
    return from_json(spec, path, true, out);
}

ct_status ct_avgpool2d_from_json(const json_t *spec, const char *path, ct_module **out) {
    return from_json(spec, path, false, out);
}
