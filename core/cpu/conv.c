/* 2-D convolution on the CPU: im2col over a chunk of samples, one OpenBLAS GEMM per pass through
 * ct_op_gemm, and col2im for the input gradient (see ops_conv.h for the layout). Kernels are in
 * conv_tmpl.h, instantiated for float and double. */
#include <stdbool.h>
#include <stdint.h>

#include "core/cpu/cpu_impl.h"
#include "core/ops.h"

/* Workspace above which a batch is split into chunks of samples (elements). Large enough that the
 * GEMMs of typical image layers cover the whole batch; small enough to stay in memory for any. */
#define CONV_WS_BUDGET ((int64_t)1 << 22)

int64_t ct_conv_out_size(int64_t in, int64_t kernel, int64_t stride, int64_t padding, int64_t dilation) {
    int64_t span = in + 2 * padding - dilation * (kernel - 1) - 1;
    if (span < 0) return 0; /* C division truncates toward zero; PyTorch's formula floors */
    return span / stride + 1;
}


/* Workspace elements per sample: its columns plus its slice of the GEMM output. */
static int64_t conv_sample_ws(const ct_conv2d_geom *g) {
    return (g->in_channels * g->kernel[0] * g->kernel[1] + g->out_channels) * g->out_h * g->out_w;
}

static ct_tensor matrix_at(const ct_tensor *like, void *data, int64_t rows, int64_t cols) {
    int64_t shape[2] = {rows, cols};
    return ct_tensor_view(data, like->dtype, like->device, 2, shape);
}

static ct_tensor matrix(const ct_tensor *t, int64_t rows, int64_t cols) {
    CT_ASSERT(ct_tensor_numel(t) == rows * cols);
    return matrix_at(t, t->data, rows, cols);
}

#define R float
#define FN(name) name##_f32
#include "core/cpu/conv_tmpl.h"
#undef R
#undef FN
#define R double
#define FN(name) name##_f64
#include "core/cpu/conv_tmpl.h"
#undef R
#undef FN

int64_t ct_conv2d_workspace_numel(const ct_conv2d_geom *g, int64_t max_batch) {
    CT_ASSERT(max_batch >= 1);
    int64_t per_sample = conv_sample_ws(g);
    int64_t chunk = CONV_WS_BUDGET / per_sample;
    if (chunk > max_batch) chunk = max_batch;
    if (chunk < 1) chunk = 1;
    return chunk * per_sample;
}

/* The shapes every conv op relies on; a mismatch is a bug in the calling layer. */
static void check_conv(const ct_conv2d_geom *g, const ct_tensor *x, const ct_tensor *weight, const ct_tensor *y,
                       const ct_tensor *ws) {
    CT_CHECK_CPU(x);
    CT_ASSERT(x->ndim == 4 && x->shape[1] == g->in_channels && x->shape[2] == g->in_h && x->shape[3] == g->in_w);
    CT_ASSERT(y->ndim == 4 && y->shape[0] == x->shape[0] && y->shape[1] == g->out_channels &&
              y->shape[2] == g->out_h && y->shape[3] == g->out_w);
    CT_ASSERT(ct_tensor_numel(weight) == g->out_channels * g->in_channels * g->kernel[0] * g->kernel[1]);
    CT_ASSERT(weight->dtype == x->dtype && y->dtype == x->dtype && ws->dtype == x->dtype);
    CT_ASSERT(g->stride[0] >= 1 && g->stride[1] >= 1 && g->dilation[0] >= 1 && g->dilation[1] >= 1);
    CT_ASSERT(g->out_h == ct_conv_out_size(g->in_h, g->kernel[0], g->stride[0], g->padding[0], g->dilation[0]) &&
              g->out_w == ct_conv_out_size(g->in_w, g->kernel[1], g->stride[1], g->padding[1], g->dilation[1]));
}

void ct_op_conv2d_forward(const ct_conv2d_geom *g, const ct_tensor *x, const ct_tensor *weight,
                          const ct_tensor *bias, ct_tensor *y, ct_tensor *ws) {
    CT_ON_CUDA(x, ct_cuda_op_conv2d_forward(g, x, weight, bias, y, ws));
    check_conv(g, x, weight, y, ws);
    CT_ASSERT(!bias || (ct_tensor_numel(bias) == g->out_channels && bias->dtype == x->dtype));
    if (x->shape[0] == 0) return;
    CT_REAL_DISPATCH(x, conv_forward, g, x, weight, bias, y, ws);
}

void ct_op_conv2d_backward(const ct_conv2d_geom *g, const ct_tensor *x, const ct_tensor *weight,
                           const ct_tensor *dy, ct_tensor *dweight, ct_tensor *dbias, ct_tensor *dx, ct_tensor *ws) {
    CT_ON_CUDA(x, ct_cuda_op_conv2d_backward(g, x, weight, dy, dweight, dbias, dx, ws));
    check_conv(g, x, weight, dy, ws);
    CT_ASSERT(!dweight || (ct_tensor_numel(dweight) == ct_tensor_numel(weight) && dweight->dtype == x->dtype));
    CT_ASSERT(!dbias || (ct_tensor_numel(dbias) == g->out_channels && dbias->dtype == x->dtype));
    CT_ASSERT(!dx || (ct_shape_eq(dx, x) && dx->dtype == x->dtype));
    if (x->shape[0] == 0) return;
    CT_REAL_DISPATCH(x, conv_backward, g, x, weight, dy, dweight, dbias, dx, ws);
}
