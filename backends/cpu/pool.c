/* Max and average pooling on the CPU (nn.MaxPool2d / nn.AvgPool2d semantics, ceil_mode=False);
 * kernels in pool_tmpl.h, instantiated for float and double; with AVX-512, float's 2x2 max-pooling
 * rows go through pool_2x2_avx512.h. */
#include <stdint.h>

#include "backends/cpu/cpu_impl.h"
#include "core/ops/ops.h"

/* Kernel taps k in [*lo, *hi) of [0, kernel) land on the input position start + k*dilation inside
 * [0, n). Always 0 <= *lo <= *hi <= kernel. */
static inline void pool_span(int64_t start, int64_t dilation, int64_t n, int64_t kernel, int64_t *lo, int64_t *hi) {
    int64_t l, h;
    if (dilation == 1) { /* the common case, without the divisions that would dominate a 2x2 window */
        l = start >= 0 ? 0 : -start;
        h = n - start <= 0 ? 0 : n - start;
    } else {
        l = start >= 0 ? 0 : (-start + dilation - 1) / dilation;
        h = n - start <= 0 ? 0 : (n - start + dilation - 1) / dilation;
    }
    if (l > kernel) l = kernel;
    if (h > kernel) h = kernel;
    if (h < l) h = l;
    *lo = l;
    *hi = h;
}

/* Kernel widths up to this keep their per-column output spans in a table (see maxpool_fwd). */
#define POOL_SPAN_CACHE 32


/* PyTorch's average-pooling window along one dimension: [*lo, *hi) clipped to the input, and *pool,
 * its length clipped to the padded input (the count_include_pad divisor). */
static inline void avg_window(int64_t o, int64_t stride, int64_t padding, int64_t kernel, int64_t n, int64_t *lo,
                              int64_t *hi, int64_t *pool) {
    int64_t start = o * stride - padding;
    int64_t end = start + kernel < n + padding ? start + kernel : n + padding;
    *pool = end - start;
    *lo = start > 0 ? start : 0;
    *hi = end < n ? end : n;
}

#if defined(__AVX512F__)
#include "backends/cpu/pool_2x2_avx512.h"
#define MAXPOOL_ROW_2X2 maxpool_row_2x2_f32_avx512
#endif
#define R float
#define FN(name) name##_f32
#include "backends/cpu/pool_tmpl.h"
#undef R
#undef FN
#undef MAXPOOL_ROW_2X2
#define R double
#define FN(name) name##_f64
#include "backends/cpu/pool_tmpl.h"
#undef R
#undef FN

/* The shapes every pooling op relies on; a mismatch is a bug in the calling layer. */
static int64_t check_pool(const ct_pool2d_geom *g, const ct_tensor *in, const ct_tensor *out) {
    CT_CHECK_CPU(in);
    CT_ASSERT(in->ndim == 4 && in->shape[1] == g->channels && in->shape[2] == g->in_h && in->shape[3] == g->in_w);
    CT_ASSERT(out->ndim == 4 && out->shape[0] == in->shape[0] && out->shape[1] == g->channels &&
              out->shape[2] == g->out_h && out->shape[3] == g->out_w);
    CT_ASSERT(in->dtype == out->dtype);
    CT_ASSERT(g->stride[0] >= 1 && g->stride[1] >= 1 && g->dilation[0] >= 1 && g->dilation[1] >= 1);
    return in->shape[0] * g->channels;
}

/* Indices are positions within one input plane, in int32 (the layer rejects larger planes). */
static void check_indices(const ct_pool2d_geom *g, const ct_tensor *indices, const ct_tensor *out) {
    CT_ASSERT(indices->dtype == CT_I32 && ct_tensor_numel(indices) == ct_tensor_numel(out));
    CT_ASSERT(g->in_h * g->in_w <= INT32_MAX);
}

void ct_op_maxpool2d_forward(const ct_pool2d_geom *g, const ct_tensor *x, ct_tensor *y, ct_tensor *indices) {
    CT_ON_CUDA(x, ct_cuda_op_maxpool2d_forward(g, x, y, indices));
    int64_t planes = check_pool(g, x, y);
    check_indices(g, indices, y);
    CT_REAL_DISPATCH(x, maxpool_fwd, g, x->data, y->data, indices->data, planes);
}

void ct_op_maxpool2d_backward(const ct_pool2d_geom *g, const ct_tensor *dy, const ct_tensor *indices, ct_tensor *dx) {
    CT_ON_CUDA(dy, ct_cuda_op_maxpool2d_backward(g, dy, indices, dx));
    int64_t planes = check_pool(g, dx, dy);
    check_indices(g, indices, dy);
    CT_REAL_DISPATCH(dx, maxpool_bwd, g, dy->data, indices->data, dx->data, planes);
}

void ct_op_avgpool2d_forward(const ct_pool2d_geom *g, const ct_tensor *x, ct_tensor *y) {
    CT_ON_CUDA(x, ct_cuda_op_avgpool2d_forward(g, x, y));
    int64_t planes = check_pool(g, x, y);
    CT_REAL_DISPATCH(x, avgpool_fwd, g, x->data, y->data, planes);
}

void ct_op_avgpool2d_backward(const ct_pool2d_geom *g, const ct_tensor *dy, ct_tensor *dx) {
    CT_ON_CUDA(dy, ct_cuda_op_avgpool2d_backward(g, dy, dx));
    int64_t planes = check_pool(g, dx, dy);
    CT_REAL_DISPATCH(dx, avgpool_bwd, g, dy->data, dx->data, planes);
}
