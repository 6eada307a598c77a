/* Dropout and embedding on CUDA (the twins of backends/cpu/misc.c; the contract is core/ops/ops_misc.h).
 *
 * Dropout draws its mask from ct_dropout_philox (core/rng_philox.h), the very function the CPU
 * kernels call, with one thread per (sample, block of four elements): the same words, the same
 * threshold and the same double multiply per kept element, so mask and output are bit-identical to
 * the CPU's for the same ct_dropout_ctx.
 *
 * The embedding backward gives each embedding column to one thread, which walks the tokens in
 * order: repeated ids never race, no atomics are needed, and each dweight element gets its
 * contributions in the CPU's order (bit-identical sums). Its parallelism is the embedding width,
 * which is fine for the models here; a sort-based scatter would be the next step for long inputs. */
#include <cmath>
#include <cstdint>

#include "backends/cuda/cuda_handles.h"
#include "backends/cuda/ops_cuda.h"
#include "core/rng_philox.h"

namespace {

constexpr unsigned long long NO_INDEX = ~0ull;

void same_device(const ct_tensor *a, const ct_tensor *b) {
    CT_ASSERT(a->device.kind == CT_DEVICE_CUDA && b->device.kind == CT_DEVICE_CUDA);
    CT_ASSERT(a->device.index == b->device.index);
}

/* --- dropout ------------------------------------------------------------------------------------ */

template <typename R>
__global__ void dropout_fwd(const R *x, R *y, uint8_t *mask, int64_t rows, int64_t row_numel, uint64_t threshold,
                            double scale, ct_dropout_ctx ctx) {
    int64_t blocks = (row_numel + 3) / 4, total = rows * blocks;
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < total; t += stride) {
        int64_t r = t / blocks, blk = t % blocks;
        uint32_t words[4];
        ct_dropout_philox(ctx.key, ctx.step, (uint64_t)(ctx.sample_offset + r), (uint64_t)blk, words);
        int64_t e0 = blk * 4, e1 = e0 + 4 < row_numel ? e0 + 4 : row_numel;
        const R *p = x + r * row_numel;
        R *q = y + r * row_numel;
        uint8_t *m = mask + r * row_numel;
        /* y may alias x: element e is read and written by this thread only */
        for (int64_t e = e0; e < e1; e++) {
            uint8_t keep = (uint64_t)words[e - e0] >= threshold;
            m[e] = keep;
            q[e] = (R)(p[e] * (keep ? scale : 0.0));
        }
    }
}

template <typename R> __global__ void dropout_bwd(const R *dy, const uint8_t *mask, double scale, R *dx, int64_t n) {
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        dx[i] = (R)(dy[i] * (mask[i] ? scale : 0.0));
}

/* Keep an element when its 32-bit word is >= ceil(p * 2^32) (as backends/cpu/misc.c). */
uint64_t keep_threshold(double p) { return (uint64_t)ceil(p * 4294967296.0); }

/* --- embedding ---------------------------------------------------------------------------------- */

__global__ void find_invalid(const int64_t *ids, int64_t n, int64_t num, unsigned long long *first) {
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        if (ids[i] < 0 || ids[i] >= num) atomicMin(first, (unsigned long long)i);
}

/* y[i, j] = w[ids[i], j]; an id outside the table is a caller bug (the layer checks first with
 * find_invalid) and stops the kernel rather than read out of bounds. */
template <typename R> __global__ void embedding_fwd(const int64_t *ids, const R *w, int64_t n, int64_t num,
                                                   int64_t dim, R *y) {
    int64_t stride = (int64_t)gridDim.x * blockDim.x, total = n * dim;
    for (int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; k < total; k += stride) {
        int64_t i = k / dim, j = k % dim, id = ids[i];
        if (id < 0 || id >= num) __trap();
        y[k] = w[id * dim + j];
    }
}

/* One thread per column j: dw[ids[i], j] += dy[i, j] for i in order, skipping padding_idx. */
template <typename R> __global__ void embedding_bwd(const int64_t *ids, const R *dy, int64_t n, int64_t num,
                                                   int64_t dim, int64_t padding_idx, R *dw) {
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < dim; j += stride)
        for (int64_t i = 0; i < n; i++) {
            int64_t id = ids[i];
            if (id == padding_idx) continue;
            if (id < 0 || id >= num) __trap();
            dw[id * dim + j] += dy[i * dim + j];
        }
}

}  // namespace

extern "C" void ct_cuda_op_dropout_forward(const ct_tensor *x, double p, const ct_dropout_ctx *ctx, ct_tensor *mask,
                                           ct_tensor *y) {
    same_device(x, mask);
    same_device(x, y);
    int64_t n = ct_tensor_numel(x);
    CT_ASSERT(p >= 0.0 && p <= 1.0 && x->ndim >= 1 && x->shape[0] > 0);
    CT_ASSERT(y->dtype == x->dtype && ct_tensor_numel(y) == n);
    CT_ASSERT(mask->dtype == CT_U8 && ct_tensor_numel(mask) == n);
    int64_t rows = x->shape[0], row_numel = n / rows;
    if (n == 0) return;
    double scale = p < 1.0 ? 1.0 / (1.0 - p) : 0.0;
    uint64_t threshold = keep_threshold(p);
    unsigned blocks = ct_cuda_blocks(rows * ((row_numel + 3) / 4));
    cudaStream_t st = ct_cuda_stream_t();
    if (x->dtype == CT_F32) {
        dropout_fwd<float><<<blocks, CT_CUDA_THREADS, 0, st>>>((const float *)x->data, (float *)y->data,
                                                               (uint8_t *)mask->data, rows, row_numel, threshold,
                                                               scale, *ctx);
    } else {
        CT_ASSERT(x->dtype == CT_F64);
        dropout_fwd<double><<<blocks, CT_CUDA_THREADS, 0, st>>>((const double *)x->data, (double *)y->data,
                                                                (uint8_t *)mask->data, rows, row_numel, threshold,
                                                                scale, *ctx);
    }
    CT_CUDA_LAUNCHED();
}

extern "C" void ct_cuda_op_dropout_backward(const ct_tensor *dy, const ct_tensor *mask, double p, ct_tensor *dx) {
    same_device(dy, mask);
    same_device(dy, dx);
    int64_t n = ct_tensor_numel(dy);
    CT_ASSERT(p >= 0.0 && p <= 1.0);
    CT_ASSERT(dx->dtype == dy->dtype && ct_tensor_numel(dx) == n);
    CT_ASSERT(mask->dtype == CT_U8 && ct_tensor_numel(mask) == n);
    if (n == 0) return;
    double scale = p < 1.0 ? 1.0 / (1.0 - p) : 0.0;
    cudaStream_t st = ct_cuda_stream_t();
    if (dy->dtype == CT_F32) {
        dropout_bwd<float><<<ct_cuda_blocks(n), CT_CUDA_THREADS, 0, st>>>(
            (const float *)dy->data, (const uint8_t *)mask->data, scale, (float *)dx->data, n);
    } else {
        CT_ASSERT(dy->dtype == CT_F64);
        dropout_bwd<double><<<ct_cuda_blocks(n), CT_CUDA_THREADS, 0, st>>>(
            (const double *)dy->data, (const uint8_t *)mask->data, scale, (double *)dx->data, n);
    }
    CT_CUDA_LAUNCHED();
}

extern "C" int64_t ct_cuda_op_embedding_find_invalid(const ct_tensor *ids, int64_t num_embeddings) {
    CT_ASSERT(ids->device.kind == CT_DEVICE_CUDA && ids->dtype == CT_I64);
    int64_t n = ct_tensor_numel(ids);
    if (n == 0) return -1;
    cudaStream_t st = ct_cuda_stream_t();
    unsigned long long *first = (unsigned long long *)ct_cuda_workspace(sizeof *first);
    CT_CUDA_CHECK(cudaMemsetAsync(first, 0xFF, sizeof *first, st));
    find_invalid<<<ct_cuda_blocks(n), CT_CUDA_THREADS, 0, st>>>((const int64_t *)ids->data, n, num_embeddings, first);
    CT_CUDA_LAUNCHED();
    unsigned long long back = NO_INDEX;
    const ct_device host{CT_DEVICE_CPU, 0};
    ct_status s = ct_cuda_memcpy(&back, host, first, ids->device, sizeof back);
    if (s != CT_OK) ct_abort_at(__FILE__, __LINE__, "embedding: cannot read the check back: %s", ct_last_error());
    return back == NO_INDEX ? -1 : (int64_t)back;
}

extern "C" void ct_cuda_op_embedding_forward(const ct_tensor *ids, const ct_tensor *weight, ct_tensor *y) {
    same_device(ids, weight);
    same_device(ids, y);
    CT_ASSERT(ids->dtype == CT_I64 && weight->ndim == 2 && y->dtype == weight->dtype);
    int64_t n = ct_tensor_numel(ids), num = weight->shape[0], dim = weight->shape[1];
    CT_ASSERT(ct_tensor_numel(y) == n * dim);
    if (n * dim == 0) return;
    cudaStream_t st = ct_cuda_stream_t();
    unsigned blocks = ct_cuda_blocks(n * dim);
    if (weight->dtype == CT_F32) {
        embedding_fwd<float><<<blocks, CT_CUDA_THREADS, 0, st>>>((const int64_t *)ids->data,
                                                                 (const float *)weight->data, n, num, dim,
                                                                 (float *)y->data);
    } else {
        CT_ASSERT(weight->dtype == CT_F64);
        embedding_fwd<double><<<blocks, CT_CUDA_THREADS, 0, st>>>((const int64_t *)ids->data,
                                                                  (const double *)weight->data, n, num, dim,
                                                                  (double *)y->data);
    }
    CT_CUDA_LAUNCHED();
}

extern "C" void ct_cuda_op_embedding_backward(const ct_tensor *ids, const ct_tensor *dy, int64_t padding_idx,
                                              ct_tensor *dweight) {
    same_device(ids, dy);
    same_device(ids, dweight);
    CT_ASSERT(ids->dtype == CT_I64 && dweight->ndim == 2 && dy->dtype == dweight->dtype);
    int64_t n = ct_tensor_numel(ids), num = dweight->shape[0], dim = dweight->shape[1];
    CT_ASSERT(ct_tensor_numel(dy) == n * dim);
    if (n * dim == 0) return;
    cudaStream_t st = ct_cuda_stream_t();
    unsigned blocks = ct_cuda_blocks(dim);
    if (dy->dtype == CT_F32) {
        embedding_bwd<float><<<blocks, CT_CUDA_THREADS, 0, st>>>((const int64_t *)ids->data,
                                                                 (const float *)dy->data, n, num, dim, padding_idx,
                                                                 (float *)dweight->data);
    } else {
        CT_ASSERT(dy->dtype == CT_F64);
        embedding_bwd<double><<<blocks, CT_CUDA_THREADS, 0, st>>>((const int64_t *)ids->data,
                                                                  (const double *)dy->data, n, num, dim, padding_idx,
                                                                  (double *)dweight->data);
    }
    CT_CUDA_LAUNCHED();
}
