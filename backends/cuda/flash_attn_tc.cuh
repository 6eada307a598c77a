/* The flash-style causal attention on tensor cores (nvcuda::wmma, bf16 inputs, float32 accumulation),
 * for float32 tensors when the math mode lets GEMMs round their inputs (bf16, fp16): the same op as
 * flash_attn_kernels.cuh (y, lse; dq, dk, dv; no [T, T] matrix stored), with its products done as
 * 16 x 16 x 16 tile multiply-adds. Device code only, launched by backends/cuda/flash_attn.cu.
 *
 * A block is 4 warps, each owning 16 rows of the block's side (queries in the forward and the dq pass,
 * keys in the dk/dv pass); the other side passes through shared memory 32 rows at a time, as bf16
 * (zero past the head dimension D, up to the instance's width DP of 32, 64 or 128):
 *  - forward: S = q k^T for the warp's rows (tensor cores, float), then two lanes per row do the
 *    online softmax on it in float (running maximum m and sum l; the output rows rescaled when m grows)
 *    and write P = exp(S - m) as bf16; O += P v (tensor cores, O kept in shared memory as float so the
 *    lanes can rescale it); at the end y = O / l, lse = m + log(l);
 *  - backward, query side: S and dP = dy v^T again (tensor cores), then P = exp(S - lse) and
 *    dS = P (dP - delta) with delta = dy . y in float from the float32 tensors; dq += dS k, held in
 *    accumulator fragments over all key tiles;
 *  - backward, key side: the same transposed, a warp per 16 keys: S^T = k q^T, dP^T = v dy^T, then
 *    dv += P^T dy and dk += dS^T q in accumulator fragments.
 * The softmax's scale multiplies the float scores (not the bf16 inputs); P and dS are rounded to bf16
 * for their products, as FlashAttention does. No atomics: each gradient element is one warp's sum in
 * a fixed order, the same bits every run. */
#ifndef CT_FLASH_ATTN_TC_CUH
#define CT_FLASH_ATTN_TC_CUH

#include <cuda_bf16.h>
#include <mma.h>

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "backends/cuda/flash_attn_kernels.cuh"

namespace ct_flash_tc {

#ifndef CT_CUDA_EMULATION /* the host emulation's is a global one */
using ct_flash::dynamic_shared;
#endif
using ct_flash::heads_view;
using bf16 = __nv_bfloat16;
namespace wmma = nvcuda::wmma;

constexpr int WARPS = 4, THREADS = 32 * WARPS;
constexpr int OWN = 16 * WARPS; /* rows of the block's own side */
constexpr int TILE = 32;        /* rows of the other side staged at a time */
constexpr int LDP = TILE + 16;  /* row stride of the bf16 P / dS tiles (32-byte aligned rows) */
constexpr int MAX_WIDTH = 128;

/* The row stride of a bf16 tile DP wide: 16 more, so that rows start 32 bytes apart and lanes that
 * read a column meet other banks. */
__host__ __device__ constexpr int ld_of(int DP) { return DP + 16; }

using frag_a = wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major>;
using frag_b_rows = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major>;
using frag_b_cols = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major>;
using frag_acc = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

/* Shared memory, carved in 128-byte aligned pieces. */
struct carver {
    unsigned char *base;
    size_t used;
    template <typename T> __host__ __device__ T *take(size_t n) {
        T *p = base ? (T *)(base + used) : nullptr;
        used += (n * sizeof(T) + 127) / 128 * 128;
        return p;
    }
};

/* rows x DP elements of head rows from qkv (the column `col` picks q, k or v) as bf16, rows from
 * `first` on; zeros past T and past D. */
__device__ inline void stage_rows(bf16 *dst, int ld, const float *qkv, const heads_view &v, int64_t bh, int64_t first,
                                  int rows, int DP, int64_t col) {
    for (int i = threadIdx.x; i < rows * DP; i += THREADS) {
        const int r = i / DP, d = i % DP;
        const int64_t t = first + r;
        dst[r * ld + d] = __float2bfloat16(t < v.T && d < v.D ? qkv[v.at(bh, t) + col + d] : 0.0f);
    }
}

/* dy . y of row t (float32 tensors, summed in float), 0 past T. */
__device__ inline float row_delta(const float *y, const float *dy, const heads_view &v, int64_t bh, int64_t t) {
    if (t >= v.T) return 0.0f;
    const int64_t o = v.out_at(bh, t);
    float acc = 0.0f;
    for (int d = 0; d < v.D; d++) acc += dy[o + d] * y[o + d];
    return acc;
}

/* What both backward passes stage of `rows` queries from q0 on: q and dy as bf16 (sm.q, sm.dy), each
 * row's lse and delta in float (sm.lse, sm.delta; zeros past T). */
template <int DP, typename S>
__device__ inline void stage_queries(S &sm, const float *qkv, const float *y, const float *lse, const float *dy,
                                     const heads_view &hv, int64_t bh, int64_t q0, int rows) {
    constexpr int LD = ld_of(DP);
    stage_rows(sm.q, LD, qkv, hv, bh, q0, rows, DP, 0);
    for (int i = threadIdx.x; i < rows * DP; i += THREADS) {
        const int r = i / DP, d = i % DP;
        const int64_t t = q0 + r;
        sm.dy[r * LD + d] = __float2bfloat16(t < hv.T && d < hv.D ? dy[hv.out_at(bh, t) + d] : 0.0f);
    }
    if ((int)threadIdx.x < rows) {
        const int64_t t = q0 + threadIdx.x;
        sm.lse[threadIdx.x] = t < hv.T ? lse[bh * hv.T + t] : 0.0f;
        sm.delta[threadIdx.x] = row_delta(y, dy, hv, bh, t);
    }
}

/* out[16 x 16 n] = a (16 x DP, rows) times b^T, b's rows 16 n at a time (b stored by rows, read as
 * columns), into float shared memory with row stride ldo. */
template <int DP, int N>
__device__ inline void times_transposed(float *out, int ldo, const bf16 *a, const bf16 *b, int ld) {
    frag_acc acc[N];
#pragma unroll
    for (int n = 0; n < N; n++) wmma::fill_fragment(acc[n], 0.0f);
#pragma unroll
    for (int k = 0; k < DP / 16; k++) {
        frag_a fa;
        wmma::load_matrix_sync(fa, a + k * 16, ld);
#pragma unroll
        for (int n = 0; n < N; n++) {
            frag_b_cols fb;
            wmma::load_matrix_sync(fb, b + n * 16 * ld + k * 16, ld);
            wmma::mma_sync(acc[n], fa, fb, acc[n]);
        }
    }
#pragma unroll
    for (int n = 0; n < N; n++) wmma::store_matrix_sync(out + n * 16, acc[n], ldo, wmma::mem_row_major);
}

/* acc[n] += p (16 x TILE, bf16, stride LDP) times rows (TILE x DP, bf16, stride ld), column block n. */
template <int DP>
__device__ inline void accumulate_product(frag_acc *acc, const bf16 *p, const bf16 *rows, int ld) {
#pragma unroll
    for (int k = 0; k < TILE / 16; k++) {
        frag_a fa;
        wmma::load_matrix_sync(fa, p + k * 16, LDP);
#pragma unroll
        for (int n = 0; n < DP / 16; n++) {
            frag_b_rows fb;
            wmma::load_matrix_sync(fb, rows + k * 16 * ld + n * 16, ld);
            wmma::mma_sync(acc[n], fa, fb, acc[n]);
        }
    }
}

/* The forward's shared memory; with base NULL, only its size. */
template <int DP> struct fwd_smem {
    bf16 *q, *k, *v, *p;
    float *s, *o, *m, *l;
    size_t bytes;
    __host__ __device__ explicit fwd_smem(unsigned char *base) {
        carver c{base, 0};
        q = c.take<bf16>(OWN * ld_of(DP));
        k = c.take<bf16>(TILE * ld_of(DP));
        v = c.take<bf16>(TILE * ld_of(DP));
        p = c.take<bf16>(OWN * LDP);
        s = c.take<float>(OWN * TILE);
        o = c.take<float>(OWN * DP);
        m = c.take<float>(OWN);
        l = c.take<float>(OWN);
        bytes = c.used;
    }
};

/* Blocks: x the (sample, head) pair, y the query block, the last (longest) first. */
template <int DP>
__global__ void __launch_bounds__(THREADS)
    flash_tc_fwd(const float *__restrict__ qkv, float *__restrict__ y, float *__restrict__ lse, heads_view hv,
                 float scale) {
    constexpr int LD = ld_of(DP);
    fwd_smem<DP> sm(dynamic_shared<unsigned char>());
    const int64_t bh = blockIdx.x, q0 = (int64_t)(gridDim.y - 1 - blockIdx.y) * OWN;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    stage_rows(sm.q, LD, qkv, hv, bh, q0, OWN, DP, 0);
    for (int i = threadIdx.x; i < OWN * DP; i += THREADS) sm.o[i] = 0.0f;
    if (threadIdx.x < OWN) {
        sm.m[threadIdx.x] = -INFINITY;
        sm.l[threadIdx.x] = 0.0f;
    }
    /* two lanes per row of the warp, each half of the tile's columns and of the row's output */
    const int r = warp * 16 + lane / 2, half = lane % 2;
    const int64_t t = q0 + r;
    const int64_t keys = (q0 + OWN < hv.T ? q0 + OWN : hv.T); /* the block's last query sees keys < this */
    for (int64_t k0 = 0; k0 < keys; k0 += TILE) {
        __syncthreads(); /* the previous tile's k and v are read by every warp */
        stage_rows(sm.k, LD, qkv, hv, bh, k0, TILE, DP, hv.C);
        stage_rows(sm.v, LD, qkv, hv, bh, k0, TILE, DP, 2 * hv.C);
        __syncthreads();
        times_transposed<DP, TILE / 16>(sm.s + warp * 16 * TILE, TILE, sm.q + warp * 16 * LD, sm.k, LD);
        __syncwarp();
        const float m_old = sm.m[r], l_old = sm.l[r];
        float *srow = sm.s + r * TILE;
        float top = -INFINITY;
        for (int j = half * 16; j < half * 16 + 16; j++) {
            const int64_t key = k0 + j;
            srow[j] = key <= t && key < hv.T ? srow[j] * scale : -INFINITY;
            top = fmaxf(top, srow[j]);
        }
        top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, 1));
        const float m_new = fmaxf(m_old, top), alpha = expf(m_old - m_new);
        float sum = 0.0f;
        for (int j = half * 16; j < half * 16 + 16; j++) {
            const float p = expf(srow[j] - m_new);
            sm.p[r * LDP + j] = __float2bfloat16(p);
            sum += p;
        }
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        for (int d = half * DP / 2; d < (half + 1) * DP / 2; d++) sm.o[r * DP + d] *= alpha;
        __syncwarp(); /* both lanes read m and l above */
        if (half == 0) {
            sm.m[r] = m_new;
            sm.l[r] = l_old * alpha + sum;
        }
        /* O += P v, a column block of O at a time through an accumulator fragment */
        for (int n = 0; n < DP / 16; n++) {
            frag_acc acc;
            float *on = sm.o + warp * 16 * DP + n * 16;
            wmma::load_matrix_sync(acc, on, DP, wmma::mem_row_major);
#pragma unroll
            for (int k = 0; k < TILE / 16; k++) {
                frag_a fa;
                frag_b_rows fb;
                wmma::load_matrix_sync(fa, sm.p + warp * 16 * LDP + k * 16, LDP);
                wmma::load_matrix_sync(fb, sm.v + k * 16 * LD + n * 16, LD);
                wmma::mma_sync(acc, fa, fb, acc);
            }
            wmma::store_matrix_sync(on, acc, DP, wmma::mem_row_major);
        }
        __syncwarp(); /* the next tile's rescaling, or the output, reads the lanes' stores */
    }
    if (t < hv.T) {
        const float l = sm.l[r], inv = 1.0f / l;
        const int64_t o = hv.out_at(bh, t);
        for (int d = half * DP / 2; d < (half + 1) * DP / 2 && d < hv.D; d++) y[o + d] = sm.o[r * DP + d] * inv;
        if (half == 0) lse[bh * hv.T + t] = sm.m[r] + logf(l);
    }
}

/* The query-side backward's shared memory. */
template <int DP> struct dq_smem {
    bf16 *q, *dy, *k, *v, *ds;
    float *s, *dp, *lse, *delta, *out;
    size_t bytes;
    __host__ __device__ explicit dq_smem(unsigned char *base) {
        carver c{base, 0};
        q = c.take<bf16>(OWN * ld_of(DP));
        dy = c.take<bf16>(OWN * ld_of(DP));
        k = c.take<bf16>(TILE * ld_of(DP));
        v = c.take<bf16>(TILE * ld_of(DP));
        ds = c.take<bf16>(OWN * LDP);
        s = c.take<float>(OWN * TILE);
        dp = c.take<float>(OWN * TILE);
        lse = c.take<float>(OWN);
        delta = c.take<float>(OWN);
        out = c.take<float>(OWN * DP);
        bytes = c.used;
    }
};

/* Stores 16 rows of accumulator fragments into float shared memory (stride DP), then writes rows
 * [first, first + 16) of qkv-shaped dst at column col, times f, below T and D. Lanes: two per row. */
template <int DP>
__device__ inline void write_rows(float *stage, const frag_acc *acc, float *dst, const heads_view &hv, int64_t bh,
                                  int64_t first, int64_t col, float f) {
    const int lane = threadIdx.x % 32;
    __syncwarp(); /* the stage may hold the warp's previous rows, still being read */
#pragma unroll
    for (int n = 0; n < DP / 16; n++) wmma::store_matrix_sync(stage + n * 16, acc[n], DP, wmma::mem_row_major);
    __syncwarp();
    const int r = lane / 2, half = lane % 2;
    const int64_t t = first + r;
    if (t >= hv.T) return;
    float *row = dst + hv.at(bh, t) + col;
    for (int d = half * DP / 2; d < (half + 1) * DP / 2 && d < hv.D; d++) row[d] = stage[r * DP + d] * f;
}

template <int DP>
__global__ void __launch_bounds__(THREADS)
    flash_tc_bwd_dq(const float *__restrict__ qkv, const float *__restrict__ y, const float *__restrict__ lse,
                    const float *__restrict__ dy, float *__restrict__ dqkv, heads_view hv, float scale) {
    constexpr int LD = ld_of(DP);
    dq_smem<DP> sm(dynamic_shared<unsigned char>());
    const int64_t bh = blockIdx.x, q0 = (int64_t)(gridDim.y - 1 - blockIdx.y) * OWN;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    stage_queries<DP>(sm, qkv, y, lse, dy, hv, bh, q0, OWN);
    frag_acc dq[DP / 16];
#pragma unroll
    for (int n = 0; n < DP / 16; n++) wmma::fill_fragment(dq[n], 0.0f);
    const int r = warp * 16 + lane / 2, half = lane % 2;
    const int64_t t = q0 + r;
    const int64_t keys = (q0 + OWN < hv.T ? q0 + OWN : hv.T);
    for (int64_t k0 = 0; k0 < keys; k0 += TILE) {
        __syncthreads();
        stage_rows(sm.k, LD, qkv, hv, bh, k0, TILE, DP, hv.C);
        stage_rows(sm.v, LD, qkv, hv, bh, k0, TILE, DP, 2 * hv.C);
        __syncthreads();
        times_transposed<DP, TILE / 16>(sm.s + warp * 16 * TILE, TILE, sm.q + warp * 16 * LD, sm.k, LD);
        times_transposed<DP, TILE / 16>(sm.dp + warp * 16 * TILE, TILE, sm.dy + warp * 16 * LD, sm.v, LD);
        __syncwarp();
        const float row_lse = sm.lse[r], row_delta_ = sm.delta[r];
        for (int j = half * 16; j < half * 16 + 16; j++) {
            const int64_t key = k0 + j;
            const float p = key <= t && key < hv.T ? expf(sm.s[r * TILE + j] * scale - row_lse) : 0.0f;
            sm.ds[r * LDP + j] = __float2bfloat16(p * (sm.dp[r * TILE + j] - row_delta_));
        }
        __syncwarp();
        accumulate_product<DP>(dq, sm.ds + warp * 16 * LDP, sm.k, LD);
    }
    write_rows<DP>(sm.out + warp * 16 * DP, dq, dqkv, hv, bh, q0 + warp * 16, 0, scale);
}

/* The key-side backward's shared memory: the block's keys and values, a tile of queries. */
template <int DP> struct dkv_smem {
    bf16 *k, *v, *q, *dy, *p, *ds;
    float *s, *dp, *lse, *delta, *out;
    size_t bytes;
    __host__ __device__ explicit dkv_smem(unsigned char *base) {
        carver c{base, 0};
        k = c.take<bf16>(OWN * ld_of(DP));
        v = c.take<bf16>(OWN * ld_of(DP));
        q = c.take<bf16>(TILE * ld_of(DP));
        dy = c.take<bf16>(TILE * ld_of(DP));
        p = c.take<bf16>(OWN * LDP);
        ds = c.take<bf16>(OWN * LDP);
        s = c.take<float>(OWN * TILE);
        dp = c.take<float>(OWN * TILE);
        lse = c.take<float>(TILE);
        delta = c.take<float>(TILE);
        out = c.take<float>(OWN * DP);
        bytes = c.used;
    }
};

template <int DP>
__global__ void __launch_bounds__(THREADS)
    flash_tc_bwd_dkv(const float *__restrict__ qkv, const float *__restrict__ y, const float *__restrict__ lse,
                     const float *__restrict__ dy, float *__restrict__ dqkv, heads_view hv, float scale) {
    constexpr int LD = ld_of(DP);
    dkv_smem<DP> sm(dynamic_shared<unsigned char>());
    /* the first key blocks see the most queries: they go first */
    const int64_t bh = blockIdx.x, k0 = (int64_t)blockIdx.y * OWN;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    stage_rows(sm.k, LD, qkv, hv, bh, k0, OWN, DP, hv.C);
    stage_rows(sm.v, LD, qkv, hv, bh, k0, OWN, DP, 2 * hv.C);
    frag_acc dk[DP / 16], dv[DP / 16];
#pragma unroll
    for (int n = 0; n < DP / 16; n++) {
        wmma::fill_fragment(dk[n], 0.0f);
        wmma::fill_fragment(dv[n], 0.0f);
    }
    const int r = warp * 16 + lane / 2, half = lane % 2;
    const int64_t key = k0 + r;
    for (int64_t q0 = k0 / TILE * TILE; q0 < hv.T; q0 += TILE) {
        __syncthreads();
        stage_queries<DP>(sm, qkv, y, lse, dy, hv, bh, q0, TILE);
        __syncthreads();
        times_transposed<DP, TILE / 16>(sm.s + warp * 16 * TILE, TILE, sm.k + warp * 16 * LD, sm.q, LD);
        times_transposed<DP, TILE / 16>(sm.dp + warp * 16 * TILE, TILE, sm.v + warp * 16 * LD, sm.dy, LD);
        __syncwarp();
        for (int j = half * 16; j < half * 16 + 16; j++) {
            const int64_t q = q0 + j;
            const float p = key <= q && q < hv.T && key < hv.T ? expf(sm.s[r * TILE + j] * scale - sm.lse[j]) : 0.0f;
            sm.p[r * LDP + j] = __float2bfloat16(p);
            sm.ds[r * LDP + j] = __float2bfloat16(p * (sm.dp[r * TILE + j] - sm.delta[j]));
        }
        __syncwarp();
        accumulate_product<DP>(dv, sm.p + warp * 16 * LDP, sm.dy, LD);
        accumulate_product<DP>(dk, sm.ds + warp * 16 * LDP, sm.q, LD);
    }
    float *stage = sm.out + warp * 16 * DP;
    write_rows<DP>(stage, dk, dqkv, hv, bh, k0 + warp * 16, hv.C, scale);
    write_rows<DP>(stage, dv, dqkv, hv, bh, k0 + warp * 16, 2 * hv.C, 1.0f);
}

}  // namespace ct_flash_tc

#endif
