/* Dropout and embedding on the CPU (see ops_misc.h); typed kernels in misc_tmpl.h. Members of
 * ct_backend_cpu (backend_cpu.c); the CUDA twins are in backends/cuda/misc.cu.
 *
 * The dropout counter layout (element block, sample, step packed into Philox's 128 bits) is
 * ct_dropout_philox in core/rng_philox.h, shared with the CUDA kernels so both backends draw the
 * same mask for the same ct_dropout_ctx. */
#include <math.h>
#include <string.h>

#include "backends/cpu/cpu_impl.h"
#include "core/ops/ops.h"
#include "core/rng_philox.h"

#define CT_EMB_COLS 64

static inline void dropout_words(const ct_dropout_ctx *ctx, uint64_t sample, uint64_t block, uint32_t out[4]) {
    ct_dropout_philox(ctx->key, ctx->step, sample, block, out);
}

#define R float
#define FN(name) name##_f32
#include "backends/cpu/misc_tmpl.h"
#undef R
#undef FN
#define R double
#define FN(name) name##_f64
#include "backends/cpu/misc_tmpl.h"
#undef R
#undef FN

/* Keep an element when its 32-bit word is >= ceil(p * 2^32): probability 1 - p up to 2^-32. */
static uint64_t keep_threshold(double p) { return (uint64_t)ceil(p * 4294967296.0); }

void ct_cpu_dropout_forward(const ct_tensor *x, double p, const ct_dropout_ctx *ctx, ct_tensor *mask,
                            ct_tensor *y) {
    int64_t n = ct_tensor_numel(x);
    int64_t rows = x->shape[0];
    double scale = p < 1.0 ? 1.0 / (1.0 - p) : 0.0;
    CT_REAL_DISPATCH(x, dropout_fwd, x->data, y->data, mask->data, rows, n / rows, keep_threshold(p), scale, ctx);
}

void ct_cpu_dropout_backward(const ct_tensor *dy, const ct_tensor *mask, double p, ct_tensor *dx) {
    int64_t n = ct_tensor_numel(dy);
    double scale = p < 1.0 ? 1.0 / (1.0 - p) : 0.0;
    CT_REAL_DISPATCH(dy, dropout_bwd, dy->data, mask->data, scale, dx->data, n);
}

int64_t ct_cpu_embedding_find_invalid(const ct_tensor *ids, int64_t num_embeddings) {
    const int64_t *p = ids->data;
    int64_t n = ct_tensor_numel(ids);
    for (int64_t i = 0; i < n; i++)
        if (p[i] < 0 || p[i] >= num_embeddings) return i;
    return -1;
}

void ct_cpu_embedding_forward(const ct_tensor *ids, const ct_tensor *weight, ct_tensor *y) {
    int64_t n = ct_tensor_numel(ids), num = weight->shape[0], dim = weight->shape[1];
    const int64_t *p = ids->data;
    size_t row_bytes = (size_t)dim * ct_dtype_size(weight->dtype);
    const char *w = weight->data;
    char *out = y->data;
#pragma omp parallel for schedule(static) if (n * dim > CT_OMP_MIN)
    for (int64_t i = 0; i < n; i++) {
        CT_ASSERT(p[i] >= 0 && p[i] < num);
        memcpy(out + (size_t)i * row_bytes, w + (size_t)p[i] * row_bytes, row_bytes);
    }
}

void ct_cpu_embedding_backward(const ct_tensor *ids, const ct_tensor *dy, int64_t padding_idx, ct_tensor *dweight) {
    int64_t n = ct_tensor_numel(ids), dim = dweight->shape[1];
    CT_REAL_DISPATCH(dy, embedding_bwd, ids->data, dy->data, n, dim, padding_idx, dweight->data);
}
