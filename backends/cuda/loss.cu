/* Loss ops on CUDA (the twins of backends/cpu/loss.c; the contract is core/ops/ops_loss.h).
 *
 * Everything a loss computes is computed in double, as on the CPU, and only gradients are stored in
 * the tensor's type. Softmax cross-entropy gives each row to one warp: the lanes stride over the
 * classes and combine their max and sums with xor-butterfly shuffles (a fixed order, broadcast from
 * lane 0 afterwards so every lane uses the same bits). Per-row losses and weights go to the library
 * workspace and are then summed by a fixed two-stage reduction (at most SUM_BLOCKS block partials,
 * each a fixed tree, then one block over the partials): the shape of the reduction depends only on
 * the number of values, so a loss is bit-identical from run to run. The first invalid target is an
 * atomicMin over row indices, which is order-independent.
 *
 * Ops that return a value to the host (the sums, the first invalid target) copy a small header
 * back with ct_cuda_memcpy, which synchronises the current stream; the backward of cross-entropy
 * does so too, because its contract returns the first invalid row.
 *
 * Why one file of over 600 lines: cross-entropy's kernels (forward, per row, backward, the fused
 * classifier), the language model's token values and the pointwise losses share the warp reductions,
 * the fixed-order sums and the header they read back through, which are this file's own. */
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "backends/cuda/cuda_handles.h"
#include "backends/cuda/ops_cuda.h"

namespace {

constexpr int WARP = 32;
constexpr int SUM_BLOCKS = 256; /* most block partials of a sum */
constexpr unsigned long long NO_ROW = ~0ull;

/* What the host reads back: the first invalid row (NO_ROW: none), then up to two sums. */
struct header {
    unsigned long long bad;
    double sum, count, pad;
};

/* Sum over the 32 lanes of a warp, the same bits in every lane. */
__device__ inline double warp_sum(double v) {
    for (int off = WARP / 2; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return __shfl_sync(0xffffffffu, v, 0);
}

/* Max over the lanes as the CPU takes it (`>` comparisons, which skip NaNs unless one comes first;
 * NaNs reach the result through the exp below either way), lane 0's value in every lane. */
__device__ inline double warp_max(double m) {
    for (int off = WARP / 2; off > 0; off >>= 1) {
        double o = __shfl_xor_sync(0xffffffffu, m, off);
        m = o > m ? o : m;
    }
    return __shfl_sync(0xffffffffu, m, 0);
}

/* log-sum-exp of one row of c values, every lane of the warp taking part. A NaN anywhere makes it
 * NaN (exp(NaN - m) is NaN), as on the CPU. */
template <typename R> __device__ double row_lse(const R *zr, int64_t c, int lane) {
    double m = lane < c ? (double)zr[lane] : -INFINITY;
    for (int64_t j = lane + WARP; j < c; j += WARP)
        if ((double)zr[j] > m) m = zr[j];
    m = warp_max(m);
    double se = 0.0;
    for (int64_t j = lane; j < c; j += WARP) se += exp((double)zr[j] - m);
    return m + log(warp_sum(se));
}

/* Block-wide sum of one double per thread (blockDim.x == CT_CUDA_THREADS), a fixed tree. */
__device__ double block_sum(double v) {
    __shared__ double s[CT_CUDA_THREADS];
    s[threadIdx.x] = v;
    __syncthreads();
    for (int w = CT_CUDA_THREADS / 2; w > 0; w >>= 1) {
        if (threadIdx.x < w) s[threadIdx.x] += s[threadIdx.x + w];
        __syncthreads();
    }
    return s[0];
}

/* Stage 1 of a sum of f(0..n): each block's grid-stride share, one partial per block. */
template <typename F> __global__ void sum_partials(int64_t n, F f, double *part) {
    double acc = 0.0;
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) acc += f(i);
    acc = block_sum(acc);
    if (threadIdx.x == 0) part[blockIdx.x] = acc;
}

/* Stage 2: one block adds the partials. */
__global__ void sum_final(const double *part, int nparts, double *out) {
    double acc = 0.0;
    for (int i = threadIdx.x; i < nparts; i += blockDim.x) acc += part[i];
    acc = block_sum(acc);
    if (threadIdx.x == 0) *out = acc;
}

int sum_blocks(int64_t n) {
    int64_t b = (n + CT_CUDA_THREADS - 1) / CT_CUDA_THREADS;
    return (int)(b < 1 ? 1 : b > SUM_BLOCKS ? SUM_BLOCKS : b);
}

/* *out = sum of f(i) for i in [0, n), on the current stream; part holds SUM_BLOCKS doubles. */
template <typename F> void device_sum(int64_t n, F f, double *part, double *out, cudaStream_t st) {
    int nb = sum_blocks(n);
    sum_partials<<<nb, CT_CUDA_THREADS, 0, st>>>(n, f, part);
    CT_CUDA_LAUNCHED();
    sum_final<<<1, CT_CUDA_THREADS, 0, st>>>(part, nb, out);
    CT_CUDA_LAUNCHED();
}

struct array_value {
    const double *v;
    __device__ double operator()(int64_t i) const { return v[i]; }
};

/* --- softmax cross-entropy ---------------------------------------------------------------------- */

/* The loss of a row with a valid target y given its log-sum-exp, the same in every lane. */
template <typename R>
__device__ double row_loss(const R *zr, int64_t c, int64_t y, const double *w, double eps, double lse, int lane) {
    double l = (1.0 - eps) * (w ? w[y] : 1.0) * (lse - (double)zr[y]);
    if (eps != 0.0) {
        /* sum_c w_c (lse - z_c), the smoothing term over all classes */
        double s = 0.0;
        for (int64_t j = lane; j < c; j += WARP) s += (w ? w[j] : 1.0) * (lse - (double)zr[j]);
        l += eps / (double)c * warp_sum(s);
    }
    return l;
}

/* W = sum_c w_c over the warp (C when unweighted or without smoothing, where it is not used). */
__device__ inline double weight_sum(const double *w, int64_t c, double eps, int lane) {
    if (!w || eps == 0.0) return (double)c;
    double s = 0.0;
    for (int64_t j = lane; j < c; j += WARP) s += w[j];
    return warp_sum(s);
}

/* The gradient of a row with a valid target (formula of loss_tmpl.h) into dr. Every element is read
 * and written by the same lane, and the __syncwarp orders the caller's reads of the row (row_loss
 * reads z_y in every lane) before any write, so dr may alias zr. */
template <typename R>
__device__ void row_grad(const R *zr, int64_t c, int64_t y, const double *w, double eps, double wsum, double scale,
                         double lse, int lane, R *dr) {
    double es = eps / (double)c;
    double wy = w ? w[y] : 1.0;
    double a = scale * ((1.0 - eps) * wy + es * wsum);
    double b = scale * es;
    __syncwarp();
    for (int64_t j = lane; j < c; j += WARP) {
        double v = a * exp((double)zr[j] - lse) - b * (w ? w[j] : 1.0);
        if (j == y) v -= scale * (1.0 - eps) * wy; /* the target's own term */
        dr[j] = (R)v;
    }
}

/* One warp per row: loss[r] and cnt[r] (0 for ignored and invalid rows); invalid rows lower *bad. */
template <typename R, typename T>
__global__ void xent_fwd_rows(const R *z, const T *tgt, int64_t rows, int64_t c, const double *w, double eps,
                              int64_t ignore, double *loss, double *cnt, unsigned long long *bad) {
    int lane = threadIdx.x % WARP;
    int64_t warp = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / WARP;
    int64_t nwarps = (int64_t)gridDim.x * blockDim.x / WARP;
    for (int64_t r = warp; r < rows; r += nwarps) { /* r is the same in every lane: no divergence */
        int64_t y = (int64_t)tgt[r];
        double l = 0.0, n = 0.0;
        if (y != ignore) {
            if (y < 0 || y >= c) {
                if (lane == 0) atomicMin(bad, (unsigned long long)r);
            } else {
                const R *zr = z + r * c;
                l = row_loss(zr, c, y, w, eps, row_lse(zr, c, lane), lane);
                n = w ? w[y] : 1.0;
            }
        }
        if (lane == 0) {
            loss[r] = l;
            cnt[r] = n;
        }
    }
}

/* One warp per row; see loss_tmpl.h for the formula: dz_j = a p_j - b w_j - [j == y] scale (1-eps) w_y
 * with a = scale ((1-eps) w_y + eps/C W), b = scale eps/C, W = sum_c w_c. Every element is read and
 * written by the same lane, and all reads of a row (inside row_lse) end before its writes, so dz
 * may alias z as on the CPU. */
template <typename R, typename T>
__global__ void xent_bwd_rows(const R *z, const T *tgt, int64_t rows, int64_t c, const double *w, double eps,
                              int64_t ignore, double scale, R *dz, unsigned long long *bad) {
    int lane = threadIdx.x % WARP;
    int64_t warp = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / WARP;
    int64_t nwarps = (int64_t)gridDim.x * blockDim.x / WARP;
    for (int64_t r = warp; r < rows; r += nwarps) {
        int64_t y = (int64_t)tgt[r];
        const R *zr = z + r * c;
        R *dr = dz + r * c;
        if (y == ignore || y < 0 || y >= c) {
            if (y != ignore && lane == 0) atomicMin(bad, (unsigned long long)r);
            for (int64_t j = lane; j < c; j += WARP) dr[j] = (R)0;
            continue;
        }
        row_grad(zr, c, y, w, eps, weight_sum(w, c, eps, lane), scale, row_lse(zr, c, lane), lane, dr);
    }
}

/* The first row whose target is neither ignore_index nor in [0, c) lowers *bad. */
template <typename T> __global__ void xent_find_bad(const T *tgt, int64_t rows, int64_t c, int64_t ignore,
                                                    unsigned long long *bad) {
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; r < rows; r += stride) {
        int64_t y = (int64_t)tgt[r];
        if (y != ignore && (y < 0 || y >= c)) atomicMin(bad, (unsigned long long)r);
    }
}

/* The fused classifier: one warp per row computes the row's loss and then overwrites dz's row (which
 * may be z's) with its gradient. It runs after xent_find_bad on the same stream and does nothing
 * when that found an invalid target, so an error leaves every row as it was; the per-row losses are
 * summed as in the forward, to the same bits. */
template <typename R, typename T>
__global__ void xent_fused_rows(const R *z, const T *tgt, int64_t rows, int64_t c, const double *w, double eps,
                                int64_t ignore, double scale, R *dz, double *loss, double *cnt,
                                const unsigned long long *bad) {
    if (*bad != NO_ROW) return;
    int lane = threadIdx.x % WARP;
    int64_t warp = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / WARP;
    int64_t nwarps = (int64_t)gridDim.x * blockDim.x / WARP;
    for (int64_t r = warp; r < rows; r += nwarps) {
        int64_t y = (int64_t)tgt[r];
        const R *zr = z + r * c;
        R *dr = dz + r * c;
        double l = 0.0, n = 0.0;
        if (y == ignore) {
            for (int64_t j = lane; j < c; j += WARP) dr[j] = (R)0;
        } else {
            double lse = row_lse(zr, c, lane);
            l = row_loss(zr, c, y, w, eps, lse, lane);
            n = w ? w[y] : 1.0;
            row_grad(zr, c, y, w, eps, weight_sum(w, c, eps, lane), scale, lse, lane, dr);
        }
        if (lane == 0) {
            loss[r] = l;
            cnt[r] = n;
        }
    }
}

/* All tensors of an op on one CUDA device (caller bugs abort, as CT_ASSERT on the CPU). */
void same_device(const ct_tensor *a, const ct_tensor *b) {
    CT_ASSERT(a->device.kind == CT_DEVICE_CUDA && b->device.kind == CT_DEVICE_CUDA);
    CT_ASSERT(a->device.index == b->device.index);
}

void xent_dims(const ct_tensor *logits, const ct_tensor *target, const ct_xent_opts *o, int64_t *rows, int64_t *c) {
    same_device(logits, target);
    CT_ASSERT(logits->ndim >= 1 && (target->dtype == CT_I64 || target->dtype == CT_I32));
    CT_ASSERT(logits->dtype == CT_F32 || logits->dtype == CT_F64);
    *c = logits->shape[logits->ndim - 1];
    CT_ASSERT(*c > 0);
    *rows = ct_tensor_numel(logits) / *c;
    CT_ASSERT(ct_tensor_numel(target) == *rows);
    if (o->weight) {
        same_device(logits, o->weight);
        CT_ASSERT(o->weight->dtype == CT_F64 && ct_tensor_numel(o->weight) == *c);
    }
}

/* a ranks above b in torch.argmax's order: larger, NaN above every number. */
__device__ inline bool ranks_above(double a, double b) { return isnan(a) ? !isnan(b) : (!isnan(b) && a > b); }

/* The first largest entry of a row, one warp together, NaN above every number: each lane takes the
 * first best of its strided classes, and the lanes' bests are combined by rank and, on equal rank, by
 * the lower index, which is the CPU's scan's choice (the first maximum) and the same pair in every
 * lane. *m gets its value. */
template <typename R> __device__ long long warp_first_argmax(const R *zr, int64_t c, int lane, double *m_out) {
    double m = 0.0;
    long long a = -1; /* -1: this lane has no class (c < 32) and ranks below every other */
    for (int64_t j = lane; j < c; j += WARP)
        if (a < 0 || ranks_above((double)zr[j], m)) {
            m = (double)zr[j];
            a = j;
        }
    for (int off = WARP / 2; off > 0; off >>= 1) {
        double om = __shfl_xor_sync(0xffffffffu, m, off);
        long long oa = __shfl_xor_sync(0xffffffffu, a, off);
        if (oa >= 0 && (a < 0 || ranks_above(om, m) || (!ranks_above(m, om) && oa < a))) {
            m = om;
            a = oa;
        }
    }
    *m_out = m;
    return a;
}

/* ct_op_token_values, one warp per row: the first argmax, then the sum of exp(z_j - m) over j != a.
 * The branch on m is the same in every lane, so the warp sum inside it is safe. */
template <typename R, typename T>
__global__ void token_values_rows(const R *z, const T *tgt, int64_t rows, int64_t c, double *nll, double *hit) {
    int lane = threadIdx.x % WARP;
    int64_t warp = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / WARP;
    int64_t nwarps = (int64_t)gridDim.x * blockDim.x / WARP;
    for (int64_t r = warp; r < rows; r += nwarps) {
        int64_t y = (int64_t)tgt[r];
        double l = 0.0, h = 0.0;
        if (y >= 0 && y < c) {
            const R *zr = z + r * c;
            double m;
            long long a = warp_first_argmax(zr, c, lane, &m);
            h = a == y ? 1.0 : 0.0;
            if (!isfinite(m)) {
                l = NAN; /* log_softmax's NaN: exp(inf - inf) poisons every entry */
            } else {
                double rest = 0.0;
                for (int64_t j = lane; j < c; j += WARP)
                    if (j != a) rest += exp((double)zr[j] - m);
                l = (m - (double)zr[y]) + log1p(warp_sum(rest));
            }
        }
        if (lane == 0) {
            nll[r] = l;
            hit[r] = h;
        }
    }
}

/* ct_op_class_ranks, one warp per row: the first argmax, and the lanes' counts of the classes that
 * rank above the label (larger, or equal at a higher index; NaN the largest, equal to itself), added
 * as doubles (exact: C < 2^31). The branch on y is the same in every lane. */
template <typename R, typename T>
__global__ void class_ranks_rows(const R *s, const T *tgt, int64_t rows, int64_t c, int32_t *pred, int32_t *above) {
    int lane = threadIdx.x % WARP;
    int64_t warp = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / WARP;
    int64_t nwarps = (int64_t)gridDim.x * blockDim.x / WARP;
    for (int64_t r = warp; r < rows; r += nwarps) {
        const R *sr = s + r * c;
        double m;
        long long a = warp_first_argmax(sr, c, lane, &m);
        int64_t y = (int64_t)tgt[r];
        int n = -1;
        if (y >= 0 && y < c) {
            double sy = (double)sr[y], k = 0.0;
            for (int64_t j = lane; j < c; j += WARP) {
                double v = (double)sr[j];
                k += ranks_above(v, sy) || (j > y && (isnan(v) ? isnan(sy) : v == sy));
            }
            n = (int)warp_sum(k);
        }
        if (lane == 0) {
            pred[r] = (int32_t)a;
            above[r] = n;
        }
    }
}

unsigned warp_blocks(int64_t rows) { return ct_cuda_blocks(rows * WARP); }

template <typename R, typename T>
void xent_fwd_launch(const ct_tensor *logits, const ct_tensor *target, const ct_xent_opts *o, int64_t rows, int64_t c,
                     double *loss, double *cnt, unsigned long long *bad, cudaStream_t st) {
    xent_fwd_rows<R, T><<<warp_blocks(rows), CT_CUDA_THREADS, 0, st>>>(
        (const R *)logits->data, (const T *)target->data, rows, c,
        o->weight ? (const double *)o->weight->data : nullptr, o->label_smoothing, o->ignore_index, loss, cnt, bad);
    CT_CUDA_LAUNCHED();
}

template <typename R, typename T>
void xent_bwd_launch(const ct_tensor *logits, const ct_tensor *target, const ct_xent_opts *o, int64_t rows, int64_t c,
                     double scale, ct_tensor *dlogits, unsigned long long *bad, cudaStream_t st) {
    xent_bwd_rows<R, T><<<warp_blocks(rows), CT_CUDA_THREADS, 0, st>>>(
        (const R *)logits->data, (const T *)target->data, rows, c,
        o->weight ? (const double *)o->weight->data : nullptr, o->label_smoothing, o->ignore_index, scale,
        (R *)dlogits->data, bad);
    CT_CUDA_LAUNCHED();
}

template <typename R, typename T>
void xent_fused_launch(const ct_tensor *logits, const ct_tensor *target, const ct_xent_opts *o, int64_t rows, int64_t c,
                       double scale, ct_tensor *dlogits, double *loss, double *cnt, unsigned long long *bad,
                       cudaStream_t st) {
    xent_find_bad<T><<<ct_cuda_blocks(rows), CT_CUDA_THREADS, 0, st>>>((const T *)target->data, rows, c,
                                                                        o->ignore_index, bad);
    CT_CUDA_LAUNCHED();
    xent_fused_rows<R, T><<<warp_blocks(rows), CT_CUDA_THREADS, 0, st>>>(
        (const R *)logits->data, (const T *)target->data, rows, c,
        o->weight ? (const double *)o->weight->data : nullptr, o->label_smoothing, o->ignore_index, scale,
        (R *)dlogits->data, loss, cnt, bad);
    CT_CUDA_LAUNCHED();
}

/* Copies the header back (synchronising the stream). */
header read_header(const header *dev, int device) {
    header h;
    const ct_device host{CT_DEVICE_CPU, 0}, gpu{CT_DEVICE_CUDA, device};
    ct_status s = ct_cuda_memcpy(&h, host, dev, gpu, sizeof h);
    if (s != CT_OK) ct_abort_at(__FILE__, __LINE__, "loss: cannot read the result back: %s", ct_last_error());
    return h;
}

/* Calls launch(R(), T()) with the logits' real type and the targets' integer type: the one place
 * where a cross-entropy op picks among its kernels' four instantiations. */
template <typename F> void xent_types(const ct_tensor *logits, const ct_tensor *target, F launch) {
    bool t64 = target->dtype == CT_I64;
    if (logits->dtype == CT_F32) {
        if (t64)
            launch(float(), int64_t());
        else
            launch(float(), int32_t());
    } else if (t64) {
        launch(double(), int64_t());
    } else {
        launch(double(), int32_t());
    }
}

/* The workspace of a cross-entropy that sums its rows (the forward, the fused classifier):
 * header | loss[rows] | cnt[rows] | partials, with the header's bad row set to NO_ROW. */
struct xent_sums {
    header *h;
    double *loss, *cnt, *part;
};

xent_sums xent_sums_begin(int64_t rows, cudaStream_t st) {
    size_t bytes = sizeof(header) + (2 * (size_t)rows + SUM_BLOCKS) * sizeof(double);
    xent_sums w;
    w.h = (header *)ct_cuda_workspace(bytes);
    w.loss = (double *)(w.h + 1);
    w.cnt = w.loss + rows;
    w.part = w.cnt + rows;
    CT_CUDA_CHECK(cudaMemsetAsync(&w.h->bad, 0xFF, sizeof w.h->bad, st));
    return w;
}

/* After the rows' kernel: sums their losses and counts and reads the header back. The first invalid
 * row, else -1 with *sum and *count set. */
int64_t xent_sums_end(const xent_sums &w, int64_t rows, int device, cudaStream_t st, double *sum, double *count) {
    device_sum(rows, array_value{w.loss}, w.part, &w.h->sum, st);
    device_sum(rows, array_value{w.cnt}, w.part, &w.h->count, st);
    header back = read_header(w.h, device);
    if (back.bad != NO_ROW) return (int64_t)back.bad;
    *sum = back.sum;
    *count = back.count;
    return -1;
}

/* --- elementwise losses -------------------------------------------------------------------------- */

/* The elementwise loss of element i, in double (formulas of loss_tmpl.h). */
template <typename R> struct pointwise_value {
    ct_pointwise_loss kind;
    double delta;
    const double *pw;
    int64_t npw;
    const R *x, *y;
    __device__ double operator()(int64_t i) const {
        double d = (double)x[i] - (double)y[i];
        switch (kind) {
        case CT_LOSS_MSE: return d * d;
        case CT_LOSS_L1: return fabs(d);
        case CT_LOSS_HUBER: {
            double ad = fabs(d);
            return ad <= delta ? 0.5 * d * d : delta * (ad - 0.5 * delta);
        }
        case CT_LOSS_BCE_LOGITS: {
            double v = x[i], t = y[i];
            double lw = pw ? 1.0 + (pw[i % npw] - 1.0) * t : 1.0;
            /* softplus(-v) = log(1 + exp(-v)) without overflow for either sign of v */
            double sp = fmax(-v, 0.0) + log1p(exp(-fabs(v)));
            return (1.0 - t) * v + lw * sp;
        }
        }
        return 0.0;
    }
};

template <typename R>
__global__ void pointwise_bwd(ct_pointwise_loss kind, double delta, const double *pw, int64_t npw, const R *x,
                              const R *y, int64_t n, double scale, R *dx) {
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        double d = (double)x[i] - (double)y[i], g = 0.0;
        switch (kind) {
        case CT_LOSS_MSE: g = 2.0 * scale * d; break;
        /* torch.sign: 0 at 0, NaN for NaN */
        case CT_LOSS_L1: g = scale * (d > 0 ? 1.0 : d < 0 ? -1.0 : d == 0 ? 0.0 : d); break;
        case CT_LOSS_HUBER: g = scale * (d < -delta ? -delta : d > delta ? delta : d); break;
        case CT_LOSS_BCE_LOGITS: {
            double v = x[i], t = y[i];
            double lw = pw ? 1.0 + (pw[i % npw] - 1.0) * t : 1.0;
            /* sigmoid(-v), split by sign so exp never overflows */
            double e = exp(-fabs(v));
            double sig_neg = v >= 0 ? e / (1.0 + e) : 1.0 / (1.0 + e);
            g = scale * ((1.0 - t) - lw * sig_neg);
            break;
        }
        }
        dx[i] = (R)g;
    }
}

/* out[r] = the sum of f over row r's m elements, one block per row (a fixed tree per row). */
template <typename R> __global__ void pointwise_rows(pointwise_value<R> f, int64_t rows, int64_t m, double *out) {
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        double acc = 0.0;
        for (int64_t j = threadIdx.x; j < m; j += blockDim.x) acc += f(r * m + j);
        acc = block_sum(acc);
        if (threadIdx.x == 0) out[r] = acc;
        __syncthreads(); /* the next row's block_sum reuses the shared partials */
    }
}

/* pos_weight as (device data, length): 1 or the last dimension of pred, on pred's device. */
const double *pos_weight(const ct_pointwise_opts *o, const ct_tensor *pred, int64_t *npw) {
    *npw = 1;
    if (!o || !o->pos_weight) return nullptr;
    same_device(pred, o->pos_weight);
    CT_ASSERT(o->pos_weight->dtype == CT_F64);
    *npw = ct_tensor_numel(o->pos_weight);
    CT_ASSERT(*npw == 1 || (pred->ndim >= 1 && *npw == pred->shape[pred->ndim - 1]));
    return (const double *)o->pos_weight->data;
}

template <typename R>
double pointwise_fwd_run(ct_pointwise_loss kind, double delta, const double *pw, int64_t npw, const ct_tensor *pred,
                         const ct_tensor *target, int64_t n) {
    cudaStream_t st = ct_cuda_stream_t();
    header *h = (header *)ct_cuda_workspace(sizeof(header) + SUM_BLOCKS * sizeof(double));
    double *part = (double *)(h + 1);
    pointwise_value<R> f{kind, delta, pw, npw, (const R *)pred->data, (const R *)target->data};
    device_sum(n, f, part, &h->sum, st);
    return read_header(h, pred->device.index).sum;
}

}  // namespace

extern "C" int64_t ct_cuda_op_cross_entropy_forward(const ct_tensor *logits, const ct_tensor *target,
                                                    const ct_xent_opts *o, double *sum, double *count) {
    int64_t rows, c;
    xent_dims(logits, target, o, &rows, &c);
    if (rows == 0) {
        *sum = 0.0;
        *count = 0.0;
        return -1;
    }
    cudaStream_t st = ct_cuda_stream_t();
    xent_sums w = xent_sums_begin(rows, st);
    xent_types(logits, target, [&](auto r, auto t) {
        xent_fwd_launch<decltype(r), decltype(t)>(logits, target, o, rows, c, w.loss, w.cnt, &w.h->bad, st);
    });
    return xent_sums_end(w, rows, logits->device.index, st, sum, count);
}

/* The rows' kernel alone, and header, losses and counts back in one copy (one wait for the stream). */
extern "C" int64_t ct_cuda_op_cross_entropy_rows(const ct_tensor *logits, const ct_tensor *target,
                                                 const ct_xent_opts *o, double *loss, double *count) {
    int64_t rows, c;
    xent_dims(logits, target, o, &rows, &c);
    if (rows == 0) return -1;
    cudaStream_t st = ct_cuda_stream_t();
    xent_sums w = xent_sums_begin(rows, st);
    xent_types(logits, target, [&](auto r, auto t) {
        xent_fwd_launch<decltype(r), decltype(t)>(logits, target, o, rows, c, w.loss, w.cnt, &w.h->bad, st);
    });
    size_t bytes = sizeof(header) + 2 * (size_t)rows * sizeof(double);
    header *back = (header *)std::malloc(bytes);
    if (!back) ct_abort_at(__FILE__, __LINE__, "loss: no host memory for %lld rows' losses", (long long)rows);
    const ct_device host{CT_DEVICE_CPU, 0}, gpu{CT_DEVICE_CUDA, logits->device.index};
    if (ct_cuda_memcpy(back, host, w.h, gpu, bytes) != CT_OK)
        ct_abort_at(__FILE__, __LINE__, "loss: cannot read the rows' losses back: %s", ct_last_error());
    int64_t bad = back->bad == NO_ROW ? -1 : (int64_t)back->bad;
    const double *l = (const double *)(back + 1);
    std::memcpy(loss, l, (size_t)rows * sizeof(double));
    std::memcpy(count, l + rows, (size_t)rows * sizeof(double));
    std::free(back);
    return bad;
}

/* The rows' predictions and label ranks as int32 pairs in the workspace, back in one copy (one wait
 * for the stream) of 8 bytes a row, widened on the host. */
extern "C" void ct_cuda_op_class_ranks(const ct_tensor *scores, const ct_tensor *labels, int64_t *pred,
                                       int64_t *above) {
    int64_t c = scores->shape[1], rows = scores->shape[0];
    same_device(scores, labels);
    if (rows == 0) return;
    cudaStream_t st = ct_cuda_stream_t();
    size_t bytes = 2 * (size_t)rows * sizeof(int32_t);
    int32_t *w = (int32_t *)ct_cuda_workspace(bytes);
    xent_types(scores, labels, [&](auto r, auto t) {
        using R = decltype(r);
        using T = decltype(t);
        class_ranks_rows<R, T><<<warp_blocks(rows), CT_CUDA_THREADS, 0, st>>>(
            (const R *)scores->data, (const T *)labels->data, rows, c, w, w + rows);
        CT_CUDA_LAUNCHED();
    });
    int32_t *back = (int32_t *)std::malloc(bytes);
    if (!back) ct_abort_at(__FILE__, __LINE__, "class ranks: no host memory for %lld rows", (long long)rows);
    const ct_device host{CT_DEVICE_CPU, 0}, gpu{CT_DEVICE_CUDA, scores->device.index};
    if (ct_cuda_memcpy(back, host, w, gpu, bytes) != CT_OK)
        ct_abort_at(__FILE__, __LINE__, "class ranks: cannot read them back: %s", ct_last_error());
    for (int64_t i = 0; i < rows; i++) {
        pred[i] = back[i];
        above[i] = back[rows + i];
    }
    std::free(back);
}

/* The rows' NLLs and hits in the workspace, back in one copy (one wait for the stream). */
extern "C" void ct_cuda_op_token_values(const ct_tensor *logits, const ct_tensor *labels, double *nll, double *hit) {
    int64_t c = logits->shape[logits->ndim - 1], rows = ct_tensor_numel(logits) / c;
    same_device(logits, labels);
    if (rows == 0) return;
    cudaStream_t st = ct_cuda_stream_t();
    double *w = (double *)ct_cuda_workspace(2 * (size_t)rows * sizeof(double));
    xent_types(logits, labels, [&](auto r, auto t) {
        using R = decltype(r);
        using T = decltype(t);
        token_values_rows<R, T><<<warp_blocks(rows), CT_CUDA_THREADS, 0, st>>>(
            (const R *)logits->data, (const T *)labels->data, rows, c, w, w + rows);
        CT_CUDA_LAUNCHED();
    });
    double *back = (double *)std::malloc(2 * (size_t)rows * sizeof(double));
    if (!back) ct_abort_at(__FILE__, __LINE__, "token values: no host memory for %lld rows", (long long)rows);
    const ct_device host{CT_DEVICE_CPU, 0}, gpu{CT_DEVICE_CUDA, logits->device.index};
    if (ct_cuda_memcpy(back, host, w, gpu, 2 * (size_t)rows * sizeof(double)) != CT_OK)
        ct_abort_at(__FILE__, __LINE__, "token values: cannot read them back: %s", ct_last_error());
    std::memcpy(nll, back, (size_t)rows * sizeof(double));
    std::memcpy(hit, back + rows, (size_t)rows * sizeof(double));
    std::free(back);
}

extern "C" int64_t ct_cuda_op_cross_entropy_backward(const ct_tensor *logits, const ct_tensor *target,
                                                     const ct_xent_opts *o, double scale, ct_tensor *dlogits) {
    int64_t rows, c;
    xent_dims(logits, target, o, &rows, &c);
    same_device(logits, dlogits);
    CT_ASSERT(dlogits->dtype == logits->dtype && ct_tensor_numel(dlogits) == rows * c);
    if (rows == 0) return -1;
    cudaStream_t st = ct_cuda_stream_t();
    header *h = (header *)ct_cuda_workspace(sizeof(header));
    CT_CUDA_CHECK(cudaMemsetAsync(&h->bad, 0xFF, sizeof h->bad, st));
    xent_types(logits, target, [&](auto r, auto t) {
        xent_bwd_launch<decltype(r), decltype(t)>(logits, target, o, rows, c, scale, dlogits, &h->bad, st);
    });
    header back = read_header(h, logits->device.index);
    return back.bad == NO_ROW ? -1 : (int64_t)back.bad;
}

extern "C" int64_t ct_cuda_op_fused_classifier(const ct_tensor *logits, const ct_tensor *target,
                                               const ct_xent_opts *o, double scale, double *sum, double *count,
                                               ct_tensor *dlogits) {
    int64_t rows, c;
    xent_dims(logits, target, o, &rows, &c);
    same_device(logits, dlogits);
    CT_ASSERT(dlogits->dtype == logits->dtype && ct_tensor_numel(dlogits) == rows * c);
    if (rows == 0) {
        *sum = 0.0;
        *count = 0.0;
        return -1;
    }
    cudaStream_t st = ct_cuda_stream_t();
    xent_sums w = xent_sums_begin(rows, st);
    xent_types(logits, target, [&](auto r, auto t) {
        xent_fused_launch<decltype(r), decltype(t)>(logits, target, o, rows, c, scale, dlogits, w.loss, w.cnt,
                                                    &w.h->bad, st);
    });
    return xent_sums_end(w, rows, logits->device.index, st, sum, count);
}

/* The header's sums into the step's block (core/ops/step_rule.h), or its first invalid row kept there:
 * one thread, on the stream, so the host never waits for them. `count` < 0: the header's count. */
__global__ void header_into_step_k(const header *h, double count, double *s) {
    if (h->bad != NO_ROW) {
        if (s[CT_STEP_BAD_LABEL] == 0) s[CT_STEP_BAD_LABEL] = (double)h->bad + 1;
        return;
    }
    s[CT_STEP_LOSS_SUM] += h->sum;
    s[CT_STEP_LOSS_COUNT] += count < 0 ? h->count : count;
}

extern "C" void ct_cuda_op_fused_classifier_acc(const ct_tensor *logits, const ct_tensor *target,
                                                const ct_xent_opts *o, double scale, ct_tensor *dlogits,
                                                ct_tensor *stats) {
    int64_t rows, c;
    xent_dims(logits, target, o, &rows, &c);
    same_device(logits, dlogits);
    same_device(logits, stats);
    CT_ASSERT(dlogits->dtype == logits->dtype && ct_tensor_numel(dlogits) == rows * c);
    if (rows == 0) return;
    cudaStream_t st = ct_cuda_stream_t();
    xent_sums w = xent_sums_begin(rows, st);
    xent_types(logits, target, [&](auto r, auto t) {
        xent_fused_launch<decltype(r), decltype(t)>(logits, target, o, rows, c, scale, dlogits, w.loss, w.cnt,
                                                    &w.h->bad, st);
    });
    device_sum(rows, array_value{w.loss}, w.part, &w.h->sum, st);
    device_sum(rows, array_value{w.cnt}, w.part, &w.h->count, st);
    header_into_step_k<<<1, 1, 0, st>>>(w.h, -1.0, (double *)stats->data);
    CT_CUDA_LAUNCHED();
}

extern "C" void ct_cuda_op_pointwise_loss_acc(ct_pointwise_loss kind, const ct_pointwise_opts *o,
                                              const ct_tensor *pred, const ct_tensor *target, ct_tensor *stats) {
    same_device(pred, target);
    same_device(pred, stats);
    int64_t n = ct_tensor_numel(pred), npw;
    CT_ASSERT(ct_tensor_numel(target) == n && target->dtype == pred->dtype);
    const double *pw = pos_weight(o, pred, &npw);
    double delta = o ? o->delta : 1.0;
    if (n == 0) return;
    cudaStream_t st = ct_cuda_stream_t();
    header *h = (header *)ct_cuda_workspace(sizeof(header) + SUM_BLOCKS * sizeof(double));
    double *part = (double *)(h + 1);
    CT_CUDA_CHECK(cudaMemsetAsync(&h->bad, 0xFF, sizeof h->bad, st));
    if (pred->dtype == CT_F32) {
        pointwise_value<float> f{kind, delta, pw, npw, (const float *)pred->data, (const float *)target->data};
        device_sum(n, f, part, &h->sum, st);
    } else {
        CT_ASSERT(pred->dtype == CT_F64);
        pointwise_value<double> f{kind, delta, pw, npw, (const double *)pred->data, (const double *)target->data};
        device_sum(n, f, part, &h->sum, st);
    }
    header_into_step_k<<<1, 1, 0, st>>>(h, (double)n, (double *)stats->data);
    CT_CUDA_LAUNCHED();
}

extern "C" double ct_cuda_op_pointwise_loss_forward(ct_pointwise_loss kind, const ct_pointwise_opts *o,
                                                    const ct_tensor *pred, const ct_tensor *target) {
    same_device(pred, target);
    int64_t n = ct_tensor_numel(pred), npw;
    CT_ASSERT(ct_tensor_numel(target) == n && target->dtype == pred->dtype);
    const double *pw = pos_weight(o, pred, &npw);
    double delta = o ? o->delta : 1.0;
    if (n == 0) return 0.0;
    if (pred->dtype == CT_F32) return pointwise_fwd_run<float>(kind, delta, pw, npw, pred, target, n);
    CT_ASSERT(pred->dtype == CT_F64);
    return pointwise_fwd_run<double>(kind, delta, pw, npw, pred, target, n);
}

/* The rows' sums in the workspace, back in one copy (one wait for the stream). */
extern "C" void ct_cuda_op_pointwise_loss_rows(ct_pointwise_loss kind, const ct_pointwise_opts *o,
                                               const ct_tensor *pred, const ct_tensor *target, double *loss) {
    same_device(pred, target);
    int64_t n = ct_tensor_numel(pred), npw;
    CT_ASSERT(pred->ndim >= 1 && ct_tensor_numel(target) == n && target->dtype == pred->dtype);
    int64_t rows = pred->shape[0];
    const double *pw = pos_weight(o, pred, &npw);
    double delta = o ? o->delta : 1.0;
    if (rows == 0) return;
    cudaStream_t st = ct_cuda_stream_t();
    double *w = (double *)ct_cuda_workspace((size_t)rows * sizeof(double));
    unsigned grid = (unsigned)(rows < 65535 ? rows : 65535);
    if (pred->dtype == CT_F32) {
        pointwise_value<float> f{kind, delta, pw, npw, (const float *)pred->data, (const float *)target->data};
        pointwise_rows<float><<<grid, CT_CUDA_THREADS, 0, st>>>(f, rows, n / rows, w);
    } else {
        CT_ASSERT(pred->dtype == CT_F64);
        pointwise_value<double> f{kind, delta, pw, npw, (const double *)pred->data, (const double *)target->data};
        pointwise_rows<double><<<grid, CT_CUDA_THREADS, 0, st>>>(f, rows, n / rows, w);
    }
    CT_CUDA_LAUNCHED();
    const ct_device host{CT_DEVICE_CPU, 0}, gpu{CT_DEVICE_CUDA, pred->device.index};
    if (ct_cuda_memcpy(loss, host, w, gpu, (size_t)rows * sizeof(double)) != CT_OK)
        ct_abort_at(__FILE__, __LINE__, "loss: cannot read the rows' losses back: %s", ct_last_error());
}

extern "C" void ct_cuda_op_pointwise_loss_backward(ct_pointwise_loss kind, const ct_pointwise_opts *o,
                                                   const ct_tensor *pred, const ct_tensor *target, double scale,
                                                   ct_tensor *dpred) {
    same_device(pred, target);
    same_device(pred, dpred);
    int64_t n = ct_tensor_numel(pred), npw;
    CT_ASSERT(ct_tensor_numel(target) == n && target->dtype == pred->dtype);
    CT_ASSERT(ct_tensor_numel(dpred) == n && dpred->dtype == pred->dtype);
    const double *pw = pos_weight(o, pred, &npw);
    double delta = o ? o->delta : 1.0;
    if (n == 0) return;
    cudaStream_t st = ct_cuda_stream_t();
    if (pred->dtype == CT_F32) {
        pointwise_bwd<float><<<ct_cuda_blocks(n), CT_CUDA_THREADS, 0, st>>>(
            kind, delta, pw, npw, (const float *)pred->data, (const float *)target->data, n, scale,
            (float *)dpred->data);
    } else {
        CT_ASSERT(pred->dtype == CT_F64);
        pointwise_bwd<double><<<ct_cuda_blocks(n), CT_CUDA_THREADS, 0, st>>>(
            kind, delta, pw, npw, (const double *)pred->data, (const double *)target->data, n, scale,
            (double *)dpred->data);
    }
    CT_CUDA_LAUNCHED();
}
