/* Flatten: [B, d1, d2, ...] -> [B, d1*d2*...] as a view of the same memory, both ways. */
#include <stdlib.h>

#include "core/json.h"
#include "model/layers.h"

static ct_status infer(ct_module *m, const ct_shape *in, ct_shape *out) {
    (void)m;
    out->ndim = 1;
    out->dims[0] = ct_shape_numel(in);
    return CT_OK;
}

static ct_status forward(ct_module *m, const ct_tensor *x, ct_tensor *y) {
    int64_t shape[2] = {x->shape[0], m->out_shape.dims[0]};
    return ct_tensor_reshape(x, 2, shape, y);
}

static ct_status backward(ct_module *m, const ct_tensor *dy, ct_tensor *dx) {
    if (!dx) return CT_OK;
    int ndim;
    int64_t shape[CT_MAX_DIMS];
    ct_shape_with_batch(&m->in_shape, dy->shape[0], &ndim, shape);
    return ct_tensor_reshape(dy, ndim, shape, dx);
}

static ct_status to_json(const ct_module *m, json_t **out) {
    (void)m;
    *out = json_pack("{s:s}", "type", "flatten");
    return *out ? CT_OK : ct_error(CT_ERR_NOMEM, "out of memory");
}

static const ct_module_ops flatten_ops = {
    .size = sizeof(ct_module_ops), .type = "flatten", .infer = infer, .forward = forward, .backward = backward,
    .to_json = to_json};

ct_status ct_flatten_create(ct_module **out) {
    ct_module *m = calloc(1, sizeof *m);
    if (!m) return ct_error(CT_ERR_NOMEM, "flatten: out of memory");
    ct_module_base_init(m, &flatten_ops);
    *out = m;
    return CT_OK;
}

ct_status ct_flatten_from_json(const json_t *spec, const char *path, ct_module **out) {
    static const char *const keys[] = {"type", NULL};
    CT_TRY(ct_json_check_keys(spec, path, keys));
    return ct_flatten_create(out);
}
