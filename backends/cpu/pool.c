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
#elif defined(__AVX2__)
#include "backends/cpu/pool_2x2_avx2.h"
#define MAXPOOL_ROW_2X2 maxpool_row_2x2_f32_avx2
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

/* core/ops/dispatch.c checked the shapes; a plane is one (sample, channel) of `in`. */
static int64_t planes_of(const ct_pool2d_geom *g, const ct_tensor *in) { return in->shape[0] * g->channels; }

void ct_cpu_maxpool2d_forward(const ct_pool2d_geom *g, const ct_tensor *x, ct_tensor *y, ct_tensor *indices) {
    CT_REAL_DISPATCH(x, maxpool_fwd, g, x->data, y->data, indices->data, planes_of(g, x));
}

void ct_cpu_maxpool2d_backward(const ct_pool2d_geom *g, const ct_tensor *dy, const ct_tensor *indices,
                               ct_tensor *dx) {
    CT_REAL_DISPATCH(dx, maxpool_bwd, g, dy->data, indices->data, dx->data, planes_of(g, dx));
}

void ct_cpu_avgpool2d_forward(const ct_pool2d_geom *g, const ct_tensor *x, ct_tensor *y) {
    CT_REAL_DISPATCH(x, avgpool_fwd, g, x->data, y->data, planes_of(g, x));
}

void ct_cpu_avgpool2d_backward(const ct_pool2d_geom *g, const ct_tensor *dy, ct_tensor *dx) {
    CT_REAL_DISPATCH(dx, avgpool_bwd, g, dy->data, dx->data, planes_of(g, dx));
}
