/* The CUDA backend of the op library: one function per op of core/ops*.h, same arguments, same
 * contract (accumulate into parameter gradients, overwrite input gradients, never allocate beyond
 * the library workspace, enqueue on the calling thread's current stream). They are the kernels of
 * the table ct_backend_cuda (backends/cuda/backend_cuda.c), which the public ct_op_* entry points
 * (core/ops/dispatch.c) call when their tensors live on a CUDA device, so layers, losses and
 * optimizers never see the backend; the three fused conv + ReLU ops are the CPU's and have no twin
 * here. Ops that return a value to the host (loss sums, norms, all_finite) synchronise the stream
 * for it; everything else is asynchronous. The shape checks of the dispatch are repeated here beside
 * the CUDA-only ones (one device index, cuDNN's int32 sizes): cheap, and the kernels rely on them.
 *
 * Precision: float32 throughout with float32 (or float64 where the CPU uses it: loss sums, norms)
 * accumulation; ct_cuda_set_math_mode chooses what GEMMs and convolutions may use internally. */
#ifndef CT_OPS_CUDA_H
#define CT_OPS_CUDA_H

#include "core/ops/ops.h"
#include "core/ops/ops_attn.h"
#include "core/ops/ops_conv.h"
#include "core/ops/ops_loss.h"
#include "core/ops/ops_misc.h"
#include "core/ops/ops_norm.h"
#include "core/ops/ops_optim.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The calling thread's ct_math_mode (core/device.h) for GEMMs and convolutions; default CT_MATH_F32.
 * ct_backend_cuda's set_math_mode, so the Trainer reaches it through ct_device_set_math_mode. */
void ct_cuda_set_math_mode(ct_math_mode m);
ct_math_mode ct_cuda_math_mode(void);

/* dense */
void ct_cuda_op_gemm(bool trans_a, bool trans_b, double alpha, const ct_tensor *a, const ct_tensor *b, double beta,
                     ct_tensor *c);
void ct_cuda_op_linear_forward(const ct_tensor *x, const ct_tensor *weight, const ct_tensor *bias, ct_activation act,
                               ct_tensor *pre, ct_tensor *y);
void ct_cuda_op_linear_backward(const ct_tensor *dy, const ct_tensor *x, const ct_tensor *weight, ct_tensor *dweight,
                                ct_tensor *dbias, ct_tensor *dx);
/* elementwise */
void ct_cuda_op_fill(ct_tensor *t, double value);
void ct_cuda_op_copy(ct_tensor *dst, const ct_tensor *src);
void ct_cuda_op_add(const ct_tensor *a, const ct_tensor *b, ct_tensor *out);
void ct_cuda_op_axpy(double alpha, const ct_tensor *x, ct_tensor *y);
void ct_cuda_op_scale(ct_tensor *t, double s);
bool ct_cuda_op_all_finite(const ct_tensor *t);
void ct_cuda_op_bias_add(ct_tensor *y, const ct_tensor *bias, int64_t inner);
void ct_cuda_op_bias_grad(const ct_tensor *dy, ct_tensor *dbias, int64_t inner);
void ct_cuda_op_activation_forward(ct_activation act, const ct_tensor *x, ct_tensor *y);
void ct_cuda_op_activation_backward(ct_activation act, const ct_tensor *x, const ct_tensor *y, const ct_tensor *dy,
                                    ct_tensor *dx);
/* convolution and pooling */
void ct_cuda_op_conv2d_forward(const ct_conv2d_geom *g, const ct_tensor *x, const ct_tensor *weight,
                               const ct_tensor *bias, ct_tensor *y, ct_tensor *ws);
void ct_cuda_op_conv2d_backward(const ct_conv2d_geom *g, const ct_tensor *x, const ct_tensor *weight,
                                const ct_tensor *dy, ct_tensor *dweight, ct_tensor *dbias, ct_tensor *dx,
                                ct_tensor *ws);
void ct_cuda_op_maxpool2d_forward(const ct_pool2d_geom *g, const ct_tensor *x, ct_tensor *y, ct_tensor *indices);
void ct_cuda_op_maxpool2d_backward(const ct_pool2d_geom *g, const ct_tensor *dy, const ct_tensor *indices,
                                   ct_tensor *dx);
void ct_cuda_op_avgpool2d_forward(const ct_pool2d_geom *g, const ct_tensor *x, ct_tensor *y);
void ct_cuda_op_avgpool2d_backward(const ct_pool2d_geom *g, const ct_tensor *dy, ct_tensor *dx);
/* losses */
int64_t ct_cuda_op_cross_entropy_rows(const ct_tensor *logits, const ct_tensor *target, const ct_xent_opts *o,
                                      double *loss, double *count);
void ct_cuda_op_token_values(const ct_tensor *logits, const ct_tensor *labels, double *nll, double *hit);
void ct_cuda_op_class_ranks(const ct_tensor *scores, const ct_tensor *labels, int64_t *pred, int64_t *above);
void ct_cuda_op_fused_classifier_acc(const ct_tensor *logits, const ct_tensor *target, const ct_xent_opts *o,
                                     double scale, ct_tensor *dlogits, ct_tensor *stats);
void ct_cuda_op_pointwise_loss_acc(ct_pointwise_loss kind, const ct_pointwise_opts *o, const ct_tensor *pred,
                                   const ct_tensor *target, ct_tensor *stats);
void ct_cuda_op_scale_by(ct_tensor *t, const ct_tensor *stats, int slot);
void ct_cuda_op_l2_norm_into(const ct_tensor *t, ct_tensor *stats, int slot);
void ct_cuda_op_step_rule(ct_tensor *stats, const ct_step_rule *rule);
void ct_cuda_op_pointwise_loss_rows(ct_pointwise_loss kind, const ct_pointwise_opts *o, const ct_tensor *pred,
                                    const ct_tensor *target, double *loss);
int64_t ct_cuda_op_cross_entropy_forward(const ct_tensor *logits, const ct_tensor *target, const ct_xent_opts *o,
                                         double *sum, double *count);
int64_t ct_cuda_op_cross_entropy_backward(const ct_tensor *logits, const ct_tensor *target, const ct_xent_opts *o,
                                          double scale, ct_tensor *dlogits);
int64_t ct_cuda_op_fused_classifier(const ct_tensor *logits, const ct_tensor *target, const ct_xent_opts *o,
                                    double scale, double *sum, double *count, ct_tensor *dlogits);
double ct_cuda_op_pointwise_loss_forward(ct_pointwise_loss kind, const ct_pointwise_opts *o, const ct_tensor *pred,
                                         const ct_tensor *target);
void ct_cuda_op_pointwise_loss_backward(ct_pointwise_loss kind, const ct_pointwise_opts *o, const ct_tensor *pred,
                                        const ct_tensor *target, double scale, ct_tensor *dpred);
/* dropout and embedding */
void ct_cuda_op_dropout_forward(const ct_tensor *x, double p, const ct_dropout_ctx *ctx, ct_tensor *mask,
                                ct_tensor *y);
void ct_cuda_op_dropout_backward(const ct_tensor *dy, const ct_tensor *mask, double p, ct_tensor *dx);
int64_t ct_cuda_op_embedding_find_invalid(const ct_tensor *ids, int64_t num_embeddings);
void ct_cuda_op_embedding_forward(const ct_tensor *ids, const ct_tensor *weight, ct_tensor *y);
void ct_cuda_op_embedding_backward(const ct_tensor *ids, const ct_tensor *dy, int64_t padding_idx,
                                   ct_tensor *dweight);
/* attention (core/ops/ops_attn.h) */
void ct_cuda_op_heads_split(const ct_tensor *x, int64_t offset, ct_tensor *out);
void ct_cuda_op_heads_merge(const ct_tensor *x, int64_t offset, ct_tensor *out);
void ct_cuda_op_causal_softmax_forward(const ct_tensor *x, ct_tensor *y);
void ct_cuda_op_causal_softmax_backward(const ct_tensor *y, const ct_tensor *dy, ct_tensor *dx);
/* flash_attn.cu */
void ct_cuda_op_causal_attention_forward(const ct_tensor *qkv, int64_t n_head, ct_tensor *lse, ct_tensor *y,
                                         ct_tensor *ws);
void ct_cuda_op_causal_attention_backward(const ct_tensor *qkv, int64_t n_head, const ct_tensor *y,
                                          const ct_tensor *lse, const ct_tensor *dy, ct_tensor *dqkv, ct_tensor *ws);
/* normalisation */
void ct_cuda_op_batchnorm_forward(const ct_tensor *x, const ct_tensor *weight, const ct_tensor *bias,
                                  ct_tensor *running_mean, ct_tensor *running_var, bool training, double momentum,
                                  double eps, ct_tensor *y, ct_tensor *save_mean, ct_tensor *save_rstd);
void ct_cuda_op_batchnorm_backward(const ct_tensor *x, const ct_tensor *dy, const ct_tensor *weight,
                                   const ct_tensor *save_mean, const ct_tensor *save_rstd, bool training,
                                   ct_tensor *dx, ct_tensor *dweight, ct_tensor *dbias);
void ct_cuda_op_layernorm_forward(const ct_tensor *x, const ct_tensor *residual, const ct_tensor *weight,
                                  const ct_tensor *bias, double eps, ct_tensor *sum, ct_tensor *y,
                                  ct_tensor *save_mean, ct_tensor *save_rstd);
void ct_cuda_op_layernorm_backward(const ct_tensor *x, const ct_tensor *dy, const ct_tensor *weight,
                                   const ct_tensor *save_mean, const ct_tensor *save_rstd, const ct_tensor *dresidual,
                                   ct_tensor *dx, ct_tensor *dweight, ct_tensor *dbias);
/* optimizers and norms */
void ct_cuda_op_sgd_step(ct_tensor *param, ct_tensor *grad, ct_tensor *momentum_buffer, const ct_sgd_args *a);
void ct_cuda_op_adam_step(ct_tensor *param, ct_tensor *grad, ct_tensor *exp_avg, ct_tensor *exp_avg_sq,
                          ct_tensor *max_exp_avg_sq, const ct_adam_args *a);
double ct_cuda_op_sum_squares_det(const ct_tensor *t);
double ct_cuda_op_l2_norm(const ct_tensor *t);

#ifdef __cplusplus
}
#endif

#endif
