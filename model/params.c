/* Layout and binding of the flat parameter, gradient and buffer storage (see params.h). */
#include "model/params.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ops/ops.h"

void ct_params_init(ct_param_store *ps, ct_dtype dt, ct_device dev) {
    memset(ps, 0, sizeof *ps);
    ps->dtype = dt;
    ps->device = dev;
}

void ct_params_free(ct_param_store *ps) {
    ct_tensor_free(&ps->values);
    ct_tensor_free(&ps->grads);
    ct_tensor_free(&ps->buffers);
    free(ps->items);
    memset(ps, 0, sizeof *ps);
}

ct_status ct_params_declare(ct_param_store *ps, const ct_module *owner, const char *local, int ndim,
                            const int64_t *shape, unsigned flags, ct_tensor *value, ct_tensor *grad) {
    if (ps->finalized) return ct_error(CT_ERR_STATE, "parameter '%s' declared after the store was finalized", local);
    CT_ASSERT(value && (grad || (flags & CT_PARAM_BUFFER)) && ndim >= 0 && ndim <= CT_MAX_DIMS);
    ct_param p = {.ndim = ndim, .flags = flags, .value = value, .grad = (flags & CT_PARAM_BUFFER) ? NULL : grad};
    if (owner->name[0])
        snprintf(p.name, sizeof p.name, "%s.%s", owner->name, local);
    else
        snprintf(p.name, sizeof p.name, "%s", local);
    size_t bytes;
    CT_TRY(ct_shape_nbytes(ndim, shape, ps->dtype, &bytes));
    p.numel = (int64_t)(bytes / ct_dtype_size(ps->dtype));
    for (int i = 0; i < ndim; i++) p.shape[i] = shape[i];
    if (ct_params_find(ps, p.name)) return ct_error(CT_ERR_CONFIG, "parameter '%s' declared twice", p.name);
    if (ps->count == ps->cap) {
        int cap = ps->cap ? 2 * ps->cap : 16;
        ct_param *grown = realloc(ps->items, (size_t)cap * sizeof *grown);
        if (!grown) return ct_error(CT_ERR_NOMEM, "parameter store: out of memory");
        ps->items = grown;
        ps->cap = cap;
    }
    ps->items[ps->count++] = p;
    return CT_OK;
}

/* Points every declared tensor at its slice of the flat buffers. */
static void bind_views(ct_param_store *ps) {
    size_t es = ct_dtype_size(ps->dtype);
    for (int i = 0; i < ps->count; i++) {
        ct_param *p = &ps->items[i];
        bool buffer = (p->flags & CT_PARAM_BUFFER) != 0;
        char *base = buffer ? ps->buffers.data : ps->values.data;
        *p->value = ct_tensor_view(base + (size_t)p->offset * es, ps->dtype, ps->device, p->ndim, p->shape);
        if (!buffer)
            *p->grad = ct_tensor_view((char *)ps->grads.data + (size_t)p->offset * es, ps->dtype, ps->device,
                                      p->ndim, p->shape);
    }
}

ct_status ct_params_finalize(ct_param_store *ps) {
    if (ps->finalized) return CT_OK;
    /* 64-byte aligned starts keep every parameter's first element on a cache line and SIMD-aligned. */
    int64_t align = 64 / (int64_t)ct_dtype_size(ps->dtype);
    int64_t n_values = 0, n_buffers = 0;
    for (int i = 0; i < ps->count; i++) {
        ct_param *p = &ps->items[i];
        int64_t *cursor = (p->flags & CT_PARAM_BUFFER) ? &n_buffers : &n_values;
        p->offset = *cursor;
        *cursor += (p->numel + align - 1) / align * align;
    }
    CT_TRY(ct_tensor_alloc(&ps->values, ps->dtype, ps->device, 1, &n_values));
    CT_TRY(ct_tensor_alloc(&ps->grads, ps->dtype, ps->device, 1, &n_values));
    CT_TRY(ct_tensor_alloc(&ps->buffers, ps->dtype, ps->device, 1, &n_buffers));
    bind_views(ps);
    ps->finalized = true;
    return CT_OK;
}

ct_status ct_params_move(ct_param_store *ps, ct_device dev) {
    if (!ps->finalized) return ct_error(CT_ERR_STATE, "parameter store: moved before it was finalized");
    if (ct_device_eq(ps->device, dev)) return CT_OK;
    ct_tensor v = {0}, g = {0}, b = {0};
    ct_status s = ct_tensor_alloc(&v, ps->dtype, dev, 1, ps->values.shape);
    if (s == CT_OK) s = ct_tensor_alloc(&g, ps->dtype, dev, 1, ps->grads.shape);
    if (s == CT_OK) s = ct_tensor_alloc(&b, ps->dtype, dev, 1, ps->buffers.shape);
    if (s == CT_OK) s = ct_tensor_copy_to(&v, &ps->values);
    if (s == CT_OK) s = ct_tensor_copy_to(&g, &ps->grads);
    if (s == CT_OK) s = ct_tensor_copy_to(&b, &ps->buffers);
    if (s != CT_OK) {
        ct_tensor_free(&v), ct_tensor_free(&g), ct_tensor_free(&b);
        return ct_error_prefix(s, "parameter store: ");
    }
    ct_tensor_free(&ps->values), ct_tensor_free(&ps->grads), ct_tensor_free(&ps->buffers);
    ps->values = v, ps->grads = g, ps->buffers = b;
    ps->device = dev;
    bind_views(ps);
    return CT_OK;
}

const ct_param *ct_params_find(const ct_param_store *ps, const char *name) {
    for (int i = 0; i < ps->count; i++)
        if (strcmp(ps->items[i].name, name) == 0) return &ps->items[i];
    return NULL;
}

int64_t ct_params_count(const ct_param_store *ps) {
    int64_t n = 0;
    for (int i = 0; i < ps->count; i++)
        if (!(ps->items[i].flags & CT_PARAM_BUFFER)) n += ps->items[i].numel;
    return n;
}

void ct_params_zero_grad(ct_param_store *ps) {
    if (ps->grads.data) ct_op_fill(&ps->grads, 0.0);
}
