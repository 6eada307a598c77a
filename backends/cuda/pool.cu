/* Max and average pooling on CUDA (the twin of backends/cpu/pool.c; contract in core/ops/ops_conv.h). Own kernels rather than
 * cuDNN's, so that every result is the CPU's bit for bit: max pooling picks the same element (first maximum, NaN
 * wins, an all-padding window gets index -1 and -inf) and records the same indices, and both backward passes add the
 * same terms in the same order.
 *
 * Forward runs one thread per output. Backward runs one thread per input element and gathers the gradients of the
 * outputs whose windows hold it, in increasing output order, which is the order the CPU's scatter adds them: no
 * atomics, deterministic, and equal to the CPU even where windows overlap (stride < kernel). */
#include <cmath>
#include <cstdint>

#include "backends/cuda/cuda_handles.h"
#include "backends/cuda/ops_cuda.h"

namespace {

/* The pooling geometry as plain values for the kernels. */
struct pool_dims {
    int64_t H, W, OH, OW, KH, KW, SH, SW, PH, PW, DH, DW;
    bool count_include_pad;
};

pool_dims dims_of(const ct_pool2d_geom *g) {
    return pool_dims{
        g->in_h,      g->in_w,       g->out_h,      g->out_w,       g->kernel[0],   g->kernel[1],        g->stride[0],
        g->stride[1], g->padding[0], g->padding[1], g->dilation[0], g->dilation[1], g->count_include_pad};
}

/* Kernel taps k in [*lo, *hi) of [0, kernel) land on the input position start + k*dilation inside [0, n)
 * (backends/cpu/pool.c's pool_span). */
__device__ inline void pool_span(int64_t start, int64_t dilation, int64_t n, int64_t kernel, int64_t *lo, int64_t *hi) {
    int64_t l = start >= 0 ? 0 : (-start + dilation - 1) / dilation;
    int64_t h = n - start <= 0 ? 0 : (n - start + dilation - 1) / dilation;
    if (l > kernel) l = kernel;
    if (h > kernel) h = kernel;
    if (h < l) h = l;
    *lo = l;
    *hi = h;
}

/* PyTorch's average-pooling window along one dimension (backends/cpu/pool.c's avg_window): [*lo, *hi) clipped to the
 * input, and *pool, its length clipped to the padded input. */
__device__ inline void avg_window(int64_t o, int64_t stride, int64_t padding, int64_t kernel, int64_t n, int64_t *lo,
                                  int64_t *hi, int64_t *pool) {
    int64_t start = o * stride - padding;
    int64_t end = start + kernel < n + padding ? start + kernel : n + padding;
    *pool = end - start;
    *lo = start > 0 ? start : 0;
    *hi = end < n ? end : n;
}

#define GRID_STRIDE(i, n)                                                                                              \
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)

/* One output each: the window's taps in row-major order, a strictly greater value or a NaN takes over (so the first
 * maximum wins ties and the last NaN wins), and the index starts at the window's first real element so an all -inf
 * window still routes its gradient there. */
template <typename T> __global__ void maxpool_fwd_kernel(pool_dims d, const T *x, T *y, int32_t *idx, int64_t n) {
    const int64_t ohw = d.OH * d.OW;
    GRID_STRIDE(i, n) {
        const int64_t p = i / ohw, oh = (i % ohw) / d.OW, ow = i % d.OW;
        const T *xp = x + p * d.H * d.W;
        const int64_t ih0 = oh * d.SH - d.PH, iw0 = ow * d.SW - d.PW;
        int64_t ki_lo, ki_hi, kj_lo, kj_hi;
        pool_span(ih0, d.DH, d.H, d.KH, &ki_lo, &ki_hi);
        pool_span(iw0, d.DW, d.W, d.KW, &kj_lo, &kj_hi);
        T best = (T)(-INFINITY);
        int64_t at_best = ki_lo < ki_hi && kj_lo < kj_hi ? (ih0 + ki_lo * d.DH) * d.W + iw0 + kj_lo * d.DW : -1;
        for (int64_t ki = ki_lo; ki < ki_hi; ki++)
            for (int64_t kj = kj_lo; kj < kj_hi; kj++) {
                const int64_t at = (ih0 + ki * d.DH) * d.W + iw0 + kj * d.DW;
                const T v = xp[at];
                if (v > best || v != v) {
                    best = v;
                    at_best = at;
                }
            }
        y[i] = best;
        idx[i] = (int32_t)at_best;
    }
}

/* One input element each: the outputs whose window has a tap on it are oh = (ih + PH - ki*DH) / SH for the taps ki
 * that divide evenly (likewise ow); descending ki gives ascending oh, so the terms arrive in the CPU's order. A tap
 * is distinct per output, so no output is counted twice. */
template <typename T>
__global__ void maxpool_bwd_kernel(pool_dims d, const T *dy, const int32_t *idx, T *dx, int64_t n) {
    const int64_t hw = d.H * d.W, ohw = d.OH * d.OW;
    GRID_STRIDE(i, n) {
        const int64_t p = i / hw, ih = (i % hw) / d.W, iw = i % d.W;
        const int32_t pos = (int32_t)(ih * d.W + iw);
        const T *dyp = dy + p * ohw;
        const int32_t *ip = idx + p * ohw;
        T acc = 0;
        for (int64_t ki = d.KH - 1; ki >= 0; ki--) {
            const int64_t t = ih + d.PH - ki * d.DH;
            if (t < 0 || t % d.SH != 0 || t / d.SH >= d.OH) continue;
            const int64_t oh = t / d.SH;
            for (int64_t kj = d.KW - 1; kj >= 0; kj--) {
                const int64_t u = iw + d.PW - kj * d.DW;
                if (u < 0 || u % d.SW != 0 || u / d.SW >= d.OW) continue;
                const int64_t o = oh * d.OW + u / d.SW;
                if (ip[o] == pos) acc += dyp[o];
            }
        }
        dx[i] = acc;
    }
}

/* One output each: the real elements of the window summed in double, row by row as on the CPU. */
template <typename T> __global__ void avgpool_fwd_kernel(pool_dims d, const T *x, T *y, int64_t n) {
    const int64_t ohw = d.OH * d.OW;
    GRID_STRIDE(i, n) {
        const int64_t p = i / ohw, oh = (i % ohw) / d.OW, ow = i % d.OW;
        const T *xp = x + p * d.H * d.W;
        int64_t h0, h1, hpool, w0, w1, wpool;
        avg_window(oh, d.SH, d.PH, d.KH, d.H, &h0, &h1, &hpool);
        avg_window(ow, d.SW, d.PW, d.KW, d.W, &w0, &w1, &wpool);
        if (h0 >= h1 || w0 >= w1) { /* PyTorch writes 0 for a window with no real element */
            y[i] = 0;
            continue;
        }
        double sum = 0.0;
        for (int64_t ih = h0; ih < h1; ih++)
            for (int64_t iw = w0; iw < w1; iw++) sum += (double)xp[ih * d.W + iw];
        const int64_t div = d.count_include_pad ? hpool * wpool : (h1 - h0) * (w1 - w0);
        y[i] = (T)(sum / (double)div);
    }
}

/* One input element each: the outputs whose window holds ih satisfy oh*SH - PH <= ih < oh*SH - PH + KH, i.e.
 * ceil((ih + PH - KH + 1) / SH) <= oh <= (ih + PH) / SH; the window is re-derived for each candidate (it is also
 * clipped to the padded input) and the share dy / divisor is rounded to T before it is added, as the CPU's scatter
 * does. */
template <typename T> __global__ void avgpool_bwd_kernel(pool_dims d, const T *dy, T *dx, int64_t n) {
    const int64_t hw = d.H * d.W, ohw = d.OH * d.OW;
    GRID_STRIDE(i, n) {
        const int64_t p = i / hw, ih = (i % hw) / d.W, iw = i % d.W;
        const T *dyp = dy + p * ohw;
        const int64_t hnum = ih + d.PH - d.KH + 1, wnum = iw + d.PW - d.KW + 1;
        const int64_t oh_lo = hnum <= 0 ? 0 : (hnum + d.SH - 1) / d.SH;
        const int64_t ow_lo = wnum <= 0 ? 0 : (wnum + d.SW - 1) / d.SW;
        const int64_t oh_hi = (ih + d.PH) / d.SH < d.OH - 1 ? (ih + d.PH) / d.SH : d.OH - 1;
        const int64_t ow_hi = (iw + d.PW) / d.SW < d.OW - 1 ? (iw + d.PW) / d.SW : d.OW - 1;
        T acc = 0;
        for (int64_t oh = oh_lo; oh <= oh_hi; oh++) {
            int64_t h0, h1, hpool;
            avg_window(oh, d.SH, d.PH, d.KH, d.H, &h0, &h1, &hpool);
            if (ih < h0 || ih >= h1) continue;
            for (int64_t ow = ow_lo; ow <= ow_hi; ow++) {
                int64_t w0, w1, wpool;
                avg_window(ow, d.SW, d.PW, d.KW, d.W, &w0, &w1, &wpool);
                if (iw < w0 || iw >= w1) continue;
                const int64_t div = d.count_include_pad ? hpool * wpool : (h1 - h0) * (w1 - w0);
                acc += (T)((double)dyp[oh * d.OW + ow] / (double)div);
            }
        }
        dx[i] = acc;
    }
}

bool on_this_gpu(const ct_tensor *t) {
    return t->device.kind == CT_DEVICE_CUDA && t->device.index == ct_cuda_current_device();
}

/* The shapes every pooling op relies on (core/ops/dispatch.c's check_pool, again); returns the planes. */
int64_t check_pool(const ct_pool2d_geom *g, const ct_tensor *in, const ct_tensor *out) {
    CT_ASSERT(on_this_gpu(in) && on_this_gpu(out));
    CT_ASSERT(in->ndim == 4 && in->shape[1] == g->channels && in->shape[2] == g->in_h && in->shape[3] == g->in_w);
    CT_ASSERT(out->ndim == 4 && out->shape[0] == in->shape[0] && out->shape[1] == g->channels &&
              out->shape[2] == g->out_h && out->shape[3] == g->out_w);
    CT_ASSERT(in->dtype == out->dtype);
    CT_ASSERT(g->stride[0] >= 1 && g->stride[1] >= 1 && g->dilation[0] >= 1 && g->dilation[1] >= 1);
    return in->shape[0] * g->channels;
}

void check_indices(const ct_pool2d_geom *g, const ct_tensor *indices, const ct_tensor *out) {
    CT_ASSERT(on_this_gpu(indices));
    CT_ASSERT(indices->dtype == CT_I32 && ct_tensor_numel(indices) == ct_tensor_numel(out));
    CT_ASSERT(g->in_h * g->in_w <= INT32_MAX);
}

/* Host launchers, one per kernel: n threads' worth of blocks on the current stream. */
template <typename T>
void maxpool_fwd(const pool_dims &d, const ct_tensor *x, ct_tensor *y, ct_tensor *idx, int64_t n) {
    maxpool_fwd_kernel<T><<<ct_cuda_blocks(n), CT_CUDA_THREADS, 0, ct_cuda_stream_t()>>>(
        d, (const T *)x->data, (T *)y->data, (int32_t *)idx->data, n);
    CT_CUDA_LAUNCHED();
}

template <typename T>
void maxpool_bwd(const pool_dims &d, const ct_tensor *dy, const ct_tensor *idx, ct_tensor *dx, int64_t n) {
    maxpool_bwd_kernel<T><<<ct_cuda_blocks(n), CT_CUDA_THREADS, 0, ct_cuda_stream_t()>>>(
        d, (const T *)dy->data, (const int32_t *)idx->data, (T *)dx->data, n);
    CT_CUDA_LAUNCHED();
}

template <typename T> void avgpool_fwd(const pool_dims &d, const ct_tensor *x, ct_tensor *y, int64_t n) {
    avgpool_fwd_kernel<T>
        <<<ct_cuda_blocks(n), CT_CUDA_THREADS, 0, ct_cuda_stream_t()>>>(d, (const T *)x->data, (T *)y->data, n);
    CT_CUDA_LAUNCHED();
}

template <typename T> void avgpool_bwd(const pool_dims &d, const ct_tensor *dy, ct_tensor *dx, int64_t n) {
    avgpool_bwd_kernel<T>
        <<<ct_cuda_blocks(n), CT_CUDA_THREADS, 0, ct_cuda_stream_t()>>>(d, (const T *)dy->data, (T *)dx->data, n);
    CT_CUDA_LAUNCHED();
}

}  // namespace

extern "C" void ct_cuda_op_maxpool2d_forward(const ct_pool2d_geom *g, const ct_tensor *x, ct_tensor *y,
                                             ct_tensor *indices) {
    const int64_t planes = check_pool(g, x, y);
    check_indices(g, indices, y);
    const int64_t n = planes * g->out_h * g->out_w;
    if (n > 0) CT_CUDA_REAL_DISPATCH(x, maxpool_fwd, dims_of(g), x, y, indices, n);
}

extern "C" void ct_cuda_op_maxpool2d_backward(const ct_pool2d_geom *g, const ct_tensor *dy, const ct_tensor *indices,
                                              ct_tensor *dx) {
    const int64_t planes = check_pool(g, dx, dy);
    check_indices(g, indices, dy);
    const int64_t n = planes * g->in_h * g->in_w;
    if (n > 0) CT_CUDA_REAL_DISPATCH(dx, maxpool_bwd, dims_of(g), dy, indices, dx, n);
}

extern "C" void ct_cuda_op_avgpool2d_forward(const ct_pool2d_geom *g, const ct_tensor *x, ct_tensor *y) {
    const int64_t planes = check_pool(g, x, y);
    const int64_t n = planes * g->out_h * g->out_w;
    if (n > 0) CT_CUDA_REAL_DISPATCH(x, avgpool_fwd, dims_of(g), x, y, n);
}

extern "C" void ct_cuda_op_avgpool2d_backward(const ct_pool2d_geom *g, const ct_tensor *dy, ct_tensor *dx) {
    const int64_t planes = check_pool(g, dx, dy);
    const int64_t n = planes * g->in_h * g->in_w;
    if (n > 0) CT_CUDA_REAL_DISPATCH(dx, avgpool_bwd, dims_of(g), dy, dx, n);
}
