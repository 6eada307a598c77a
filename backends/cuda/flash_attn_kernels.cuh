/* The kernels of the flash-style causal attention (ct_op_causal_attention_forward / _backward,
 * core/ops/ops_attn.h; the CPU's twin is in backends/cpu/attn_tmpl.h), device code only, launched by
 * backends/cuda/flash_attn.cu. No [T, T] matrix is ever stored, only each query row's log-sum-exp.
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
 * an array of the next power of two from 32 (a kernel instance each, by_width), so the compiler can
 * keep it in registers. Simple kernels on the CUDA cores; tensor cores are not used here. */
#ifndef CT_FLASH_ATTN_KERNELS_CUH
#define CT_FLASH_ATTN_KERNELS_CUH

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace ct_flash {

constexpr int ROWS = 64;     /* rows (threads) a block owns */
constexpr int MAX_TILE = 32; /* rows of the other side staged at a time */

__device__ inline float expo(float x) { return expf(x); }
__device__ inline double expo(double x) { return exp(x); }

/* The block's dynamic shared memory (the launch's shared_bytes). The host emulation of the kernels
 * (tests/cuda/emulated/) defines its own, an allocation of exactly the launch's size, so that a
 * kernel reading past what shape_of asked for is an AddressSanitizer report there. */
#ifndef CT_CUDA_EMULATION
template <typename T> __device__ inline T *dynamic_shared() {
    extern __shared__ __align__(128) unsigned char ct_flash_smem[]; /* wmma tiles need 32-byte alignment */
    return (T *)ct_flash_smem;
}
#endif

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

/* Stages head's keys and values up to key last (exclusive) a tile at a time, all threads taking
 * part, and calls f(k_row, v_row) for each key that query i sees, in order (none where !live). */
template <typename R, typename F>
__device__ inline void each_visible_key(R *ks, R *vs, const R *head, const heads_view &v, int64_t i, bool live,
                                        int64_t last, int tile, F f) {
    const int D = (int)v.D;
    for (int64_t j0 = 0; j0 < last; j0 += tile) {
        const int n = (int)min((int64_t)tile, last - j0);
        __syncthreads(); /* the last tile's readers are done */
        stage(ks, head + v.C, v.ld, vs, head + 2 * v.C, v.ld, j0, n, D);
        __syncthreads();
        const int visible = live ? (int)min((int64_t)n, i - j0 + 1) : 0;
        for (int r = 0; r < visible; r++) f(ks + r * D, vs + r * D);
    }
}

template <typename R, int DMAX>
__global__ void flash_fwd(const R *qkv, R *y, R *lse, heads_view v, int64_t BH, int tile, R scale) {
    R *ks = dynamic_shared<R>(), *vs = ks + tile * v.D;
    const int D = (int)v.D;
    const int64_t i = blockIdx.x * (int64_t)ROWS + threadIdx.x, last = min(v.T, (blockIdx.x + 1) * (int64_t)ROWS);
    for (int64_t bh = blockIdx.y; bh < BH; bh += gridDim.y) {
        const R *head = qkv + v.at(bh, 0);
        const bool live = i < v.T;
        R q[DMAX], o[DMAX];
        load_row<R, DMAX>(q, head + (live ? i : 0) * v.ld, D, (R)1);
        zero_row<R, DMAX>(o);
        R m = -INFINITY, l = 0;
        each_visible_key(ks, vs, head, v, i, live, last, tile, [&](const R *kr, const R *vr) {
            const R sc = dot_staged<R, DMAX>(q, kr, D) * scale; /* as the backward makes it */
            if (sc > m) { /* a new maximum: rescale what was summed against the old one (0 at first) */
                const R keep = expo(m - sc);
                l *= keep;
#pragma unroll
                for (int d = 0; d < DMAX; d++) o[d] *= keep;
                m = sc;
            }
            const R p = expo(sc - m);
            l += p;
            axpy_staged<R, DMAX>(o, p, vr, D);
        });
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
    R *ks = dynamic_shared<R>(), *vs = ks + tile * v.D;
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
        each_visible_key(ks, vs, head, v, i, live, last, tile, [&](const R *kr, const R *vr) {
            const R p = expo(dot_staged<R, DMAX>(q, kr, D) * scale - row_lse);
            const R ds = p * (dot_staged<R, DMAX>(g, vr, D) - delta);
            axpy_staged<R, DMAX>(dq, ds, kr, D);
        });
        if (live) store_row<R, DMAX>(dqkv + v.at(bh, i), dq, D, scale);
    }
}

template <typename R, int DMAX>
__global__ void flash_bwd_dkv(const R *qkv, const R *y, const R *lse, const R *dy, R *dqkv, heads_view v, int64_t BH,
                              int tile, R scale) {
    R *qs = dynamic_shared<R>(), *gs = qs + tile * v.D, *lses = gs + tile * v.D, *deltas = lses + tile;
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
            if ((int)threadIdx.x < n) {
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
inline int tile_rows(int64_t D, size_t elem) {
    const int64_t fit = (int64_t)((48 * 1024 / elem - 2 * MAX_TILE) / (2 * (size_t)D));
    return (int)(fit < MAX_TILE ? fit : MAX_TILE);
}

/* Calls f(std::integral_constant<int, DMAX>()) with the register rows' width for head dimension D. */
template <typename F> void by_width(int64_t D, F f) {
    if (D <= 32)
        f(std::integral_constant<int, 32>());
    else if (D <= 64)
        f(std::integral_constant<int, 64>());
    else if (D <= 128)
        f(std::integral_constant<int, 128>());
    else
        f(std::integral_constant<int, 256>());
}

enum class pass { forward, backward_dq, backward_dkv };

/* A pass's launch: a block of ROWS threads per ROWS rows of each (sample, head) block (blocks of the
 * y dimension loop over more than 65535 of them), its tile and its dynamic shared memory. */
struct launch_shape {
    unsigned blocks_x, blocks_y;
    int tile;
    size_t shared_bytes;
};

inline launch_shape shape_of(pass p, int64_t BH, int64_t T, int64_t D, size_t elem) {
    launch_shape s;
    s.blocks_x = (unsigned)((T + ROWS - 1) / ROWS);
    s.blocks_y = (unsigned)(BH < 65535 ? BH : 65535);
    s.tile = tile_rows(D, elem);
    s.shared_bytes = (2 * (size_t)s.tile * (size_t)D + (p == pass::backward_dkv ? 2 * (size_t)s.tile : 0)) * elem;
    return s;
}

}  // namespace ct_flash

#endif
