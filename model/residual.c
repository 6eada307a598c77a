/* Residual: y = x + fn(x), and dx = dy + d fn/dx. The inner module is the one child, under the
 * local name "fn" (PyTorch has no standard Residual; "fn" is what most code calls the wrapped
 * function), so its parameters read "<name>.fn.weight", or "<name>.fn.0.weight" when it is a
 * Sequential. fn must map its input shape to itself and take the model's float input.
 *
 * JSON: {"type": "residual", "module": {...}} wraps one layer; {"type": "residual", "layers": [...]}
 * wraps a Sequential of them (exactly one of the two keys). */
#include <stdio.h>
#include <stdlib.h>

#include "core/json.h"
#include "core/ops/ops.h"
#include "core/util.h"
#include "model/layers.h"

typedef struct residual {
    ct_module base;
    ct_tensor out, dinput; /* own buffers: fn's output may be needed by fn's backward */
} residual;

static residual *self(ct_module *m) { return ct_container_of(m, residual, base); }

/* Containers' errors are not prefixed by the module wrappers (their children's are), so the
 * residual names itself in the errors it makes. */
static const char *display_name(const ct_module *m) { return m->name[0] ? m->name : "model"; }

static ct_status infer(ct_module *m, const ct_shape *in, ct_shape *out) {
    ct_module *fn = m->children[0];
    fn->need_input_grad = m->need_input_grad;
    fn->in_dtype = fn->dtype;
    ct_shape got;
    CT_TRY(ct_module_infer(fn, in, &got));
    if (fn->in_dtype != m->in_dtype)
        return ct_error(CT_ERR_DTYPE, "residual '%s': inner module '%s' takes %s input, the residual adds it to %s",
                        display_name(m), fn->name, ct_dtype_name(fn->in_dtype), ct_dtype_name(m->in_dtype));
    bool same = got.ndim == in->ndim;
    for (int i = 0; same && i < in->ndim; i++) same = got.dims[i] == in->dims[i];
    if (!same) {
        char a[96], b[96];
        return ct_error(CT_ERR_SHAPE, "residual '%s': inner module '%s' maps %s to %s; x + fn(x) needs the same shape",
                        display_name(m), fn->name, ct_sample_shape_str(in, a, sizeof a),
                        ct_sample_shape_str(&got, b, sizeof b));
    }
    *out = *in;
    return CT_OK;
}

static ct_status reserve(ct_module *m, const ct_reserve_ctx *ctx) {
    residual *r = self(m);
    CT_TRY(ct_reserve_activation(ctx, m->dtype, m->device, &m->out_shape, &r->out));
    if (m->need_input_grad) CT_TRY(ct_reserve_backward(ctx, m->dtype, m->device, &m->in_shape, &r->dinput));
    return CT_OK;
}

static ct_status forward(ct_module *m, const ct_tensor *x, ct_tensor *y) {
    residual *r = self(m);
    ct_tensor h;
    CT_TRY(ct_module_forward(m->children[0], x, &h));
    *y = ct_tensor_rows(&r->out, 0, x->shape[0]);
    ct_op_add(x, &h, y);
    return CT_OK;
}

static ct_status backward(ct_module *m, const ct_tensor *dy, ct_tensor *dx) {
    residual *r = self(m);
    if (!dx) return ct_module_backward(m->children[0], dy, NULL);
    ct_tensor dh;
    CT_TRY(ct_module_backward(m->children[0], dy, &dh));
    *dx = ct_tensor_rows(&r->dinput, 0, dy->shape[0]);
    ct_op_add(dy, &dh, dx);
    return CT_OK;
}

/* {"type": "residual", "module": the inner module's spec}. */
static ct_status to_json(const ct_module *m, json_t **out) {
    json_t *inner;
    CT_TRY(ct_module_to_json(m->children[0], &inner));
    *out = json_pack("{s:s, s:o}", "type", "residual", "module", inner);
    return *out ? CT_OK : ct_error(CT_ERR_NOMEM, "out of memory");
}

static const ct_module_ops residual_ops = {
    .size = sizeof(ct_module_ops),
    .type = "residual",
    .infer = infer,
    .reserve = reserve,
    .forward = forward,
    .backward = backward,
    .to_json = to_json,
};

ct_status ct_residual_create(ct_module *inner, ct_module **out) {
    if (!inner) return ct_error(CT_ERR_INVALID_ARG, "residual: no inner module");
    residual *r = calloc(1, sizeof *r);
    ct_status s = r ? CT_OK : ct_error(CT_ERR_NOMEM, "residual: out of memory");
    if (s == CT_OK) {
        ct_module_base_init(&r->base, &residual_ops);
        r->base.shares_backward = true; /* fn's gradients are dead once dy + fn'(dy) is made */
        s = ct_module_add_child(&r->base, inner, "fn");
    }
    if (s != CT_OK) {
        /* Ownership of inner was taken: release it with the half-made residual. */
        ct_module_destroy(inner);
        free(r);
        return s;
    }
    *out = &r->base;
    return CT_OK;
}

ct_status ct_residual_from_json(const json_t *spec, const char *path, ct_module **out) {
    static const char *const keys[] = {"type", "module", "layers", NULL};
    CT_TRY(ct_json_check_keys(spec, path, keys));
    json_t *one = json_object_get(spec, "module"), *many = json_object_get(spec, "layers");
    if ((one != NULL) == (many != NULL))
        return ct_error(CT_ERR_CONFIG, "%s: a residual needs exactly one of \"module\" (a layer) or \"layers\" "
                        "(a list)", path);
    ct_module *inner;
    if (one) {
        char child_path[512];
        snprintf(child_path, sizeof child_path, "%s.module", path);
        CT_TRY(ct_module_from_json(one, child_path, &inner));
    } else {
        /* The list is a Sequential's: reuse its reader (and its errors, which name path.layers[i]). */
        json_t *seq = json_pack("{s:s, s:O}", "type", "sequential", "layers", many);
        if (!seq) return ct_error(CT_ERR_NOMEM, "%s: out of memory", path);
        ct_status s = ct_sequential_from_json(seq, path, &inner);
        json_decref(seq);
        CT_TRY(s);
    }
    return ct_residual_create(inner, out);
}
