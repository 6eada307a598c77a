/* Fused causal self-attention on CUDA, flash-style (ct_op_causal_attention_forward / _backward,
 * core/ops/ops_attn.h; the CPU's twin is in backends/cpu/attn_tmpl.h): no [T, T] matrix is ever
 * stored, only each query row's log-sum-exp.
 *
 * One thread owns one row and keeps it in registers, the rows of the other side pass through shared
 * memory a tile at a time, so every thread of a block reads the same staged element at once (a
 * broadcast, no bank conflicts):
 *  - forward: a thread per query row, key tiles up to the block's last query; the online softmax
 *    (a running maximum m and sum l, the output rescaled when m grows) gives y and lse = m + log(l);
 *    a NaN score makes l NaN, so the row's y and lse are NaN as the CPU's are;
 *  - backward, query side: a thread per query row makes P = exp(S - lse) again tile by tile, with
 *    delta = dy . y (which is sum_j P dP), dS = P (dP - delta) and dq = dS k / sqrt(D);
 *  - backward, key side: a thread per key row, query tiles from the first query that sees it:
 *    dv = P^T dy, dk = dS^T q / sqrt(D).
 * Each gradient element is one thread's sum in a fixed order: no atomics, the same bits every run.
 * The accumulators are the tensor's type (float32 sums over at most T terms, as cuBLAS's float32
 * GEMMs would make them). Head dimensions up to CT_FUSED_ATTENTION_MAX_HEAD_DIM: the row lives in
 * an array of the next power of two from 32 (a kernel instance each), so the compiler can keep it in
 * registers. Simple kernels on the CUDA cores; tensor cores are not used here. */
#include <cmath>
#include <cstdint>
#include <initializer_list>

#include "backends/cuda/cuda_handles.h"
#include "backends/cuda/ops_cuda.h"

namespace {

constexpr int ROWS = 64;     /* rows (threads) a block owns */
constexpr int MAX_TILE = 32; /* rows of the other side staged at a time */

__device__ inline float expo(float x) { return expf(x); }
__device__ inline double expo(double x) { return exp(x); }

/* Where head h of sample b starts in qkv [B, T, 3C] (q; k at + C, v at + 2C). */
struct heads_view {
    int64_t T, H, D, C, ld;
    __device__ int64_t at(int64_t bh, int64_t t) const { return (bh / H * T + t) * ld + bh % H * D; }
    __device__ int64_t out_at(int64_t bh, int64_t t) const { return (bh / H * T + t) * C + bh % H * D; }
};

/* Register rows are DMAX wide, D of them used: every index is a constant after unrolling, so they
 * stay in registers. */
template <typename R, int DMAX> __device__ inline void load_row(R *dst, const R *src, int D, R f) {
#pragma unroll
    for (int d = 0; d < DMAX; d++) dst[d] = d < D ? src[d] * f : (R)0;
}

template <typename R, int DMAX> __device__ inline void zero_row(R *dst) {
#pragma unroll
    for (int d = 0; d < DMAX; d++) dst[d] = 0;
}

template <typename R, int DMAX> __device__ inline void store_row(R *dst, const R *src, int D, R f) {
#pragma unroll
    for (int d = 0; d < DMAX; d++)
        if (d < D) dst[d] = src[d] * f;
}

template <typename R, int DMAX> __device__ inline R dot_staged(const R *row, const R *staged, int D) {
    R acc = 0;
#pragma unroll
    for (int d = 0; d < DMAX; d++)
        if (d < D) acc += row[d] * staged[d];
    return acc;
}

template <typename R, int DMAX> __device__ inline void axpy_staged(R *acc, R a, const R *staged, int D) {
#pragma unroll
    for (int d = 0; d < DMAX; d++)
        if (d < D) acc[d] += a * staged[d];
}

/* Stages rows t0 .. t0 + n - 1 of two heads' [T, D] blocks (rows lda and ldb apart: qkv's 3C, a
 * [B, T, C] tensor's C) into a [n, D] and b [n, D]. */
template <typename R>
__device__ inline void stage(R *a, const R *src_a, int64_t lda, R *b, const R *src_b, int64_t ldb, int64_t t0, int n,
                             int D) {
    for (int e = threadIdx.x; e < n * D; e += ROWS) {
        const int r = e / D, d = e % D;
        a[e] = src_a[(t0 + r) * lda + d];
        b[e] = src_b[(t0 + r) * ldb + d];
    }
}

template <typename R, int DMAX>
__global__ void flash_fwd(const R *qkv, R *y, R *lse, heads_view v, int64_t BH, int tile, R scale) {
    extern __shared__ __align__(16) unsigned char smem[];
    R *ks = (R *)smem, *vs = ks + tile * v.D;
    const int D = (int)v.D;
    const int64_t i = blockIdx.x * (int64_t)ROWS + threadIdx.x, last = min(v.T, (blockIdx.x + 1) * (int64_t)ROWS);
    for (int64_t bh = blockIdx.y; bh < BH; bh += gridDim.y) {
        const R *head = qkv + v.at(bh, 0);
        const bool live = i < v.T;
        R q[DMAX], o[DMAX];
        load_row<R, DMAX>(q, head + (live ? i : 0) * v.ld, D, (R)1);
        zero_row<R, DMAX>(o);
        R m = -INFINITY, l = 0;
        for (int64_t j0 = 0; j0 < last; j0 += tile) {
            const int n = (int)min((int64_t)tile, last - j0);
            __syncthreads(); /* the last tile's readers are done */
            stage(ks, head + v.C, v.ld, vs, head + 2 * v.C, v.ld, j0, n, D);
            __syncthreads();
            const int visible = live ? (int)min((int64_t)n, i - j0 + 1) : 0;
            for (int r = 0; r < visible; r++) {
                const R sc = dot_staged<R, DMAX>(q, ks + r * D, D) * scale; /* as the backward makes it */
                if (sc > m) { /* a new maximum: rescale what was summed against the old one (0 at first) */
                    const R keep = expo(m - sc);
                    l *= keep;
#pragma unroll
                    for (int d = 0; d < DMAX; d++) o[d] *= keep;
                    m = sc;
                }
                const R p = expo(sc - m);
                l += p;
                axpy_staged<R, DMAX>(o, p, vs + r * D, D);
            }
        }
        if (live) {
            store_row<R, DMAX>(y + v.out_at(bh, i), o, D, (R)1 / l);
            lse[bh * v.T + i] = m + log(l);
        }
    }
}

/* delta = dy . y over one head's row: sum_j P dP, the softmax backward's row dot product. */
template <typename R> __device__ inline R row_delta(const R *dy_row, const R *y_row, int D) {
    R acc = 0;
    for (int d = 0; d < D; d++) acc += dy_row[d] * y_row[d];
    return acc;
}

template <typename R, int DMAX>
__global__ void flash_bwd_dq(const R *qkv, const R *y, const R *lse, const R *dy, R *dqkv, heads_view v, int64_t BH,
                             int tile, R scale) {
    extern __shared__ __align__(16) unsigned char smem[];
    R *ks = (R *)smem, *vs = ks + tile * v.D;
    const int D = (int)v.D;
    const int64_t i = blockIdx.x * (int64_t)ROWS + threadIdx.x, last = min(v.T, (blockIdx.x + 1) * (int64_t)ROWS);
    for (int64_t bh = blockIdx.y; bh < BH; bh += gridDim.y) {
        const R *head = qkv + v.at(bh, 0);
        const bool live = i < v.T;
        const int64_t row = live ? i : 0;
        R q[DMAX], g[DMAX], dq[DMAX];
        load_row<R, DMAX>(q, head + row * v.ld, D, (R)1);
        load_row<R, DMAX>(g, dy + v.out_at(bh, row), D, (R)1);
        zero_row<R, DMAX>(dq);
        const R delta = row_delta(dy + v.out_at(bh, row), y + v.out_at(bh, row), D);
        const R row_lse = lse[bh * v.T + row];
        for (int64_t j0 = 0; j0 < last; j0 += tile) {
            const int n = (int)min((int64_t)tile, last - j0);
            __syncthreads();
            stage(ks, head + v.C, v.ld, vs, head + 2 * v.C, v.ld, j0, n, D);
            __syncthreads();
            const int visible = live ? (int)min((int64_t)n, i - j0 + 1) : 0;
            for (int r = 0; r < visible; r++) {
                const R p = expo(dot_staged<R, DMAX>(q, ks + r * D, D) * scale - row_lse);
                const R ds = p * (dot_staged<R, DMAX>(g, vs + r * D, D) - delta);
                axpy_staged<R, DMAX>(dq, ds, ks + r * D, D);
            }
        }
        if (live) store_row<R, DMAX>(dqkv + v.at(bh, i), dq, D, scale);
    }
}

template <typename R, int DMAX>
__global__ void flash_bwd_dkv(const R *qkv, const R *y, const R *lse, const R *dy, R *dqkv, heads_view v, int64_t BH,
                              int tile, R scale) {
    extern __shared__ __align__(16) unsigned char smem[];
    R *qs = (R *)smem, *gs = qs + tile * v.D, *lses = gs + tile * v.D, *deltas = lses + tile;
    const int D = (int)v.D;
    const int64_t j = blockIdx.x * (int64_t)ROWS + threadIdx.x, first = blockIdx.x * (int64_t)ROWS;
    for (int64_t bh = blockIdx.y; bh < BH; bh += gridDim.y) {
        const R *head = qkv + v.at(bh, 0);
        const bool live = j < v.T;
        const int64_t row = live ? j : 0;
        R k[DMAX], vr[DMAX], dk[DMAX], dv[DMAX];
        load_row<R, DMAX>(k, head + row * v.ld + v.C, D, (R)1);
        load_row<R, DMAX>(vr, head + row * v.ld + 2 * v.C, D, (R)1);
        zero_row<R, DMAX>(dk);
        zero_row<R, DMAX>(dv);
        /* queries before the block's first key see none of its keys */
        for (int64_t i0 = first; i0 < v.T; i0 += tile) {
            const int n = (int)min((int64_t)tile, v.T - i0);
            __syncthreads();
            stage(qs, head, v.ld, gs, dy + v.out_at(bh, 0), v.C, i0, n, D);
            if (threadIdx.x < n) {
                const int64_t qi = i0 + threadIdx.x;
                lses[threadIdx.x] = lse[bh * v.T + qi];
                deltas[threadIdx.x] = row_delta(dy + v.out_at(bh, qi), y + v.out_at(bh, qi), D);
            }
            __syncthreads();
            /* query i0 + r sees key j when i0 + r >= j */
            const int from = live ? (int)max((int64_t)0, j - i0) : n;
            for (int r = from; r < n; r++) {
                const R p = expo(dot_staged<R, DMAX>(k, qs + r * D, D) * scale - lses[r]);
                axpy_staged<R, DMAX>(dv, p, gs + r * D, D);
                const R ds = p * (dot_staged<R, DMAX>(vr, gs + r * D, D) - deltas[r]);
                axpy_staged<R, DMAX>(dk, ds, qs + r * D, D);
            }
        }
        if (live) {
            store_row<R, DMAX>(dqkv + v.at(bh, j) + v.C, dk, D, scale);
            store_row<R, DMAX>(dqkv + v.at(bh, j) + 2 * v.C, dv, D, (R)1);
        }
    }
}

/* Rows of the other side staged at a time: MAX_TILE, fewer where two [tile, D] blocks (and two
 * values a row) would not fit the 48 KiB of shared memory a block gets without asking. */
int tile_rows(int64_t D, size_t elem) {
    const int64_t fit = (int64_t)((48 * 1024 / elem - 2 * MAX_TILE) / (2 * (size_t)D));
    return (int)(fit < MAX_TILE ? fit : MAX_TILE);
}

enum class pass { forward, backward_dq, backward_dkv };

template <typename R, int DMAX> struct kernels {
    static void run(pass p, dim3 grid, size_t shm, cudaStream_t st, const R *qkv, R *y, R *lse, const R *dy, R *dqkv,
                    heads_view v, int64_t BH, int tile, R scale) {
        switch (p) {
        case pass::forward: flash_fwd<R, DMAX><<<grid, ROWS, shm, st>>>(qkv, y, lse, v, BH, tile, scale); break;
        case pass::backward_dq:
            flash_bwd_dq<R, DMAX><<<grid, ROWS, shm, st>>>(qkv, y, lse, dy, dqkv, v, BH, tile, scale);
            break;
        case pass::backward_dkv:
            flash_bwd_dkv<R, DMAX><<<grid, ROWS, shm, st>>>(qkv, y, lse, dy, dqkv, v, BH, tile, scale);
            break;
        }
    }
};

/* One pass over every (sample, head) block: a CUDA block per ROWS rows of it. The tensors' data as R;
 * dy and dqkv are NULL in the forward. */
template <typename R>
void run_pass(pass p, const ct_tensor *qkv, int64_t H, const ct_tensor *y, const ct_tensor *lse, const ct_tensor *dy,
              const ct_tensor *dqkv) {
    const int64_t B = qkv->shape[0], T = qkv->shape[1], C = qkv->shape[2] / 3, D = C / H, BH = B * H;
    if (B == 0 || T == 0) return;
    CT_ASSERT(D >= 1 && D <= CT_FUSED_ATTENTION_MAX_HEAD_DIM);
    const heads_view v = {T, H, D, C, 3 * C};
    const int tile = tile_rows(D, sizeof(R));
    const size_t shm = (2 * (size_t)tile * (size_t)D + (p == pass::backward_dkv ? 2 * (size_t)tile : 0)) * sizeof(R);
    const dim3 grid((unsigned)((T + ROWS - 1) / ROWS), (unsigned)(BH < 65535 ? BH : 65535));
    const R scale = (R)(1.0 / sqrt((double)D));
    R *qkv_d = (R *)qkv->data, *y_d = (R *)y->data, *lse_d = (R *)lse->data;
    R *dy_d = dy ? (R *)dy->data : nullptr, *dqkv_d = dqkv ? (R *)dqkv->data : nullptr;
    cudaStream_t st = ct_cuda_stream_t();
    if (D <= 32)
        kernels<R, 32>::run(p, grid, shm, st, qkv_d, y_d, lse_d, dy_d, dqkv_d, v, BH, tile, scale);
    else if (D <= 64)
        kernels<R, 64>::run(p, grid, shm, st, qkv_d, y_d, lse_d, dy_d, dqkv_d, v, BH, tile, scale);
    else if (D <= 128)
        kernels<R, 128>::run(p, grid, shm, st, qkv_d, y_d, lse_d, dy_d, dqkv_d, v, BH, tile, scale);
    else
        kernels<R, 256>::run(p, grid, shm, st, qkv_d, y_d, lse_d, dy_d, dqkv_d, v, BH, tile, scale);
    CT_CUDA_LAUNCHED();
}

void check_devices(const ct_tensor *qkv, std::initializer_list<const ct_tensor *> others) {
    for (const ct_tensor *t : others) {
        CT_ASSERT(t->device.kind == CT_DEVICE_CUDA && t->device.index == qkv->device.index);
        CT_ASSERT(t->dtype == qkv->dtype);
    }
}

}  // namespace

/* ws is not needed here: every row lives in its thread's registers. */
extern "C" void ct_cuda_op_causal_attention_forward(const ct_tensor *qkv, int64_t n_head, ct_tensor *lse, ct_tensor *y,
                                                    ct_tensor *ws) {
    (void)ws;
    check_devices(qkv, {qkv, lse, y});
    if (qkv->dtype == CT_F32)
        run_pass<float>(pass::forward, qkv, n_head, y, lse, nullptr, nullptr);
    else if (qkv->dtype == CT_F64)
        run_pass<double>(pass::forward, qkv, n_head, y, lse, nullptr, nullptr);
    else
        ct_abort_at(__FILE__, __LINE__, "causal attention (cuda): unsupported dtype %s", ct_dtype_name(qkv->dtype));
}

/* Two passes, so that each gradient element is one thread's sum: the query side writes dq, the key
 * side dk and dv (disjoint columns of dqkv). */
extern "C" void ct_cuda_op_causal_attention_backward(const ct_tensor *qkv, int64_t n_head, const ct_tensor *y,
                                                     const ct_tensor *lse, const ct_tensor *dy, ct_tensor *dqkv,
                                                     ct_tensor *ws) {
    (void)ws;
    check_devices(qkv, {qkv, y, lse, dy, dqkv});
    for (pass p : {pass::backward_dq, pass::backward_dkv}) {
        if (qkv->dtype == CT_F32)
            run_pass<float>(p, qkv, n_head, y, lse, dy, dqkv);
        else if (qkv->dtype == CT_F64)
            run_pass<double>(p, qkv, n_head, y, lse, dy, dqkv);
        else
            ct_abort_at(__FILE__, __LINE__, "causal attention (cuda): unsupported dtype %s", ct_dtype_name(qkv->dtype));
    }
}
