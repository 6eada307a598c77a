/* Private helpers of the CPU backend.
 *
 * Each family file (blas.c, conv.c, ...) defines the kernels of its ops as ct_cpu_* functions declared
 * at the end of this header; backend_cpu.c puts them into the table ct_backend_cpu, the only way the
 * rest of the library reaches them, after core/ops/dispatch.c has checked the op's arguments (this
 * header is not installed). Kernels are written once over a real type and
 * instantiated for float and double by including a *_tmpl.h file twice with R (the type) and FN (the
 * name suffixer) defined; CT_REAL_DISPATCH picks the instance by the dtype of a tensor. OpenMP loops
 * start only above CT_OMP_MIN elements, where waking the thread team costs less than it saves.
 *
 * The kernel files are compiled once per instruction-set level of the build (isa_names.h, isa.c);
 * CT_CPU_ISA_LEVEL says which copy this is. The public knobs that are not kernels (threads.c, isa.c,
 * ct_conv2d_workspace_numel) exist once, in the baseline copy's objects. */
#ifndef CT_CPU_IMPL_H
#define CT_CPU_IMPL_H

#include "backends/cpu/isa_names.h"

/* The level this copy of the kernels is compiled for: 2 to 4 for the x86-64-v2 to v4 copies, 1 for
 * the baseline copy of a build that has them (CT_CPU_ISA_MULTI), 0 for the one copy of a build that
 * has not (CTRAINER_NATIVE, architectures other than x86-64). */
#ifndef CT_CPU_ISA_LEVEL
#ifdef CT_CPU_ISA_MULTI
#define CT_CPU_ISA_LEVEL 1
#else
#define CT_CPU_ISA_LEVEL 0
#endif
#endif

/* The width in bytes of the widest vector registers of the level this copy is compiled for, for
 * kernels written with the compiler's vector types: wider types than the registers are split through
 * memory. */
#if defined(__AVX512F__)
#define CT_CPU_VEC_BYTES 64
#elif defined(__AVX__)
#define CT_CPU_VEC_BYTES 32
#else
#define CT_CPU_VEC_BYTES 16
#endif

#include <cblas.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/ops/backend.h"
#include "core/ops/ops.h"
#include "core/status.h"
#include "core/tensor.h"

#define CT_OMP_MIN 32768

/* Set by isa.c when the x86-64-v2 copy, legacy SSE, runs on a CPU with AVX, as CT_CPU_ISA=v2 makes it
 * on any machine of today. A thread that has slept (an OpenMP thread at each region's end under
 * OMP_WAIT_POLICY=PASSIVE, or a preempted one) can come back with the AVX registers' upper halves
 * marked in use, and every legacy SSE instruction then merges into them: a false dependency that
 * made the v2 GEMM 27% slower for milliseconds after a 50 us sleep on a Zen 5 VM (bench/bench_wake.c).
 * VZEROUPPER marks them clean again; it costs a cycle, and the copies with AVX need none, their VEX
 * instructions zero the upper halves themselves. Called where the longest kernels start their work on
 * each thread (the GEMM's blocks, GELU's loops); a CPU without AVX, where the v2 copy runs unforced,
 * has no upper halves to clear. The baseline copy (v1, a test level on such CPUs) goes without: its
 * objects hold no instruction beyond x86-64 (layers.baseline_isa). */
extern bool ct_cpu_sse_on_avx;
static inline void ct_cpu_sse_work_start(void) {
#if CT_CPU_ISA_LEVEL == 2 && (defined(__x86_64__) || defined(__i386__))
    if (ct_cpu_sse_on_avx) __asm__ volatile("vzeroupper");
#endif
}

#define CT_REAL_DISPATCH(t, fn, ...)                                                                \
    do {                                                                                           \
        if ((t)->dtype == CT_F32)                                                                  \
            fn##_f32(__VA_ARGS__);                                                                 \
        else if ((t)->dtype == CT_F64)                                                             \
            fn##_f64(__VA_ARGS__);                                                                 \
        else                                                                                       \
            ct_abort_at(__FILE__, __LINE__, "%s: unsupported dtype %s", #fn, ct_dtype_name((t)->dtype)); \
    } while (0)

/* One plane x[H, W] max-pooled with 2x2 windows, stride 2 (nn.MaxPool2d(2)): y[H/2, W/2] and each
 * window's argmax position in the plane, with ct_op_maxpool2d_forward's rules (backends/cpu/pool.c). */
void ct_cpu_maxpool2x2_plane_f32(const float *x, int64_t H, int64_t W, float *y, int32_t *idx);
void ct_cpu_maxpool2x2_plane_f64(const double *x, int64_t H, int64_t W, double *y, int32_t *idx);

/* Sliding windows (convolution, pooling): outputs o in [*lo, *hi) of [0, out) read the input
 * position o*stride + off inside [0, n); the rest fall in the padding. Always 0 <= *lo <= *hi <= out.
 * Computing the span once keeps bounds checks out of the innermost loops. */
static inline void ct_cpu_out_span(int64_t off, int64_t stride, int64_t n, int64_t out, int64_t *lo, int64_t *hi) {
    int64_t l = off >= 0 ? 0 : (-off + stride - 1) / stride;
    int64_t h = n - off <= 0 ? 0 : (n - off + stride - 1) / stride;
    if (l > out) l = out;
    if (h > out) h = out;
    if (h < l) h = l;
    *lo = l;
    *hi = h;
}

/* The kernels of the CPU backend's table (backend_cpu.c), one family per file; core/ops/dispatch.c
 * has checked their arguments. */
/* attn.c */
void ct_cpu_heads_split(const ct_tensor *x, int64_t offset, ct_tensor *out);
void ct_cpu_heads_merge(const ct_tensor *x, int64_t offset, ct_tensor *out);
void ct_cpu_causal_softmax_forward(const ct_tensor *x, ct_tensor *y);
void ct_cpu_causal_softmax_backward(const ct_tensor *y, const ct_tensor *dy, ct_tensor *dx);
void ct_cpu_causal_attention_forward(const ct_tensor *qkv, int64_t n_head, ct_tensor *lse, ct_tensor *y,
                                     ct_tensor *ws);
void ct_cpu_causal_attention_backward(const ct_tensor *qkv, int64_t n_head, const ct_tensor *y,
                                      const ct_tensor *lse, const ct_tensor *dy, ct_tensor *dqkv, ct_tensor *ws);
/* sgemm.c: the float GEMM of every kernel, CBLAS's prototype (row-major only), on the engine
 * gemm_engine.c chose: the built-in kernels, or the library ct_cpu_sgemm_library calls. */
void ct_cpu_sgemm(CBLAS_ORDER order, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, float alpha,
                  const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc);
/* y = act(x w^T + bias) for float x [m, k], w [n, k], bias [n] (or NULL), y [m, n] on the built-in
 * engine, the bias and ReLU applied to each tile as it is stored (the same bits as the bias copied
 * into y and added with beta 1); false, and nothing done, on another engine or where k is 0. */
bool ct_cpu_sgemm_linear(int m, int n, int k, const float *x, int ldx, const float *w, int ldw, const float *bias,
                         bool relu, float *y, int ldy);
/* A linear layer's weight gradient on the built-in engine, dw += dy^T x for float dy [k, m] and x
 * [k, n] (dw [m, n]), and with dbias (or NULL) its bias gradient, dbias[i] += the float64 sum of dy's
 * column i over the k rows in order, rounded: the sums taken as dy is packed for the GEMM, the same
 * bits as bias_grad_cols. false, and nothing done, on another engine or where k is 0. */
bool ct_cpu_sgemm_weight_grad(int m, int n, int k, const float *dy, int lddy, const float *x, int ldx, float *dw,
                              int lddw, float *dbias);
/* gemm_engine.c (compiled once): the engine ct_cpu_gemm_engine_init chose for the level the kernels
 * run at (isa.c calls it when the library loads), the chosen library's sgemm (OpenBLAS or oneDNN),
 * and ct_cpu_gemm_engine_check, which reports a CT_CPU_GEMM it could not honour. */
ct_cpu_gemm_kind ct_cpu_gemm_engine_kind(void);
void ct_cpu_sgemm_library(CBLAS_ORDER order, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, float alpha,
                          const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc);
void ct_cpu_gemm_engine_init(int level);
ct_status ct_cpu_gemm_engine_check(int level);
/* blas.c */
void ct_cpu_gemm(bool trans_a, bool trans_b, double alpha, const ct_tensor *a, const ct_tensor *b, double beta,
                 ct_tensor *c);
void ct_cpu_linear_forward(const ct_tensor *x, const ct_tensor *weight, const ct_tensor *bias, ct_activation act,
                           ct_tensor *pre, ct_tensor *y);
void ct_cpu_linear_backward(const ct_tensor *dy, const ct_tensor *x, const ct_tensor *weight, ct_tensor *dweight,
                            ct_tensor *dbias, ct_tensor *dx);
void ct_cpu_bias_grad_linear(const ct_tensor *dy, ct_tensor *dbias);
void ct_cpu_gemm_batched(bool trans_a, bool trans_b, double alpha, const ct_tensor *a, const ct_tensor *b,
                         double beta, ct_tensor *c);
/* conv.c */
void ct_cpu_conv2d_forward(const ct_conv2d_geom *g, const ct_tensor *x, const ct_tensor *weight,
                           const ct_tensor *bias, ct_tensor *y, ct_tensor *ws);
void ct_cpu_conv2d_relu_pool_forward(const ct_conv2d_geom *g, const ct_tensor *x, const ct_tensor *weight,
                                     const ct_tensor *bias, ct_tensor *y, ct_tensor *indices, ct_tensor *ws);
void ct_cpu_conv2d_backward(const ct_conv2d_geom *g, const ct_tensor *x, const ct_tensor *weight,
                            const ct_tensor *dy, ct_tensor *dweight, ct_tensor *dbias, ct_tensor *dx,
                            ct_tensor *ws);
void ct_cpu_conv2d_relu_backward(const ct_conv2d_geom *g, const ct_tensor *x, const ct_tensor *weight,
                                 const ct_tensor *y, const ct_tensor *dy, ct_tensor *dweight, ct_tensor *dbias,
                                 ct_tensor *dx, ct_tensor *ws);
void ct_cpu_conv2d_relu_pool_backward(const ct_conv2d_geom *g, const ct_tensor *x, const ct_tensor *weight,
                                      const ct_tensor *y, const ct_tensor *indices, const ct_tensor *dy,
                                      ct_tensor *dweight, ct_tensor *dbias, ct_tensor *dx, ct_tensor *ws);
/* elementwise.c */
/* y = GELU(x) with the tanh approximation over n elements, on the calling thread (no thread team). */
void ct_cpu_gelu_tanh_span_f32(const float *x, float *y, int64_t n);
void ct_cpu_gelu_tanh_span_f64(const double *x, double *y, int64_t n);
void ct_cpu_fill(ct_tensor *t, double value);
void ct_cpu_copy(ct_tensor *dst, const ct_tensor *src);
void ct_cpu_add(const ct_tensor *a, const ct_tensor *b, ct_tensor *out);
void ct_cpu_axpy(double alpha, const ct_tensor *x, ct_tensor *y);
void ct_cpu_scale(ct_tensor *t, double s);
bool ct_cpu_all_finite(const ct_tensor *t);
void ct_cpu_bias_add(ct_tensor *y, const ct_tensor *bias, int64_t inner);
void ct_cpu_bias_grad(const ct_tensor *dy, ct_tensor *dbias, int64_t inner);
void ct_cpu_activation_forward(ct_activation act, const ct_tensor *x, ct_tensor *y);
void ct_cpu_activation_backward(ct_activation act, const ct_tensor *x, const ct_tensor *y, const ct_tensor *dy,
                                ct_tensor *dx);
/* loss.c */
int64_t ct_cpu_cross_entropy_forward(const ct_tensor *logits, const ct_tensor *target, const ct_xent_opts *o,
                                     double *sum, double *count);
int64_t ct_cpu_cross_entropy_rows(const ct_tensor *logits, const ct_tensor *target, const ct_xent_opts *o,
                                  double *loss, double *count);
void ct_cpu_token_values(const ct_tensor *logits, const ct_tensor *labels, double *nll, double *hit);
void ct_cpu_class_ranks(const ct_tensor *scores, const ct_tensor *labels, int64_t *pred, int64_t *above);
int64_t ct_cpu_cross_entropy_backward(const ct_tensor *logits, const ct_tensor *target, const ct_xent_opts *o,
                                      double scale, ct_tensor *dlogits);
int64_t ct_cpu_fused_classifier(const ct_tensor *logits, const ct_tensor *target, const ct_xent_opts *o, double scale,
                                double *sum, double *count, ct_tensor *dlogits);
double ct_cpu_pointwise_loss_forward(ct_pointwise_loss kind, const ct_pointwise_opts *o, const ct_tensor *pred,
                                     const ct_tensor *target);
void ct_cpu_pointwise_loss_backward(ct_pointwise_loss kind, const ct_pointwise_opts *o, const ct_tensor *pred,
                                    const ct_tensor *target, double scale, ct_tensor *dpred);
void ct_cpu_fused_classifier_acc(const ct_tensor *logits, const ct_tensor *target, const ct_xent_opts *o, double scale,
                                 ct_tensor *dlogits, ct_tensor *stats);
void ct_cpu_pointwise_loss_acc(ct_pointwise_loss kind, const ct_pointwise_opts *o, const ct_tensor *pred,
                               const ct_tensor *target, ct_tensor *stats);
void ct_cpu_pointwise_loss_rows(ct_pointwise_loss kind, const ct_pointwise_opts *o, const ct_tensor *pred,
                                const ct_tensor *target, double *loss);
/* misc.c */
void ct_cpu_dropout_forward(const ct_tensor *x, double p, const ct_dropout_ctx *ctx, ct_tensor *mask,
                            ct_tensor *y);
void ct_cpu_dropout_backward(const ct_tensor *dy, const ct_tensor *mask, double p, ct_tensor *dx);
int64_t ct_cpu_embedding_find_invalid(const ct_tensor *ids, int64_t num_embeddings);
void ct_cpu_embedding_forward(const ct_tensor *ids, const ct_tensor *weight, ct_tensor *y);
void ct_cpu_embedding_backward(const ct_tensor *ids, const ct_tensor *dy, int64_t padding_idx, ct_tensor *dweight);
/* norm.c */
void ct_cpu_batchnorm_forward(const ct_tensor *x, const ct_tensor *weight, const ct_tensor *bias,
                              ct_tensor *running_mean, ct_tensor *running_var, bool training, double momentum,
                              double eps, ct_tensor *y, ct_tensor *save_mean, ct_tensor *save_rstd);
void ct_cpu_batchnorm_backward(const ct_tensor *x, const ct_tensor *dy, const ct_tensor *weight,
                               const ct_tensor *save_mean, const ct_tensor *save_rstd, bool training, ct_tensor *dx,
                               ct_tensor *dweight, ct_tensor *dbias);
void ct_cpu_layernorm_forward(const ct_tensor *x, const ct_tensor *residual, const ct_tensor *weight,
                              const ct_tensor *bias, double eps, ct_tensor *sum, ct_tensor *y, ct_tensor *save_mean,
                              ct_tensor *save_rstd);
void ct_cpu_layernorm_backward(const ct_tensor *x, const ct_tensor *dy, const ct_tensor *weight,
                               const ct_tensor *save_mean, const ct_tensor *save_rstd, const ct_tensor *dresidual,
                               ct_tensor *dx, ct_tensor *dweight, ct_tensor *dbias);
/* optim.c */
void ct_cpu_sgd_step(ct_tensor *param, ct_tensor *grad, ct_tensor *momentum_buffer, const ct_sgd_args *a);
void ct_cpu_adam_step(ct_tensor *param, ct_tensor *grad, ct_tensor *exp_avg, ct_tensor *exp_avg_sq,
                      ct_tensor *max_exp_avg_sq, const ct_adam_args *a);
double ct_cpu_sum_squares_det(const ct_tensor *t);
double ct_cpu_l2_norm(const ct_tensor *t);
void ct_cpu_scale_by(ct_tensor *t, const ct_tensor *stats, int slot);
void ct_cpu_l2_norm_into(const ct_tensor *t, ct_tensor *stats, int slot);
void ct_cpu_step_rule(ct_tensor *stats, const ct_step_rule *rule);
/* pool.c */
void ct_cpu_maxpool2d_forward(const ct_pool2d_geom *g, const ct_tensor *x, ct_tensor *y, ct_tensor *indices);
void ct_cpu_maxpool2d_backward(const ct_pool2d_geom *g, const ct_tensor *dy, const ct_tensor *indices,
                               ct_tensor *dx);
void ct_cpu_avgpool2d_forward(const ct_pool2d_geom *g, const ct_tensor *x, ct_tensor *y);
void ct_cpu_avgpool2d_backward(const ct_pool2d_geom *g, const ct_tensor *dy, ct_tensor *dx);

#endif
