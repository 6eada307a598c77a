/* Batch norm and layer norm on CUDA (the twin of backends/cpu/norm.c; contract in core/ops/ops_norm.h). Own kernels that do
 * the CPU's arithmetic: every statistic and every gradient sum is accumulated in double whatever the dtype, with the
 * same two-pass mean and variance, the same formulas and the same roundings to the tensor's type, so results agree
 * with the CPU to the last bit or so.
 *
 * Sums are deterministic: each thread keeps a strided partial sum and the partials meet in a fixed tree
 * (ct_block_sum); the layer-norm parameter gradients, which sum over rows, go through fixed chunks of rows and then a
 * fixed sum of the chunks. No atomics anywhere.
 *
 * Batch norm runs one block per channel (x as [n, c, inner]), layer norm one block per row. */
#include <cmath>
#include <cstdint>

#include "backends/cuda/block_sum.cuh"
#include "backends/cuda/cuda_handles.h"
#include "backends/cuda/ops_cuda.h"

namespace {

#define BN_THREADS 256
#define LN_THREADS 128
/* Layer-norm parameter gradients: columns per block, and at most this many chunks of rows. */
#define LN_COL_THREADS 128
#define LN_MAX_CHUNKS 256

/* Grid sizes for loops over channels or rows (the kernels stride over the rest). */
unsigned grid_for(int64_t n) { return (unsigned)(n < 65535 * 8 ? (n < 1 ? 1 : n) : 65535 * 8); }

/* Element s of sample i of channel ch in x viewed as [n, c, inner]. */
__device__ inline int64_t bn_at(int64_t k, int64_t ch, int64_t c, int64_t inner) {
    const int64_t i = k / inner, s = k - i * inner;
    return (i * c + ch) * inner + s;
}

template <typename T>
__global__ void bn_fwd_kernel(const T *x, const T *w, const T *b, T *rm, T *rv, bool training, double momentum,
                              double eps, T *y, double *smean, double *srstd, int64_t n, int64_t c, int64_t inner) {
    __shared__ double shm[BN_THREADS];
    const int64_t count = n * inner;
    for (int64_t ch = blockIdx.x; ch < c; ch += gridDim.x) {
        double mean, rstd;
        if (training) {
            /* Two passes (mean, then squared deviations): no cancellation when |mean| >> std. */
            double part = 0.0;
            for (int64_t k = threadIdx.x; k < count; k += BN_THREADS) part += (double)x[bn_at(k, ch, c, inner)];
            mean = ct_block_sum<BN_THREADS>(part, shm) / (double)count;
            part = 0.0;
            for (int64_t k = threadIdx.x; k < count; k += BN_THREADS) {
                const double dev = (double)x[bn_at(k, ch, c, inner)] - mean;
                part += dev * dev;
            }
            const double sq = ct_block_sum<BN_THREADS>(part, shm);
            rstd = 1.0 / sqrt(sq / (double)count + eps);
            /* PyTorch updates running_var with the unbiased estimate (count > 1 is the caller's check). Only thread 0
             * touches the running statistics in training, and no thread reads them. */
            if (threadIdx.x == 0) {
                rm[ch] = (T)((1.0 - momentum) * (double)rm[ch] + momentum * mean);
                rv[ch] = (T)((1.0 - momentum) * (double)rv[ch] + momentum * sq / ((double)count - 1.0));
            }
        } else {
            mean = (double)rm[ch];
            rstd = 1.0 / sqrt((double)rv[ch] + eps);
        }
        if (threadIdx.x == 0) {
            smean[ch] = mean;
            srstd[ch] = rstd;
        }
        const double scale = w ? (double)w[ch] * rstd : rstd;
        const double shift = b ? (double)b[ch] : 0.0;
        for (int64_t k = threadIdx.x; k < count; k += BN_THREADS) {
            const int64_t at = bn_at(k, ch, c, inner);
            y[at] = (T)(((double)x[at] - mean) * scale + shift);
        }
    }
}

template <typename T>
__global__ void bn_bwd_kernel(const T *x, const T *dy, const T *w, const double *smean, const double *srstd,
                              bool training, T *dx, T *dw, T *db, int64_t n, int64_t c, int64_t inner) {
    __shared__ double shm[BN_THREADS];
    const int64_t count = n * inner;
    /* The same for the whole block, so every thread takes the block sums or none does. */
    const bool need_sums = training || dw || db;
    for (int64_t ch = blockIdx.x; ch < c; ch += gridDim.x) {
        const double mean = smean[ch], rstd = srstd[ch];
        double sum_dy = 0.0, sum_dy_xhat = 0.0;
        if (need_sums) {
            double p_dy = 0.0, p_dy_xhat = 0.0;
            for (int64_t k = threadIdx.x; k < count; k += BN_THREADS) {
                const int64_t at = bn_at(k, ch, c, inner);
                const double g = (double)dy[at];
                p_dy += g;
                p_dy_xhat += g * (((double)x[at] - mean) * rstd);
            }
            sum_dy = ct_block_sum<BN_THREADS>(p_dy, shm);
            sum_dy_xhat = ct_block_sum<BN_THREADS>(p_dy_xhat, shm);
        }
        if (threadIdx.x == 0) {
            if (dw) dw[ch] += (T)sum_dy_xhat;
            if (db) db[ch] += (T)sum_dy;
        }
        if (!dx) continue;
        const double k = (w ? (double)w[ch] : 1.0) * rstd;
        /* Training: the batch mean and variance depend on every x, hence the two mean terms. */
        const double a = training ? sum_dy / (double)count : 0.0;
        const double bcoef = training ? sum_dy_xhat / (double)count : 0.0;
        for (int64_t e = threadIdx.x; e < count; e += BN_THREADS) {
            const int64_t at = bn_at(e, ch, c, inner);
            dx[at] = (T)(k * ((double)dy[at] - a - ((double)x[at] - mean) * rstd * bcoef));
        }
    }
}

/* With res (and sum), the row normalised is x + res: each thread writes its elements of the sum and
 * reads back only those, so the row needs no barrier before the statistics. */
template <typename T>
__global__ void ln_fwd_kernel(const T *x, const T *res, const T *w, const T *b, double eps, T *sum, T *y,
                              double *smean, double *srstd, int64_t rows, int64_t f) {
    __shared__ double shm[LN_THREADS];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const T *p = x + r * f;
        T *q = y + r * f;
        if (res) {
            T *s = sum + r * f;
            const T *e = res + r * f;
            for (int64_t j = threadIdx.x; j < f; j += LN_THREADS) s[j] = p[j] + e[j];
            p = s;
        }
        double part = 0.0;
        for (int64_t j = threadIdx.x; j < f; j += LN_THREADS) part += (double)p[j];
        const double mean = ct_block_sum<LN_THREADS>(part, shm) / (double)f;
        part = 0.0;
        for (int64_t j = threadIdx.x; j < f; j += LN_THREADS) {
            const double dev = (double)p[j] - mean;
            part += dev * dev;
        }
        const double rstd = 1.0 / sqrt(ct_block_sum<LN_THREADS>(part, shm) / (double)f + eps);
        if (threadIdx.x == 0) {
            smean[r] = mean;
            srstd[r] = rstd;
        }
        for (int64_t j = threadIdx.x; j < f; j += LN_THREADS) {
            double v = ((double)p[j] - mean) * rstd;
            if (w) v *= (double)w[j];
            if (b) v += (double)b[j];
            q[j] = (T)v;
        }
    }
}

/* With dres, each element of dx is dres's plus the norm's (rounded first, as a separate add takes it). */
template <typename T>
__global__ void ln_bwd_dx_kernel(const T *x, const T *dy, const T *w, const double *smean, const double *srstd,
                                 const T *dres, T *dx, int64_t rows, int64_t f) {
    __shared__ double shm[LN_THREADS];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const T *p = x + r * f;
        const T *g = dy + r * f;
        T *q = dx + r * f;
        const double mean = smean[r], rstd = srstd[r];
        double p_g = 0.0, p_g_xhat = 0.0;
        for (int64_t j = threadIdx.x; j < f; j += LN_THREADS) {
            const double gj = w ? (double)g[j] * (double)w[j] : (double)g[j];
            p_g += gj;
            p_g_xhat += gj * (((double)p[j] - mean) * rstd);
        }
        const double a = ct_block_sum<LN_THREADS>(p_g, shm) / (double)f;
        const double bcoef = ct_block_sum<LN_THREADS>(p_g_xhat, shm) / (double)f;
        for (int64_t j = threadIdx.x; j < f; j += LN_THREADS) {
            const double gj = w ? (double)g[j] * (double)w[j] : (double)g[j];
            const T v = (T)(rstd * (gj - a - ((double)p[j] - mean) * rstd * bcoef));
            q[j] = dres ? dres[r * f + j] + v : v;
        }
    }
}

/* Parameter gradients, pass 1: chunk blockIdx.y of the rows, one thread per column, summed in row order into pw /
 * pb[chunk * f + j] (the layout the second pass reads). */
template <typename T>
__global__ void ln_bwd_param_partial_kernel(const T *x, const T *dy, const double *smean, const double *srstd,
                                            double *pw, double *pb, int64_t rows, int64_t f, int64_t chunk_rows) {
    const int64_t chunk = blockIdx.y;
    const int64_t r0 = chunk * chunk_rows, r1 = r0 + chunk_rows < rows ? r0 + chunk_rows : rows;
    for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < f; j += (int64_t)gridDim.x * blockDim.x) {
        double accw = 0.0, accb = 0.0;
        for (int64_t r = r0; r < r1; r++) {
            const double g = (double)dy[r * f + j];
            accw += g * (((double)x[r * f + j] - smean[r]) * srstd[r]);
            accb += g;
        }
        pw[chunk * f + j] = accw;
        pb[chunk * f + j] = accb;
    }
}

/* Pass 2: the chunks' sums in chunk order, added into the gradients. */
template <typename T>
__global__ void ln_bwd_param_final_kernel(const double *pw, const double *pb, T *dw, T *db, int64_t f, int64_t chunks) {
    for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < f; j += (int64_t)gridDim.x * blockDim.x) {
        double accw = 0.0, accb = 0.0;
        for (int64_t k = 0; k < chunks; k++) {
            accw += pw[k * f + j];
            accb += pb[k * f + j];
        }
        if (dw) dw[j] += (T)accw;
        if (db) db[j] += (T)accb;
    }
}

/* Host launchers, instantiated for float and double. */
template <typename T>
void bn_fwd(const ct_tensor *x, const ct_tensor *w, const ct_tensor *b, ct_tensor *rm, ct_tensor *rv, bool training,
            double momentum, double eps, ct_tensor *y, ct_tensor *smean, ct_tensor *srstd, int64_t n, int64_t c,
            int64_t inner) {
    bn_fwd_kernel<T><<<grid_for(c), BN_THREADS, 0, ct_cuda_stream_t()>>>(
        (const T *)x->data, w ? (const T *)w->data : nullptr, b ? (const T *)b->data : nullptr, (T *)rm->data,
        (T *)rv->data, training, momentum, eps, (T *)y->data, (double *)smean->data, (double *)srstd->data, n, c,
        inner);
    CT_CUDA_LAUNCHED();
}

template <typename T>
void bn_bwd(const ct_tensor *x, const ct_tensor *dy, const ct_tensor *w, const ct_tensor *smean, const ct_tensor *srstd,
            bool training, ct_tensor *dx, ct_tensor *dw, ct_tensor *db, int64_t n, int64_t c, int64_t inner) {
    bn_bwd_kernel<T><<<grid_for(c), BN_THREADS, 0, ct_cuda_stream_t()>>>(
        (const T *)x->data, (const T *)dy->data, w ? (const T *)w->data : nullptr, (const double *)smean->data,
        (const double *)srstd->data, training, dx ? (T *)dx->data : nullptr, dw ? (T *)dw->data : nullptr,
        db ? (T *)db->data : nullptr, n, c, inner);
    CT_CUDA_LAUNCHED();
}

template <typename T>
void ln_fwd(const ct_tensor *x, const ct_tensor *res, const ct_tensor *w, const ct_tensor *b, double eps,
            ct_tensor *sum, ct_tensor *y, ct_tensor *smean, ct_tensor *srstd, int64_t rows, int64_t f) {
    ln_fwd_kernel<T><<<grid_for(rows), LN_THREADS, 0, ct_cuda_stream_t()>>>(
        (const T *)x->data, res ? (const T *)res->data : nullptr, w ? (const T *)w->data : nullptr,
        b ? (const T *)b->data : nullptr, eps, sum ? (T *)sum->data : nullptr, (T *)y->data, (double *)smean->data,
        (double *)srstd->data, rows, f);
    CT_CUDA_LAUNCHED();
}

template <typename T>
void ln_bwd(const ct_tensor *x, const ct_tensor *dy, const ct_tensor *w, const ct_tensor *smean, const ct_tensor *srstd,
            const ct_tensor *dres, ct_tensor *dx, ct_tensor *dw, ct_tensor *db, int64_t rows, int64_t f) {
    cudaStream_t stream = ct_cuda_stream_t();
    if (dx) {
        ln_bwd_dx_kernel<T><<<grid_for(rows), LN_THREADS, 0, stream>>>(
            (const T *)x->data, (const T *)dy->data, w ? (const T *)w->data : nullptr, (const double *)smean->data,
            (const double *)srstd->data, dres ? (const T *)dres->data : nullptr, (T *)dx->data, rows, f);
        CT_CUDA_LAUNCHED();
    }
    if (!dw && !db) return;
    /* Fixed chunks of rows (a function of rows alone), so the order of the sums never varies. */
    int64_t chunks = (rows + 63) / 64;
    if (chunks > LN_MAX_CHUNKS) chunks = LN_MAX_CHUNKS;
    if (chunks < 1) chunks = 1;
    const int64_t chunk_rows = (rows + chunks - 1) / chunks;
    double *pw = (double *)ct_cuda_workspace((size_t)(2 * chunks * f) * sizeof(double));
    double *pb = pw + chunks * f;
    const unsigned col_blocks = grid_for((f + LN_COL_THREADS - 1) / LN_COL_THREADS);
    ln_bwd_param_partial_kernel<T><<<dim3(col_blocks, (unsigned)chunks), LN_COL_THREADS, 0, stream>>>(
        (const T *)x->data, (const T *)dy->data, (const double *)smean->data, (const double *)srstd->data, pw, pb, rows,
        f, chunk_rows);
    CT_CUDA_LAUNCHED();
    ln_bwd_param_final_kernel<T><<<col_blocks, LN_COL_THREADS, 0, stream>>>(pw, pb, dw ? (T *)dw->data : nullptr,
                                                                            db ? (T *)db->data : nullptr, f, chunks);
    CT_CUDA_LAUNCHED();
}

bool on_this_gpu(const ct_tensor *t) {
    return t->device.kind == CT_DEVICE_CUDA && t->device.index == ct_cuda_current_device();
}

/* An optional tensor's consistency (backends/cpu/norm.c's opt_data). */
void check_opt(const ct_tensor *t, ct_dtype dt, int64_t n) {
    if (!t) return;
    CT_ASSERT(on_this_gpu(t) && t->dtype == dt && ct_tensor_numel(t) == n);
}

void check_stats(const ct_tensor *mean, const ct_tensor *rstd, int64_t n) {
    CT_ASSERT(on_this_gpu(mean) && on_this_gpu(rstd));
    CT_ASSERT(mean->dtype == CT_F64 && rstd->dtype == CT_F64);
    CT_ASSERT(ct_tensor_numel(mean) >= n && ct_tensor_numel(rstd) >= n);
}

}  // namespace

extern "C" void ct_cuda_op_batchnorm_forward(const ct_tensor *x, const ct_tensor *weight, const ct_tensor *bias,
                                             ct_tensor *running_mean, ct_tensor *running_var, bool training,
                                             double momentum, double eps, ct_tensor *y, ct_tensor *save_mean,
                                             ct_tensor *save_rstd) {
    CT_ASSERT(on_this_gpu(x) && on_this_gpu(y) && on_this_gpu(running_mean) && on_this_gpu(running_var));
    const int64_t c = ct_tensor_numel(running_mean), total = ct_tensor_numel(x), n = x->shape[0];
    CT_ASSERT(x->ndim >= 2 && c > 0 && n > 0 && x->shape[1] == c && total % (n * c) == 0);
    CT_ASSERT(y->dtype == x->dtype && ct_tensor_numel(y) == total && y->data != x->data);
    CT_ASSERT(running_var->dtype == x->dtype && running_mean->dtype == x->dtype && ct_tensor_numel(running_var) == c);
    check_stats(save_mean, save_rstd, c);
    CT_ASSERT(ct_tensor_numel(save_mean) == c && ct_tensor_numel(save_rstd) == c);
    check_opt(weight, x->dtype, c);
    check_opt(bias, x->dtype, c);
    const int64_t inner = total / (n * c);
    CT_ASSERT(!training || n * inner > 1);
    CT_CUDA_REAL_DISPATCH(x, bn_fwd, x, weight, bias, running_mean, running_var, training, momentum, eps, y, save_mean,
                          save_rstd, n, c, inner);
}

extern "C" void ct_cuda_op_batchnorm_backward(const ct_tensor *x, const ct_tensor *dy, const ct_tensor *weight,
                                              const ct_tensor *save_mean, const ct_tensor *save_rstd, bool training,
                                              ct_tensor *dx, ct_tensor *dweight, ct_tensor *dbias) {
    CT_ASSERT(on_this_gpu(x) && on_this_gpu(dy));
    const int64_t c = ct_tensor_numel(save_mean), total = ct_tensor_numel(x), n = x->shape[0];
    CT_ASSERT(x->ndim >= 2 && c > 0 && n > 0 && x->shape[1] == c && total % (n * c) == 0);
    CT_ASSERT(dy->dtype == x->dtype && ct_tensor_numel(dy) == total);
    CT_ASSERT(!dx || (on_this_gpu(dx) && dx->dtype == x->dtype && ct_tensor_numel(dx) == total));
    check_stats(save_mean, save_rstd, c);
    CT_ASSERT(ct_tensor_numel(save_rstd) == c);
    check_opt(weight, x->dtype, c);
    check_opt(dweight, x->dtype, c);
    check_opt(dbias, x->dtype, c);
    const int64_t inner = total / (n * c);
    CT_CUDA_REAL_DISPATCH(x, bn_bwd, x, dy, weight, save_mean, save_rstd, training, dx, dweight, dbias, n, c, inner);
}

extern "C" void ct_cuda_op_layernorm_forward(const ct_tensor *x, const ct_tensor *residual, const ct_tensor *weight,
                                             const ct_tensor *bias, double eps, ct_tensor *sum, ct_tensor *y,
                                             ct_tensor *save_mean, ct_tensor *save_rstd) {
    CT_ASSERT(on_this_gpu(x) && on_this_gpu(y));
    CT_ASSERT(x->ndim >= 1);
    const int64_t f = x->shape[x->ndim - 1], total = ct_tensor_numel(x);
    CT_ASSERT(f > 0 && y->dtype == x->dtype && ct_tensor_numel(y) == total);
    CT_ASSERT(!residual == !sum);
    CT_ASSERT(!residual || (on_this_gpu(residual) && on_this_gpu(sum) && residual->dtype == x->dtype &&
                            sum->dtype == x->dtype && ct_tensor_numel(residual) == total &&
                            ct_tensor_numel(sum) == total));
    const int64_t rows = total / f;
    check_stats(save_mean, save_rstd, rows);
    check_opt(weight, x->dtype, f);
    check_opt(bias, x->dtype, f);
    if (rows == 0) return;
    CT_CUDA_REAL_DISPATCH(x, ln_fwd, x, residual, weight, bias, eps, sum, y, save_mean, save_rstd, rows, f);
}

extern "C" void ct_cuda_op_layernorm_backward(const ct_tensor *x, const ct_tensor *dy, const ct_tensor *weight,
                                              const ct_tensor *save_mean, const ct_tensor *save_rstd,
                                              const ct_tensor *dresidual, ct_tensor *dx, ct_tensor *dweight,
                                              ct_tensor *dbias) {
    CT_ASSERT(on_this_gpu(x) && on_this_gpu(dy));
    CT_ASSERT(x->ndim >= 1);
    const int64_t f = x->shape[x->ndim - 1], total = ct_tensor_numel(x);
    CT_ASSERT(f > 0 && dy->dtype == x->dtype && ct_tensor_numel(dy) == total);
    CT_ASSERT(!dx || (on_this_gpu(dx) && dx->dtype == x->dtype && ct_tensor_numel(dx) == total));
    const int64_t rows = total / f;
    check_stats(save_mean, save_rstd, rows);
    check_opt(weight, x->dtype, f);
    check_opt(dweight, x->dtype, f);
    check_opt(dbias, x->dtype, f);
    if (rows == 0) return;
    CT_ASSERT(!dresidual || (dx && on_this_gpu(dresidual) && dresidual->dtype == x->dtype &&
                             ct_tensor_numel(dresidual) == total));
    CT_CUDA_REAL_DISPATCH(x, ln_bwd, x, dy, weight, save_mean, save_rstd, dresidual, dx, dweight, dbias, rows, f);
}
