/* The op library: the numeric kernels layers, losses and optimizers are made of.
 *
 * Ops take tensors and dispatch once, on the device of their tensors, to that device kind's backend
 * table (core/ops/backend.h): the public ct_op_* functions live in core/ops/dispatch.c, which checks
 * what every backend relies on and calls the table's kernel, ct_backend_cpu (backends/cpu/, every
 * build) or ct_backend_cuda (backends/cuda/, builds with CUDA). The kernels dispatch on the dtype
 * (f32 for training, f64 for the reference path used by gradient checks). Ops trust their callers: layers validate shapes, dtypes and devices once, in ct_module_forward,
 * and give the user a message naming the layer; an op handed inconsistent tensors is a programmer
 * error and aborts with file:line (CT_ASSERT). Ops never allocate: scratch space is passed in.
 *
 * Backward ops ACCUMULATE into parameter gradients (+=), as PyTorch does, so gradient accumulation
 * over micro-batches needs no extra buffer; input gradients (dx) are overwritten. */
#ifndef CT_OPS_H
#define CT_OPS_H

#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"
#include "core/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* --- threading --------------------------------------------------------------------------------- */

/* Number of threads used by OpenMP loops and OpenBLAS (0 = leave as the environment set it). */
void ct_set_num_threads(int n);
int ct_get_num_threads(void);
/* CT_ERR_CONFIG naming OMP_NUM_THREADS when it asks for more threads than any use of this machine
 * takes (16 per CPU, at least 256): each takes a stack, and a team of tens of thousands makes
 * libgomp fail or crash at the first parallel region instead of saying why. */
ct_status ct_num_threads_check(void);

/* Flushes denormal floats to zero in this thread and every OpenMP worker (torch.set_flush_denormal).
 * Training wants it: optimizer moments of rarely-active units decay into the denormal range, where
 * every operation on them costs a hundred cycles and slows the update several-fold. Returns false
 * where the CPU has no such mode (nothing changes then). Call after ct_set_num_threads. */
bool ct_set_flush_denormal(bool on);

/* The instruction-set level the CPU kernels run at (backends/cpu/isa.c), chosen when the library
 * loads: in an x86-64 build, the best of 1 (x86-64, SSE2), 2 (x86-64-v2, SSE4.2), 3 (x86-64-v3,
 * AVX2 and FMA) and 4 (x86-64-v4, AVX-512) that the CPU offers (ct_cpu_isa_best), or the lower
 * one the environment variable CT_CPU_ISA names (v1 to v4). A build with CTRAINER_NATIVE, or for
 * another architecture, has one level, 0. ct_cpu_isa names the level ("x86-64-v3 (AVX2, FMA)"). */
int ct_cpu_isa_level(void);
int ct_cpu_isa_best(void);
const char *ct_cpu_isa(void);

/* The engine of the CPU's float GEMMs (backends/cpu/sgemm.c, gemm_engine.c), as a line for `ctrainer
 * version` and the benchmarks ("float GEMMs: built-in"): ctrainer's own kernels by default, in which
 * an element of C has the same bits whatever the row count of the call or the thread count;
 * OpenBLAS's sgemm under the environment variable CT_CPU_GEMM=openblas (whose bits can change with
 * the thread count on some of its kernel sets); oneDNN's under
 * CT_CPU_GEMM=onednn where the build has it (CTRAINER_ONEDNN) and the level is not 1 (a row of C
 * then changes in its last bits between row counts: evaluation batch sizes). float64 GEMMs are
 * always OpenBLAS's. */
const char *ct_cpu_gemm_engine(void);

/* CT_OK, or CT_ERR_INVALID_ARG with a message when CT_CPU_ISA names no level, one above the CPU's
 * best, or any in a build without levels (the kernels then run at the best level), or when
 * CT_CPU_GEMM names no engine or one the build or level lacks (the default engine then runs). The
 * CLI and ct_trainer_init stop on it. */
ct_status ct_cpu_isa_check(void);

/* --- dense linear algebra ---------------------------------------------------------------------- */

/* C = alpha * op(A) @ op(B) + beta * C on 2-D row-major tensors; op transposes when asked. */
void ct_op_gemm(bool trans_a, bool trans_b, double alpha, const ct_tensor *a, const ct_tensor *b, double beta,
                ct_tensor *c);

/* ct_op_gemm on every matrix of a batch: a, b and c hold the same number of matrices (the product of
 * their leading dimensions; the last two are each matrix's rows and columns, as in torch.bmm), one
 * after another, and C_i = alpha * op(A_i) @ op(B_i) + beta * C_i for each. Each C_i is what
 * ct_op_gemm computes for it; the CPU computes the matrices in one parallel region, a GEMM per
 * thread at a time, where one GEMM each would open a thread team per small product (attention's
 * per-(sample, head) products). On backends without the kernel: one ct_op_gemm per matrix. */
void ct_op_gemm_batched(bool trans_a, bool trans_b, double alpha, const ct_tensor *a, const ct_tensor *b,
                        double beta, ct_tensor *c);

/* --- elementwise and reductions ---------------------------------------------------------------- */

void ct_op_fill(ct_tensor *t, double value);
void ct_op_copy(ct_tensor *dst, const ct_tensor *src);
/* out = a + b (out may alias a or b). */
void ct_op_add(const ct_tensor *a, const ct_tensor *b, ct_tensor *out);
/* y += alpha * x */
void ct_op_axpy(double alpha, const ct_tensor *x, ct_tensor *y);
void ct_op_scale(ct_tensor *t, double s);
/* CT_OK-free check: true when every element is finite. */
bool ct_op_all_finite(const ct_tensor *t);

/* y[n, c, s] += bias[c] for y viewed as [rows, C, inner] where C = bias length. */
void ct_op_bias_add(ct_tensor *y, const ct_tensor *bias, int64_t inner);
/* dbias[c] += sum over n and s of dy[n, c, s]. */
void ct_op_bias_grad(const ct_tensor *dy, ct_tensor *dbias, int64_t inner);

typedef enum ct_activation {
    CT_ACT_NONE = 0,
    CT_ACT_RELU,
    CT_ACT_GELU,      /* exact: x * Phi(x) */
    CT_ACT_GELU_TANH, /* tanh approximation, PyTorch's approximate="tanh" */
    CT_ACT_TANH,
    CT_ACT_SIGMOID,
} ct_activation;

const char *ct_activation_name(ct_activation a);
/* y = act(x); y may alias x. */
void ct_op_activation_forward(ct_activation act, const ct_tensor *x, ct_tensor *y);
/* dx = dy * act'(x); uses x (gelu) or y (relu, tanh, sigmoid), whichever the formula needs. */
void ct_op_activation_backward(ct_activation act, const ct_tensor *x, const ct_tensor *y, const ct_tensor *dy,
                               ct_tensor *dx);

/* y = act(x weight^T + bias): a linear layer's forward, x [rows, in], weight [out, in], bias [out] or
 * NULL, y [rows, out], act CT_ACT_NONE, CT_ACT_RELU or CT_ACT_GELU_TANH. With GELU, pre [rows, out]
 * receives x weight^T + bias too, the activation's input that its backward needs (NULL otherwise;
 * the ReLU's backward needs only y). The same values as ct_op_gemm, ct_op_bias_add and
 * ct_op_activation_forward in turn, in one pass over y on backends with the kernel: the CPU starts
 * the GEMM from the bias and applies the activation while the rows are in cache, CUDA has cuBLASLt
 * do both in the GEMM's epilogue; elsewhere those three ops in turn. */
void ct_op_linear_forward(const ct_tensor *x, const ct_tensor *weight, const ct_tensor *bias, ct_activation act,
                          ct_tensor *pre, ct_tensor *y);
/* A linear layer's backward from its output gradient dy [rows, out] and input x [rows, in]:
 * dweight [out, in] += dy^T x, dbias [out] += dy's column sums (when not NULL), dx [rows, in] = dy
 * weight (when not NULL). The same values as ct_op_gemm, ct_op_bias_grad and ct_op_gemm in turn; on
 * backends with the kernel the bias gradient is summed as the weight gradient's GEMM reads dy (the
 * CPU's packing, cuBLASLt's epilogue), and on the CPU the three share one parallel region, so the
 * thread team meets once instead of three times. */
void ct_op_linear_backward(const ct_tensor *dy, const ct_tensor *x, const ct_tensor *weight, ct_tensor *dweight,
                           ct_tensor *dbias, ct_tensor *dx);

#ifdef __cplusplus
}
#endif

/* The other op families have headers of their own. */
#include "core/ops/ops_conv.h"
#include "core/ops/ops_loss.h"
#include "core/ops/ops_misc.h"
#include "core/ops/ops_norm.h"
#include "core/ops/ops_optim.h"

#endif
