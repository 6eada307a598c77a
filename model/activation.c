/* Elementwise activation layers: ReLU, GELU (exact or tanh), Tanh, Sigmoid. One module type with
 * the function as data; each keeps its output (and input) for the backward formula it needs. When
 * the layer before it applies the function itself (ct_activation_fuse), it is a pass-through with no
 * buffers of its own. */
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "core/ops/ops.h"
#include "core/util.h"
#include "model/layers.h"

typedef struct activation {
    ct_module base;
    ct_activation act;
    bool fused; /* the previous layer applies act: forward and backward pass through */
    ct_tensor out, dinput;
    ct_tensor x, y;
} activation;

static activation *self(ct_module *m) { return ct_container_of(m, activation, base); }

static ct_status reserve(ct_module *m, const ct_reserve_ctx *ctx) {
    activation *a = self(m);
    if (a->fused) return CT_OK;
    CT_TRY(ct_reserve_activation(ctx, m->dtype, m->device, &m->out_shape, &a->out));
    if (m->need_input_grad) CT_TRY(ct_reserve_backward(ctx, m->dtype, m->device, &m->in_shape, &a->dinput));
    return CT_OK;
}

static ct_status forward(ct_module *m, const ct_tensor *x, ct_tensor *y) {
    activation *a = self(m);
    if (a->fused) {
        *y = *x;
        return CT_OK;
    }
    *y = ct_tensor_rows(&a->out, 0, x->shape[0]);
    ct_op_activation_forward(a->act, x, y);
    a->x = *x;
    a->y = *y;
    return CT_OK;
}

static ct_status backward(ct_module *m, const ct_tensor *dy, ct_tensor *dx) {
    activation *a = self(m);
    if (!dx) return CT_OK; /* no parameters: nothing to do without an input gradient */
    if (a->fused) {
        *dx = *dy;
        return CT_OK;
    }
    *dx = ct_tensor_rows(&a->dinput, 0, dy->shape[0]);
    ct_op_activation_backward(a->act, &a->x, &a->y, dy, dx);
    return CT_OK;
}

static ct_status to_json(const ct_module *m, json_t **out) {
    const activation *a = ct_container_of(m, activation, base);
    *out = a->act == CT_ACT_GELU_TANH ? json_pack("{s:s, s:s}", "type", "gelu", "approximate", "tanh")
                                      : json_pack("{s:s}", "type", m->ops->type);
    return *out ? CT_OK : ct_error(CT_ERR_NOMEM, "out of memory");
}

static const ct_module_ops ops[] = {
    [CT_ACT_NONE] = {.size = sizeof(ct_module_ops), .type = "identity", .reserve = reserve, .forward = forward, .backward = backward, .to_json = to_json},
    [CT_ACT_RELU] = {.size = sizeof(ct_module_ops), .type = "relu", .reserve = reserve, .forward = forward, .backward = backward, .to_json = to_json},
    [CT_ACT_GELU] = {.size = sizeof(ct_module_ops), .type = "gelu", .reserve = reserve, .forward = forward, .backward = backward, .to_json = to_json},
    [CT_ACT_GELU_TANH] = {.size = sizeof(ct_module_ops), .type = "gelu", .reserve = reserve, .forward = forward, .backward = backward, .to_json = to_json},
    [CT_ACT_TANH] = {.size = sizeof(ct_module_ops), .type = "tanh", .reserve = reserve, .forward = forward, .backward = backward, .to_json = to_json},
    [CT_ACT_SIGMOID] = {.size = sizeof(ct_module_ops), .type = "sigmoid", .reserve = reserve, .forward = forward, .backward = backward, .to_json = to_json},
};

static bool is_activation(const ct_module *m) {
    return m->ops >= ops && m->ops < ops + CT_ARRAY_LEN(ops);
}

bool ct_activation_is_fused(const ct_module *m) {
    return is_activation(m) && ct_container_of(m, const activation, base)->fused;
}

void ct_activation_fuse(ct_module *prev, ct_module *next) {
    if (!is_activation(next)) return;
    activation *a = self(next);
    a->fused = a->act != CT_ACT_NONE && ct_module_fuse_activation(prev, (int)a->act);
}

ct_status ct_activation_create(ct_activation act, ct_module **out) {
    if ((unsigned)act >= CT_ARRAY_LEN(ops)) return ct_error(CT_ERR_INVALID_ARG, "activation: unknown function %d", act);
    activation *a = calloc(1, sizeof *a);
    if (!a) return ct_error(CT_ERR_NOMEM, "activation: out of memory");
    ct_module_base_init(&a->base, &ops[act]);
    a->act = act;
    *out = &a->base;
    return CT_OK;
}

ct_status ct_activation_from_json(const json_t *spec, const char *path, ct_module **out) {
    const char *type;
    CT_TRY(ct_json_string(spec, path, "type", true, NULL, &type));
    ct_activation act;
    if (strcmp(type, "gelu") == 0) {
        static const char *const keys[] = {"type", "approximate", NULL};
        CT_TRY(ct_json_check_keys(spec, path, keys));
        const char *approx;
        CT_TRY(ct_json_string(spec, path, "approximate", false, "none", &approx));
        if (strcmp(approx, "none") == 0)
            act = CT_ACT_GELU;
        else if (strcmp(approx, "tanh") == 0)
            act = CT_ACT_GELU_TANH;
        else
            return ct_error(CT_ERR_CONFIG, "%s.approximate: '%s' is not \"none\" or \"tanh\"", path, approx);
    } else {
        static const char *const keys[] = {"type", NULL};
        CT_TRY(ct_json_check_keys(spec, path, keys));
        act = strcmp(type, "relu") == 0 ? CT_ACT_RELU : strcmp(type, "tanh") == 0 ? CT_ACT_TANH : CT_ACT_SIGMOID;
    }
    return ct_activation_create(act, out);
}
