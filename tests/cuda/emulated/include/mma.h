/* CUDA's warp matrix functions (nvcuda::wmma) for the host emulation of the backend's kernels
 * (../cuda_emulation.h). How a GPU spreads a fragment over its warp's lanes is unspecified, and
 * kernels may only treat fragments as wholes; so here every lane holds the whole tile and does the
 * whole multiply-add (float products and sums of the 16-bit inputs, as tensor cores accumulate). A
 * load reads the tile at once and a store writes only the lane's share (every 32nd element): a kernel
 * that reads a stored tile through shared memory without a __syncwarp or __syncthreads between sees
 * the other lanes' elements missing, as it could on a GPU. Pointers must be 32-byte aligned and
 * leading dimensions multiples of 16 bytes, as the hardware requires: otherwise the emulation stops. */
#ifndef CT_FAKE_MMA_H
#define CT_FAKE_MMA_H

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <type_traits>

#include "../cuda_emulation.h"
#include "cuda_bf16.h"

namespace nvcuda {
namespace wmma {

struct row_major {};
struct col_major {};
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
enum layout_t { mem_row_major, mem_col_major };

/* A tile in row-major order: M x K for matrix_a, K x N for matrix_b, M x N for the accumulator. */
template <typename Use, int M, int N, int K, typename T, typename Layout = void> struct fragment {
    static constexpr int rows = std::is_same<Use, matrix_b>::value ? K : M;
    static constexpr int cols = std::is_same<Use, matrix_a>::value ? K : N;
    static constexpr int num_elements = rows * cols;
    T x[num_elements];
};

inline float ct_emu_value(float v) { return v; }
inline float ct_emu_value(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T> void ct_emu_check_operand(const T *p, unsigned ldm) {
    if ((uintptr_t)p % 32 != 0 || (ldm * sizeof(T)) % 16 != 0) {
        std::fprintf(stderr, "cuda emulation: wmma operand %p with ldm %u: pointers must be 32-byte aligned and "
                     "ldm a multiple of 16 bytes\n", (const void *)p, ldm);
        std::abort();
    }
}

/* element (r, c) of a tile at p, stored by rows or by columns */
template <typename T> const T &ct_emu_at(const T *p, unsigned ldm, int r, int c, bool by_rows) {
    return by_rows ? p[(size_t)r * ldm + c] : p[(size_t)c * ldm + r];
}

template <typename Use, int M, int N, int K, typename T, typename L>
void load_matrix_sync(fragment<Use, M, N, K, T, L> &f, const T *p, unsigned ldm) {
    ct_emu_check_operand(p, ldm);
    using F = fragment<Use, M, N, K, T, L>;
    for (int r = 0; r < F::rows; r++)
        for (int c = 0; c < F::cols; c++)
            f.x[r * F::cols + c] = ct_emu_at(p, ldm, r, c, std::is_same<L, row_major>::value);
}

template <int M, int N, int K>
void load_matrix_sync(fragment<accumulator, M, N, K, float> &f, const float *p, unsigned ldm, layout_t layout) {
    ct_emu_check_operand(p, ldm);
    for (int r = 0; r < M; r++)
        for (int c = 0; c < N; c++) f.x[r * N + c] = ct_emu_at(p, ldm, r, c, layout == mem_row_major);
}

template <int M, int N, int K>
void store_matrix_sync(float *p, const fragment<accumulator, M, N, K, float> &f, unsigned ldm, layout_t layout) {
    ct_emu_check_operand(p, ldm);
    for (int i = (int)(threadIdx.x % warpSize); i < M * N; i += warpSize) {
        const int r = i / N, c = i % N;
        (layout == mem_row_major ? p[(size_t)r * ldm + c] : p[(size_t)c * ldm + r]) = f.x[i];
    }
}

template <typename Use, int M, int N, int K, typename T, typename L, typename V>
void fill_fragment(fragment<Use, M, N, K, T, L> &f, V v) {
    for (auto &e : f.x) e = (T)v;
}

template <int M, int N, int K, typename T, typename LA, typename LB>
void mma_sync(fragment<accumulator, M, N, K, float> &d, const fragment<matrix_a, M, N, K, T, LA> &a,
              const fragment<matrix_b, M, N, K, T, LB> &b, const fragment<accumulator, M, N, K, float> &c) {
    float out[M * N];
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float acc = c.x[i * N + j];
            for (int k = 0; k < K; k++) acc += ct_emu_value(a.x[i * K + k]) * ct_emu_value(b.x[k * N + j]);
            out[i * N + j] = acc;
        }
    for (int i = 0; i < M * N; i++) d.x[i] = out[i];
}

}  // namespace wmma
}  // namespace nvcuda

#endif
