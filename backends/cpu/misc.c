/* Dropout and embedding on the CPU (see ops_misc.h); typed kernels in misc_tmpl.h. Tensors on a
 * CUDA device go to the twins in backends/cuda/misc.cu.
 *
 * The dropout counter layout (element block, sample, step packed into Philox's 128 bits) is
 * ct_dropout_philox in core/rng_philox.h, shared with the CUDA kernels so both backends draw the
 * same mask for the same ct_dropout_ctx. */
#include <math.h>
#include <string.h>

#include "backends/cpu/cpu_impl.h"
#include "core/ops/ops.h"
#include "core/rng.h"
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

/* splitmix64's finaliser: a bijection that spreads every input bit over the output. */
static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void ct_dropout_key(uint64_t seed, uint64_t salt, uint32_t key[2]) {
    uint64_t k = mix64(seed ^ mix64(salt + 0x9E3779B97F4A7C15ull * CT_RNG_DROPOUT));
    key[0] = (uint32_t)k;
    key[1] = (uint32_t)(k >> 32);
}

uint64_t ct_hash_name(const char *name) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
        h ^= *p;
        h *= 0x100000001b3ull;
    }
    return h;
}

/* Keep an element when its 32-bit word is >= ceil(p * 2^32): probability 1 - p up to 2^-32. */
static uint64_t keep_threshold(double p) { return (uint64_t)ceil(p * 4294967296.0); }

void ct_op_dropout_forward(const ct_tensor *x, double p, const ct_dropout_ctx *ctx, ct_tensor *mask, ct_tensor *y) {
    CT_ON_CUDA(x, ct_cuda_op_dropout_forward(x, p, ctx, mask, y));
    CT_CHECK_CPU(mask);
    CT_CHECK_CPU(y);
    int64_t n = ct_tensor_numel(x);
    CT_ASSERT(p >= 0.0 && p <= 1.0 && x->ndim >= 1 && x->shape[0] > 0);
    CT_ASSERT(y->dtype == x->dtype && ct_tensor_numel(y) == n);
    CT_ASSERT(mask->dtype == CT_U8 && ct_tensor_numel(mask) == n);
    int64_t rows = x->shape[0];
    double scale = p < 1.0 ? 1.0 / (1.0 - p) : 0.0;
    CT_REAL_DISPATCH(x, dropout_fwd, x->data, y->data, mask->data, rows, n / rows, keep_threshold(p), scale, ctx);
}

void ct_op_dropout_backward(const ct_tensor *dy, const ct_tensor *mask, double p, ct_tensor *dx) {
    CT_ON_CUDA(dy, ct_cuda_op_dropout_backward(dy, mask, p, dx));
    CT_CHECK_CPU(mask);
    CT_CHECK_CPU(dx);
    int64_t n = ct_tensor_numel(dy);
    CT_ASSERT(p >= 0.0 && p <= 1.0);
    CT_ASSERT(dx->dtype == dy->dtype && ct_tensor_numel(dx) == n);
    CT_ASSERT(mask->dtype == CT_U8 && ct_tensor_numel(mask) == n);
    double scale = p < 1.0 ? 1.0 / (1.0 - p) : 0.0;
    CT_REAL_DISPATCH(dy, dropout_bwd, dy->data, mask->data, scale, dx->data, n);
}

int64_t ct_op_embedding_find_invalid(const ct_tensor *ids, int64_t num_embeddings) {
    CT_ON_CUDA_RETURN(ids, ct_cuda_op_embedding_find_invalid(ids, num_embeddings));
    CT_ASSERT(ids->dtype == CT_I64);
    const int64_t *p = ids->data;
    int64_t n = ct_tensor_numel(ids);
    for (int64_t i = 0; i < n; i++)
        if (p[i] < 0 || p[i] >= num_embeddings) return i;
    return -1;
}

void ct_op_embedding_forward(const ct_tensor *ids, const ct_tensor *weight, ct_tensor *y) {
    CT_ON_CUDA(ids, ct_cuda_op_embedding_forward(ids, weight, y));
    CT_CHECK_CPU(weight);
    CT_CHECK_CPU(y);
    CT_ASSERT(ids->dtype == CT_I64 && weight->ndim == 2 && y->dtype == weight->dtype);
    int64_t n = ct_tensor_numel(ids), num = weight->shape[0], dim = weight->shape[1];
    CT_ASSERT(ct_tensor_numel(y) == n * dim);
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

void ct_op_embedding_backward(const ct_tensor *ids, const ct_tensor *dy, int64_t padding_idx, ct_tensor *dweight) {
    CT_ON_CUDA(ids, ct_cuda_op_embedding_backward(ids, dy, padding_idx, dweight));
    CT_CHECK_CPU(dy);
    CT_CHECK_CPU(dweight);
    CT_ASSERT(ids->dtype == CT_I64 && dweight->ndim == 2 && dy->dtype == dweight->dtype);
    int64_t n = ct_tensor_numel(ids), dim = dweight->shape[1];
    CT_ASSERT(ct_tensor_numel(dy) == n * dim);
    CT_REAL_DISPATCH(dy, embedding_bwd, ids->data, dy->data, n, dim, padding_idx, dweight->data);
}
