/* 2-D convolution on the CPU: a sample per thread at a time, im2col and single-threaded GEMMs
 * (gemm_engine.c) on its planes, col2im for the input gradient (see ops_conv.h for the layout and
 * conv_tmpl.h for the scheme). Kernels are in conv_tmpl.h, instantiated for float and double. */
#include <cblas.h>
#include <omp.h>
#include <stdbool.h>
#include <stdint.h>

#include "backends/cpu/cpu_impl.h"
#include "core/ops/ops.h"

static int64_t conv_rows(const ct_conv2d_geom *g) { return g->in_channels * g->kernel[0] * g->kernel[1]; }

/* A 1x1 window, stride 1, no padding: the input planes are the column matrix. */
static bool conv_is_pointwise(const ct_conv2d_geom *g) {
    return g->kernel[0] == 1 && g->kernel[1] == 1 && g->stride[0] == 1 && g->stride[1] == 1 &&
           g->padding[0] == 0 && g->padding[1] == 0;
}

/* A thread's slot of the workspace, in elements of the compute type, each part starting on a
 * 64-byte line: the float64 partial sums of dbias (2 * out_channels elements, enough for float64
 * in either type), the partial dweight, one sample's column matrix, with a fused ReLU one sample's
 * output (or output gradient) planes, for a "same" convolution the taps' masks, and for the sparse
 * backward of a pooled convolution the parts listed at SPARSE_BASE. */
static int64_t round_line(int64_t n) { return (n + 15) / 16 * 16; }
static int64_t conv_dw_offset(const ct_conv2d_geom *g) { return round_line(2 * g->out_channels); }
static int64_t conv_col_offset(const ct_conv2d_geom *g) {
    return conv_dw_offset(g) + round_line(g->out_channels * conv_rows(g));
}
static int64_t conv_relu_offset(const ct_conv2d_geom *g) {
    return conv_col_offset(g) + round_line(conv_is_pointwise(g) ? 0 : conv_rows(g) * g->out_h * g->out_w);
}
/* Stride 1 and output rows as wide as the input's ("same" convolutions): im2col and col2im go
 * through the taps' validity masks (conv_tmpl.h's conv_masks). */
static bool conv_lines_up(const ct_conv2d_geom *g) {
    return g->stride[0] == 1 && g->stride[1] == 1 && g->out_w == g->in_w && !conv_is_pointwise(g);
}
static int64_t conv_mask_offset(const ct_conv2d_geom *g) {
    return conv_relu_offset(g) + (g->relu ? round_line(g->out_channels * g->out_h * g->out_w) : 0);
}
/* A fused 2x2 pooling leaves at most one non-zero output gradient in four; with enough input
 * channels to fill a vector, backward then sums over those alone (conv_tmpl.h's sparse_backward)
 * instead of dense GEMMs over the whole plane. Its parts of the slot (int32 parts are no wider than
 * an element of either type), in this order: */
enum {
    SPARSE_BASE,    /* int32 [OH*OW]: where each output's window starts in the padded input */
    SPARSE_INV,     /* int32 [taps][H*W]: the output position whose tap reads it, or -1 */
    SPARSE_XT,      /* [(H + 2*PH) * (W + 2*PW)][C]: the sample's input transposed, zero-padded */
    SPARSE_DXT,     /* [H*W][C]: its gradient, transposed */
    SPARSE_WT,      /* [taps][O][C]: the weight tap-major */
    SPARSE_GRADS,   /* [O][pooled]: the gradients through the pooling and the ReLU */
    SPARSE_ENT_O,   /* int32 [O * pooled]: the non-zero ones by output position: channel */
    SPARSE_ENT_G,   /* [O * pooled]: and gradient */
    SPARSE_START,   /* int32 [OH*OW + 1]: where each output position's entries end */
    SPARSE_PARTS
};
static bool conv_sparse_backward(const ct_conv2d_geom *g) {
    return g->pool2x2 && g->in_channels % 16 == 0;
}
static int64_t conv_taps_offset(const ct_conv2d_geom *g) {
    return conv_mask_offset(g) + (conv_lines_up(g) ? round_line(g->kernel[0] * g->kernel[1] * g->out_h * g->out_w) : 0);
}
static int64_t conv_sparse_offset(const ct_conv2d_geom *g, int part) {
    int64_t at = conv_taps_offset(g);
    if (!conv_sparse_backward(g)) return at;
    const int64_t T = g->kernel[0] * g->kernel[1], HW = g->in_h * g->in_w, ohw = g->out_h * g->out_w;
    const int64_t C = g->in_channels, O = g->out_channels, P = (g->out_h / 2) * (g->out_w / 2);
    const int64_t padded = (g->in_h + 2 * g->padding[0]) * (g->in_w + 2 * g->padding[1]);
    const int64_t sizes[SPARSE_PARTS] = {ohw, T * HW, padded * C, HW * C, O * conv_rows(g), O * P, O * P, O * P, ohw + 1};
    for (int i = 0; i < part; i++) at += round_line(sizes[i]);
    return at;
}
static int64_t conv_slot_numel(const ct_conv2d_geom *g) { return conv_sparse_offset(g, SPARSE_PARTS); }

#define R float
#define FN(name) name##_f32
#define GEMM ct_cpu_sgemm
#include "backends/cpu/conv_tmpl.h"
#undef R
#undef FN
#undef GEMM
#define R double
#define FN(name) name##_f64
#define GEMM cblas_dgemm
#include "backends/cpu/conv_tmpl.h"
#undef R
#undef FN
#undef GEMM

/* A public knob, not a kernel: defined once, by the baseline copy (cpu_impl.h). */
#if CT_CPU_ISA_LEVEL <= 1
int64_t ct_conv2d_workspace_numel(const ct_conv2d_geom *g, int64_t max_batch) {
    CT_ASSERT(max_batch >= 1);
    int64_t slots = omp_get_max_threads();
    if (slots > max_batch) slots = max_batch;
    return slots * conv_slot_numel(g);
}
#endif

/* core/ops/dispatch.c checked shapes and dtypes; the workspace is this backend's own. */
static void check_ws(const ct_tensor *x, const ct_tensor *ws) { CT_ASSERT(ws->dtype == x->dtype); }

void ct_cpu_conv2d_forward(const ct_conv2d_geom *g, const ct_tensor *x, const ct_tensor *weight,
                           const ct_tensor *bias, ct_tensor *y, ct_tensor *ws) {
    check_ws(x, ws);
    if (x->shape[0] == 0) return;
    CT_REAL_DISPATCH(x, conv_forward, g, x, weight, bias, y, NULL, ws);
}

void ct_cpu_conv2d_relu_pool_forward(const ct_conv2d_geom *g, const ct_tensor *x, const ct_tensor *weight,
                                     const ct_tensor *bias, ct_tensor *y, ct_tensor *indices, ct_tensor *ws) {
    check_ws(x, ws);
    if (x->shape[0] == 0) return;
    CT_REAL_DISPATCH(x, conv_forward, g, x, weight, bias, y, indices->data, ws);
}

void ct_cpu_conv2d_backward(const ct_conv2d_geom *g, const ct_tensor *x, const ct_tensor *weight,
                            const ct_tensor *dy, ct_tensor *dweight, ct_tensor *dbias, ct_tensor *dx,
                            ct_tensor *ws) {
    check_ws(x, ws);
    if (x->shape[0] == 0) return;
    CT_REAL_DISPATCH(x, conv_backward, g, x, weight, NULL, NULL, dy, dweight, dbias, dx, ws);
}

void ct_cpu_conv2d_relu_backward(const ct_conv2d_geom *g, const ct_tensor *x, const ct_tensor *weight,
                                 const ct_tensor *y, const ct_tensor *dy, ct_tensor *dweight, ct_tensor *dbias,
                                 ct_tensor *dx, ct_tensor *ws) {
    check_ws(x, ws);
    if (x->shape[0] == 0) return;
    CT_REAL_DISPATCH(x, conv_backward, g, x, weight, y->data, NULL, dy, dweight, dbias, dx, ws);
}

void ct_cpu_conv2d_relu_pool_backward(const ct_conv2d_geom *g, const ct_tensor *x, const ct_tensor *weight,
                                      const ct_tensor *y, const ct_tensor *indices, const ct_tensor *dy,
                                      ct_tensor *dweight, ct_tensor *dbias, ct_tensor *dx, ct_tensor *ws) {
    check_ws(x, ws);
    if (x->shape[0] == 0) return;
    CT_REAL_DISPATCH(x, conv_backward, g, x, weight, y->data, indices->data, dy, dweight, dbias, dx, ws);
}
