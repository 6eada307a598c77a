/* Ops: 2-D convolution and pooling over NCHW tensors (declarations; CPU kernels in backends/cpu/conv.c
 * and backends/cpu/pool.c). Included by core/ops/ops.h.
 *
 * Convolution is im2col + GEMM, a sample at a time: the batch is split over the threads (a batch
 * smaller than the team goes a sample at a time through GEMMs that use every thread), and each
 * sample's column matrix [C*kh*kw, OH*OW] stays in its thread's cache between im2col and the
 * single-threaded GEMMs that read it, which write and read the NCHW planes as they are. The
 * workspace holds a slot per thread (see ct_conv2d_workspace_numel); dweight and dbias are summed per
 * slot and added up in slot order, so with a given number of threads the result is the same run
 * after run. Backward recomputes the columns instead of keeping them from forward, so backward may
 * be repeated and the workspace stays small.
 *
 * Like every op, these trust their callers: the layers (model/conv2d.c, model/pool2d.c) validate
 * shapes and hyperparameters and give users the error messages. */
#ifndef CT_OPS_CONV_H
#define CT_OPS_CONV_H

#include <stdbool.h>
#include <stdint.h>

#include "core/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* PyTorch's output length along one dimension (ceil_mode=False):
 * floor((in + 2*padding - dilation*(kernel-1) - 1) / stride) + 1; may be <= 0 for inputs that are
 * too small, which callers must reject. */
int64_t ct_conv_out_size(int64_t in, int64_t kernel, int64_t stride, int64_t padding, int64_t dilation);

/* --- convolution (nn.Conv2d, groups=1, zero padding) ------------------------------------------- */

/* Per-sample geometry; index [0] is height, [1] width. out_h/out_w from ct_conv_out_size. */
typedef struct ct_conv2d_geom {
    int64_t in_channels, in_h, in_w;
    int64_t out_channels, out_h, out_w;
    int64_t kernel[2], stride[2], padding[2], dilation[2];
    /* CPU only: forward applies ReLU to its output (max(y, 0), NaN to 0 as ct_op_activation_forward)
     * while it is in cache, and backward is ct_op_conv2d_relu_backward. */
    bool relu;
    /* CPU only, with relu: forward then max-pools each output plane with 2x2 windows, stride 2
     * (nn.MaxPool2d(2)) while it is in cache, so the un-pooled output never goes to memory: the ops
     * are ct_op_conv2d_relu_pool_forward and _backward. */
    bool pool2x2;
} ct_conv2d_geom;

/* Elements (of the compute dtype) of the workspace for batches of up to max_batch samples: a slot
 * per OpenMP thread (omp_get_max_threads() now, at most max_batch). A smaller workspace, down to one
 * slot, works with fewer threads. */
int64_t ct_conv2d_workspace_numel(const ct_conv2d_geom *g, int64_t max_batch);

/* y[B, out, OH, OW] = conv(x[B, in, H, W], weight[out, in, kh, kw]) + bias[out] (bias may be NULL).
 * ws: a 1-D scratch tensor of the same dtype with at least one slot's worth of elements. */
void ct_op_conv2d_forward(const ct_conv2d_geom *g, const ct_tensor *x, const ct_tensor *weight,
                          const ct_tensor *bias, ct_tensor *y, ct_tensor *ws);

/* dweight += dL/dweight, dbias += dL/dbias, dx = dL/dx (overwritten); any of the three may be NULL
 * to skip it. x is the forward's input, dy the gradient of its output. */
void ct_op_conv2d_backward(const ct_conv2d_geom *g, const ct_tensor *x, const ct_tensor *weight,
                           const ct_tensor *dy, ct_tensor *dweight, ct_tensor *dbias, ct_tensor *dx, ct_tensor *ws);
/* The same for g->relu: y is the forward's output (after the ReLU), dy the gradient of it. */
void ct_op_conv2d_relu_backward(const ct_conv2d_geom *g, const ct_tensor *x, const ct_tensor *weight,
                                const ct_tensor *y, const ct_tensor *dy, ct_tensor *dweight, ct_tensor *dbias,
                                ct_tensor *dx, ct_tensor *ws);

/* For g->relu && g->pool2x2: y[B, out, OH/2, OW/2] = maxpool2x2(relu(conv(x) + bias)), and indices
 * (CT_I32, y's shape) the argmax of each window as its position in the OH x OW plane, exactly as
 * ct_op_maxpool2d_forward gives them for the un-pooled output. */
void ct_op_conv2d_relu_pool_forward(const ct_conv2d_geom *g, const ct_tensor *x, const ct_tensor *weight,
                                    const ct_tensor *bias, ct_tensor *y, ct_tensor *indices, ct_tensor *ws);
/* Its backward: y and indices from that forward, dy the gradient of y; the rest as
 * ct_op_conv2d_backward. The result equals max-pool backward, then ReLU backward, then conv backward,
 * to float rounding (the weight gradient sums only the windows' argmaxes when in_channels is a
 * multiple of 16). */
void ct_op_conv2d_relu_pool_backward(const ct_conv2d_geom *g, const ct_tensor *x, const ct_tensor *weight,
                                     const ct_tensor *y, const ct_tensor *indices, const ct_tensor *dy,
                                     ct_tensor *dweight, ct_tensor *dbias, ct_tensor *dx, ct_tensor *ws);

/* --- pooling (nn.MaxPool2d / nn.AvgPool2d, ceil_mode=False) ------------------------------------ */

typedef struct ct_pool2d_geom {
    int64_t channels, in_h, in_w, out_h, out_w;
    int64_t kernel[2], stride[2], padding[2];
    int64_t dilation[2];    /* max pooling only (1 for average pooling) */
    bool count_include_pad; /* average pooling only */
} ct_pool2d_geom;

/* y = max over each window (padding never wins: it is -inf, as in PyTorch); indices (CT_I32, y's
 * shape) receive the flat position ih*W + iw of the first maximum in the input plane, or -1 for
 * a window that lies wholly in the padding (possible only with dilation; its output is -inf). A
 * NaN in a window wins, as in PyTorch. */
void ct_op_maxpool2d_forward(const ct_pool2d_geom *g, const ct_tensor *x, ct_tensor *y, ct_tensor *indices);
/* dx = scatter-add of dy at the recorded indices (dx overwritten). */
void ct_op_maxpool2d_backward(const ct_pool2d_geom *g, const ct_tensor *dy, const ct_tensor *indices, ct_tensor *dx);

/* y = mean over each window; the divisor is the window size clipped to the padded input
 * (count_include_pad) or the number of real input elements in it (PyTorch's rule). */
void ct_op_avgpool2d_forward(const ct_pool2d_geom *g, const ct_tensor *x, ct_tensor *y);
void ct_op_avgpool2d_backward(const ct_pool2d_geom *g, const ct_tensor *dy, ct_tensor *dx);

#ifdef __cplusplus
}
#endif

#endif
