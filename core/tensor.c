/* Tensor views, allocation and the shape checks that give layers their error messages. */
#include "core/tensor.h"

#include <math.h>

#include <stdint.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

size_t ct_dtype_size(ct_dtype dt) {
    switch (dt) {
    case CT_F32: return 4;
    case CT_F64: return 8;
    case CT_I32: return 4;
    case CT_I64: return 8;
    case CT_BF16: return 2;
    case CT_U8: return 1;
    }
    return 0;
}

const char *ct_dtype_name(ct_dtype dt) {
    switch (dt) {
    case CT_F32: return "f32";
    case CT_F64: return "f64";
    case CT_I32: return "i32";
    case CT_I64: return "i64";
    case CT_BF16: return "bf16";
    case CT_U8: return "u8";
    }
    return "?";
}

ct_tensor ct_tensor_view(void *data, ct_dtype dt, ct_device dev, int ndim, const int64_t *shape) {
    CT_ASSERT(ndim >= 0 && ndim <= CT_MAX_DIMS);
    ct_tensor t = {.data = data, .dtype = dt, .device = dev, .ndim = ndim};
    for (int i = 0; i < ndim; i++) t.shape[i] = shape[i];
    return t;
}

/* Host memory for tensors, zeroed, and resident only where it is written: memory reserved for the
 * largest batch then costs only what the batches touch, and a layout given back (a model re-reserved
 * for another batch, for gradient checkpointing, or when training ends) leaves the process instead
 * of waiting in the C library's free lists, where calloc would clear, and so touch, it again on
 * reuse. A large block is its own anonymous mapping (fresh zero pages, returned by munmap); a small
 * one comes from calloc. Under AddressSanitizer every block comes from calloc, which it watches for
 * overruns. A header just before the 64-byte aligned block says how to give it back. */
typedef struct host_header {
    void *base;    /* what calloc or mmap returned */
    size_t mapped; /* bytes mapped; 0: calloc'd */
} host_header;

enum { HOST_ALIGN = 64, HOST_MAP_MIN = 1 << 20 };

#if defined(__SANITIZE_ADDRESS__)
#define CT_HOST_MAP 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CT_HOST_MAP 0
#endif
#endif
#ifndef CT_HOST_MAP
#define CT_HOST_MAP 1
#endif

void *ct_host_alloc(size_t bytes) {
    size_t rounded = (bytes + HOST_ALIGN - 1) / HOST_ALIGN * HOST_ALIGN;
    if (rounded == 0) rounded = HOST_ALIGN;
    const size_t pad = sizeof(host_header) + HOST_ALIGN - 1;
    if (rounded < bytes || rounded > SIZE_MAX - pad) return NULL;
    host_header h = {0};
    char *block;
    if (CT_HOST_MAP && rounded >= HOST_MAP_MIN) {
        /* a page-aligned mapping: the block starts one alignment step in, the header just before it */
        h.mapped = rounded + HOST_ALIGN;
        h.base = mmap(NULL, h.mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (h.base == MAP_FAILED) return NULL;
        block = (char *)h.base + HOST_ALIGN;
    } else {
        h.base = calloc(1, rounded + pad);
        if (!h.base) return NULL;
        block = (char *)(((uintptr_t)h.base + sizeof h + HOST_ALIGN - 1) & ~(uintptr_t)(HOST_ALIGN - 1));
    }
    memcpy(block - sizeof h, &h, sizeof h);
    return block;
}

void ct_host_free(void *p) {
    if (!p) return;
    host_header h;
    memcpy(&h, (char *)p - sizeof h, sizeof h);
    if (h.mapped)
        munmap(h.base, h.mapped);
    else
        free(h.base);
}

ct_status ct_shape_nbytes(int ndim, const int64_t *shape, ct_dtype dt, size_t *bytes) {
    if (ndim < 0 || ndim > CT_MAX_DIMS)
        return ct_error(CT_ERR_SHAPE, "tensor: %d dimensions (at most %d)", ndim, CT_MAX_DIMS);
    /* Every part of the shape must be addressable, also when another dimension is 0: [0, 2^40, 2^40]
     * holds nothing, but its rows would be 2^80 elements (a file header may say so). So the sizes
     * are checked with 0 counted as 1. */
    int64_t bound = (int64_t)ct_dtype_size(dt);
    bool empty = false;
    for (int i = 0; i < ndim; i++) {
        char s[128];
        if (shape[i] < 0)
            return ct_error(CT_ERR_SHAPE, "tensor: negative dimension in %s", ct_shape_str(ndim, shape, s, sizeof s));
        empty = empty || shape[i] == 0;
        if (__builtin_mul_overflow(bound, shape[i] ? shape[i] : 1, &bound) || bound > (int64_t)(PTRDIFF_MAX / 2))
            return ct_error(CT_ERR_SHAPE, "tensor: %s of %s is too large to address", ct_shape_str(ndim, shape, s, sizeof s),
                            ct_dtype_name(dt));
    }
    *bytes = empty ? 0 : (size_t)bound;
    return CT_OK;
}

ct_status ct_tensor_alloc(ct_tensor *t, ct_dtype dt, ct_device dev, int ndim, const int64_t *shape) {
    size_t bytes;
    CT_TRY(ct_shape_nbytes(ndim, shape, dt, &bytes));
    CT_TRY(ct_device_check(dev));
    *t = ct_tensor_view(NULL, dt, dev, ndim, shape);
    ct_status s = ct_device_alloc(dev, bytes, &t->data);
    return s == CT_OK ? CT_OK : ct_error_prefix(s, "tensor: ");
}

void ct_tensor_free(ct_tensor *t) {
    if (!t) return;
    ct_device_free(t->device, t->data);
    t->data = NULL;
}

ct_status ct_tensor_copy_to(ct_tensor *dst, const ct_tensor *src) {
    if (dst->dtype != src->dtype || ct_tensor_numel(dst) != ct_tensor_numel(src)) {
        char a[128], b[128];
        return ct_error(CT_ERR_SHAPE, "copy: %s into %s", ct_tensor_str(src, a, sizeof a), ct_tensor_str(dst, b, sizeof b));
    }
    return ct_device_copy(dst->data, dst->device, src->data, src->device, ct_tensor_nbytes(src));
}

int64_t ct_tensor_numel(const ct_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

size_t ct_tensor_nbytes(const ct_tensor *t) { return (size_t)ct_tensor_numel(t) * ct_dtype_size(t->dtype); }

int64_t ct_tensor_row_numel(const ct_tensor *t) {
    int64_t n = 1;
    for (int i = 1; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

ct_tensor ct_tensor_rows(const ct_tensor *t, int64_t start, int64_t n) {
    CT_ASSERT(t->ndim >= 1 && start >= 0 && n >= 0 && start + n <= t->shape[0]);
    ct_tensor v = *t;
    v.shape[0] = n;
    v.data = (char *)t->data + (size_t)(start * ct_tensor_row_numel(t)) * ct_dtype_size(t->dtype);
    return v;
}

ct_status ct_tensor_reshape(const ct_tensor *t, int ndim, const int64_t *shape, ct_tensor *out) {
    ct_tensor v = ct_tensor_view(t->data, t->dtype, t->device, ndim, shape);
    if (ct_tensor_numel(&v) != ct_tensor_numel(t)) {
        char a[96], b[96];
        return ct_error(CT_ERR_SHAPE, "reshape: %s has %lld elements, %s needs %lld",
                        ct_shape_str(t->ndim, t->shape, a, sizeof a), (long long)ct_tensor_numel(t),
                        ct_shape_str(ndim, shape, b, sizeof b), (long long)ct_tensor_numel(&v));
    }
    *out = v;
    return CT_OK;
}

bool ct_shape_eq(const ct_tensor *a, const ct_tensor *b) {
    if (a->ndim != b->ndim) return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return false;
    return true;
}

const char *ct_shape_str(int ndim, const int64_t *shape, char *buf, size_t cap) {
    size_t used = 0;
    used += (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < ndim && used < cap; i++)
        used += (size_t)snprintf(buf + used, cap - used, i ? ", %lld" : "%lld", (long long)shape[i]);
    if (used < cap) snprintf(buf + used, cap - used, "]");
    return buf;
}

const char *ct_tensor_str(const ct_tensor *t, char *buf, size_t cap) {
    char shape[96], dev[32];
    snprintf(buf, cap, "%s %s %s", ct_shape_str(t->ndim, t->shape, shape, sizeof shape), ct_dtype_name(t->dtype),
             ct_device_str(t->device, dev, sizeof dev));
    return buf;
}

ct_status ct_tensor_check_finite(const ct_tensor *t) {
    if (!ct_dtype_is_float(t->dtype)) return CT_OK;
    if (t->device.kind != CT_DEVICE_CPU) { /* weights just loaded onto a device: checked on the way */
        ct_tensor host = {0};
        CT_TRY(ct_tensor_alloc(&host, t->dtype, CT_CPU, t->ndim, t->shape));
        ct_status s = ct_tensor_copy_to(&host, t);
        if (s == CT_OK) s = ct_tensor_check_finite(&host);
        ct_tensor_free(&host);
        return s;
    }
    int64_t n = ct_tensor_numel(t), bad = 0, first = 0;
    if (t->dtype == CT_F32) { /* the common case, one pass that vectorises */
        const float *x = t->data;
        for (int64_t i = 0; i < n; i++) bad += !isfinite(x[i]);
    } else {
        for (int64_t i = 0; i < n; i++) bad += !isfinite(ct_tensor_get(t, i));
    }
    if (bad == 0) return CT_OK;
    while (isfinite(ct_tensor_get(t, first))) first++;
    double v = ct_tensor_get(t, first);
    return ct_error(CT_ERR_FORMAT, "holds %lld non-finite value%s, the first %s at element %lld of %lld", (long long)bad,
                    bad == 1 ? "" : "s", isnan(v) ? "nan" : v > 0 ? "inf" : "-inf", (long long)first, (long long)n);
}

ct_status ct_expect_device(const char *who, const ct_tensor *t, ct_device dev) {
    if (ct_device_eq(t->device, dev)) return CT_OK;
    char s[128], d[32];
    return ct_error(CT_ERR_DEVICE, "%s: expected a tensor on %s, got %s", who, ct_device_str(dev, d, sizeof d),
                    ct_tensor_str(t, s, sizeof s));
}

double ct_tensor_get(const ct_tensor *t, int64_t i) {
    switch (t->dtype) {
    case CT_F32: return ((const float *)t->data)[i];
    case CT_F64: return ((const double *)t->data)[i];
    case CT_I32: return ((const int32_t *)t->data)[i];
    case CT_I64: return (double)((const int64_t *)t->data)[i];
    case CT_U8: return ((const uint8_t *)t->data)[i];
    case CT_BF16: {
        uint32_t bits = (uint32_t)((const uint16_t *)t->data)[i] << 16;
        float f;
        memcpy(&f, &bits, sizeof f);
        return f;
    }
    }
    return 0.0;
}

double ct_tensor_item(const ct_tensor *t, int64_t i) {
    if (t->device.kind == CT_DEVICE_CPU) return ct_tensor_get(t, i);
    uint64_t cell = 0; /* room for any dtype's element */
    size_t es = ct_dtype_size(t->dtype);
    if (ct_device_copy(&cell, CT_CPU, (const char *)t->data + (size_t)i * es, t->device, es) != CT_OK) return NAN;
    ct_tensor one = ct_tensor_view(&cell, t->dtype, CT_CPU, 0, NULL);
    return ct_tensor_get(&one, 0);
}

void ct_tensor_set(ct_tensor *t, int64_t i, double v) {
    switch (t->dtype) {
    case CT_F32: ((float *)t->data)[i] = (float)v; break;
    case CT_F64: ((double *)t->data)[i] = v; break;
    case CT_I32: ((int32_t *)t->data)[i] = (int32_t)v; break;
    case CT_I64: ((int64_t *)t->data)[i] = (int64_t)v; break;
    case CT_U8: ((uint8_t *)t->data)[i] = (uint8_t)v; break;
    case CT_BF16: {
        float f = (float)v;
        uint32_t bits;
        memcpy(&bits, &f, sizeof bits);
        bits += 0x7FFF + ((bits >> 16) & 1); /* round to nearest even */
        ((uint16_t *)t->data)[i] = (uint16_t)(bits >> 16);
        break;
    }
    }
}

void ct_tensor_fill(ct_tensor *t, double value) {
    int64_t n = ct_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) ct_tensor_set(t, i, value);
}

void ct_tensor_copy_from_f64(ct_tensor *t, const double *src) {
    int64_t n = ct_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) ct_tensor_set(t, i, src[i]);
}

void ct_tensor_copy_to_f64(const ct_tensor *t, double *dst) {
    int64_t n = ct_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) dst[i] = ct_tensor_get(t, i);
}

int64_t ct_shape_numel(const ct_shape *s) {
    int64_t n = 1;
    for (int i = 0; i < s->ndim; i++) n *= s->dims[i];
    return n;
}

const char *ct_sample_shape_str(const ct_shape *s, char *buf, size_t cap) {
    char inner[96];
    ct_shape_str(s->ndim, s->dims, inner, sizeof inner);
    /* "[N, 784]": the batch dimension is free. */
    if (s->ndim == 0)
        snprintf(buf, cap, "[N]");
    else
        snprintf(buf, cap, "[N, %s", inner + 1);
    return buf;
}

void ct_shape_with_batch(const ct_shape *s, int64_t batch, int *ndim, int64_t *shape) {
    shape[0] = batch;
    for (int i = 0; i < s->ndim; i++) shape[i + 1] = s->dims[i];
    *ndim = s->ndim + 1;
}
