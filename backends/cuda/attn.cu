/* Attention helpers on CUDA (the twins of backends/cpu/attn.c; the contract is core/ops/ops_attn.h).
 *
 * Simple, correct kernels for the unfused attention path: the head split/merge copies run one
 * thread per element; the causal softmax runs one block per row (grid-stride over rows) with a
 * shared-memory maximum and the deterministic block sum of block_sum.cuh, accumulating in double
 * as the CPU does. A fused (flash-style) attention kernel replaces all of this on the fast path. */
#include <cmath>
#include <cstdint>

#include "backends/cuda/block_sum.cuh"
#include "backends/cuda/cuda_handles.h"
#include "backends/cuda/ops_cuda.h"

namespace {

constexpr int ROW_THREADS = 128;

void same_device(const ct_tensor *a, const ct_tensor *b) {
    CT_ASSERT(a->device.kind == CT_DEVICE_CUDA && b->device.kind == CT_DEVICE_CUDA);
    CT_ASSERT(a->device.index == b->device.index);
}

/* One thread per element of the head-major tensor [B, H, T, D]; to_heads picks the direction. */
template <typename R>
__global__ void heads_copy(const R *src, R *dst, int64_t B, int64_t T, int64_t W, int64_t off, int64_t H, int64_t D,
                           bool to_heads) {
    int64_t total = B * H * T * D, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; k < total; k += stride) {
        int64_t d = k % D, t = (k / D) % T, h = (k / (D * T)) % H, b = k / (D * T * H);
        int64_t flat = (b * T + t) * W + off + h * D + d;
        if (to_heads)
            dst[k] = src[flat];
        else
            dst[flat] = src[k];
    }
}

__device__ inline double block_max(double v, double *shm) {
    shm[threadIdx.x] = v;
    __syncthreads();
    for (int s = ROW_THREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) shm[threadIdx.x] = fmax(shm[threadIdx.x], shm[threadIdx.x + s]);
        __syncthreads();
    }
    double m = shm[0];
    __syncthreads();
    return m;
}

template <typename R> __global__ void causal_softmax_fwd(const R *x, R *y, int64_t rows, int64_t Tq, int64_t Tk) {
    __shared__ double shm[ROW_THREADS];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        int64_t len = r % Tq + (Tk - Tq) + 1;
        const R *p = x + r * Tk;
        R *q = y + r * Tk;
        double m = -INFINITY;
        for (int64_t j = threadIdx.x; j < len; j += ROW_THREADS) m = fmax(m, (double)p[j]);
        m = block_max(m, shm);
        double part = 0.0;
        for (int64_t j = threadIdx.x; j < len; j += ROW_THREADS) part += exp((double)p[j] - m);
        double sum = ct_block_sum<ROW_THREADS>(part, shm);
        /* y may alias x: every thread has read its elements (the sums synchronised) before writing */
        for (int64_t j = threadIdx.x; j < Tk; j += ROW_THREADS) q[j] = j < len ? (R)(exp((double)p[j] - m) / sum) : (R)0;
        __syncthreads();
    }
}

template <typename R>
__global__ void causal_softmax_bwd(const R *y, const R *dy, R *dx, int64_t rows, int64_t Tq, int64_t Tk) {
    __shared__ double shm[ROW_THREADS];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        int64_t len = r % Tq + (Tk - Tq) + 1;
        const R *p = y + r * Tk, *g = dy + r * Tk;
        R *o = dx + r * Tk;
        double part = 0.0;
        for (int64_t j = threadIdx.x; j < len; j += ROW_THREADS) part += (double)p[j] * (double)g[j];
        double dot = ct_block_sum<ROW_THREADS>(part, shm);
        /* dx may alias dy: the block sum synchronised after every read of dy */
        for (int64_t j = threadIdx.x; j < Tk; j += ROW_THREADS)
            o[j] = j < len ? (R)((double)p[j] * ((double)g[j] - dot)) : (R)0;
        __syncthreads();
    }
}

unsigned row_blocks(int64_t rows) { return (unsigned)(rows < 65535 * 8 ? rows : 65535 * 8); }

void heads(const ct_tensor *t3, const ct_tensor *t4, int64_t offset, bool to_heads) {
    same_device(t3, t4);
    CT_ASSERT(t3->ndim == 3 && t4->ndim == 4 && t3->dtype == t4->dtype);
    CT_ASSERT(t3->shape[0] == t4->shape[0] && t3->shape[1] == t4->shape[2]);
    CT_ASSERT(offset >= 0 && offset + t4->shape[1] * t4->shape[3] <= t3->shape[2]);
    int64_t B = t3->shape[0], T = t3->shape[1], W = t3->shape[2], H = t4->shape[1], D = t4->shape[3];
    int64_t n = B * H * T * D;
    if (n == 0) return;
    const ct_tensor *src = to_heads ? t3 : t4;
    const ct_tensor *dst = to_heads ? t4 : t3;
    cudaStream_t st = ct_cuda_stream_t();
    if (t3->dtype == CT_F32) {
        heads_copy<float><<<ct_cuda_blocks(n), CT_CUDA_THREADS, 0, st>>>((const float *)src->data, (float *)dst->data,
                                                                         B, T, W, offset, H, D, to_heads);
    } else {
        CT_ASSERT(t3->dtype == CT_F64);
        heads_copy<double><<<ct_cuda_blocks(n), CT_CUDA_THREADS, 0, st>>>(
            (const double *)src->data, (double *)dst->data, B, T, W, offset, H, D, to_heads);
    }
    CT_CUDA_LAUNCHED();
}

void score_dims(const ct_tensor *t, int64_t *rows, int64_t *tq, int64_t *tk) {
    CT_ASSERT(t->ndim >= 2);
    *tq = t->shape[t->ndim - 2];
    *tk = t->shape[t->ndim - 1];
    CT_ASSERT(*tq >= 1 && *tk >= *tq);
    *rows = ct_tensor_numel(t) / *tk;
}

}  // namespace

extern "C" void ct_cuda_op_heads_split(const ct_tensor *x, int64_t offset, ct_tensor *out) {
    heads(x, out, offset, true);
}

extern "C" void ct_cuda_op_heads_merge(const ct_tensor *x, int64_t offset, ct_tensor *out) {
    heads(out, x, offset, false);
}

extern "C" void ct_cuda_op_causal_softmax_forward(const ct_tensor *x, ct_tensor *y) {
    same_device(x, y);
    int64_t rows, tq, tk;
    score_dims(x, &rows, &tq, &tk);
    CT_ASSERT(y->dtype == x->dtype && ct_tensor_numel(y) == ct_tensor_numel(x));
    if (rows == 0) return;
    cudaStream_t st = ct_cuda_stream_t();
    if (x->dtype == CT_F32) {
        causal_softmax_fwd<float><<<row_blocks(rows), ROW_THREADS, 0, st>>>((const float *)x->data, (float *)y->data,
                                                                            rows, tq, tk);
    } else {
        CT_ASSERT(x->dtype == CT_F64);
        causal_softmax_fwd<double><<<row_blocks(rows), ROW_THREADS, 0, st>>>((const double *)x->data,
                                                                             (double *)y->data, rows, tq, tk);
    }
    CT_CUDA_LAUNCHED();
}

extern "C" void ct_cuda_op_causal_softmax_backward(const ct_tensor *y, const ct_tensor *dy, ct_tensor *dx) {
    same_device(y, dy);
    same_device(y, dx);
    int64_t rows, tq, tk;
    score_dims(y, &rows, &tq, &tk);
    CT_ASSERT(dy->dtype == y->dtype && dx->dtype == y->dtype);
    CT_ASSERT(ct_tensor_numel(dy) == ct_tensor_numel(y) && ct_tensor_numel(dx) == ct_tensor_numel(y));
    if (rows == 0) return;
    cudaStream_t st = ct_cuda_stream_t();
    if (y->dtype == CT_F32) {
        causal_softmax_bwd<float><<<row_blocks(rows), ROW_THREADS, 0, st>>>(
            (const float *)y->data, (const float *)dy->data, (float *)dx->data, rows, tq, tk);
    } else {
        CT_ASSERT(y->dtype == CT_F64);
        causal_softmax_bwd<double><<<row_blocks(rows), ROW_THREADS, 0, st>>>(
            (const double *)y->data, (const double *)dy->data, (double *)dx->data, rows, tq, tk);
    }
    CT_CUDA_LAUNCHED();
}
