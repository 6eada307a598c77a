/* Attention on the CPU (see ops_attn.h): head split/merge copies, the causal softmax, and the fused
 * causal attention of a projection's q | k | v (CPU only); typed kernels in attn_tmpl.h. Members of
 * ct_backend_cpu (backend_cpu.c); the CUDA twins of the first three are in backends/cuda/attn.cu. */
#include <cblas.h>
#include <math.h>
#include <omp.h>

#include "backends/cpu/cpu_impl.h"
#include "backends/cpu/expf.h"
#include "core/ops/ops_attn.h"

#define R float
#define FN(name) name##_f32
/* float: the polynomial the compiler vectorises (expf.h); the softmax subtracts the row's max first */
#define EXP ct_cpu_expf_neg
#define GEMM ct_cpu_sgemm
#include "backends/cpu/attn_tmpl.h"
#undef R
#undef FN
#undef EXP
#undef GEMM
#define R double
#define FN(name) name##_f64
#define EXP exp
#define GEMM cblas_dgemm
#include "backends/cpu/attn_tmpl.h"
#undef R
#undef FN
#undef EXP
#undef GEMM

void ct_cpu_heads_split(const ct_tensor *x, int64_t offset, ct_tensor *out) {
    CT_REAL_DISPATCH(x, heads_split, x->data, out->data, x->shape[0], x->shape[1], x->shape[2], offset, out->shape[1],
                     out->shape[3]);
}

void ct_cpu_heads_merge(const ct_tensor *x, int64_t offset, ct_tensor *out) {
    CT_REAL_DISPATCH(x, heads_merge, x->data, out->data, out->shape[0], out->shape[1], out->shape[2], offset,
                     x->shape[1], x->shape[3]);
}

/* Rows, queries and keys of scores viewed as [N, Tq, Tk]. */
static void score_dims(const ct_tensor *t, int64_t *rows, int64_t *tq, int64_t *tk) {
    *tq = t->shape[t->ndim - 2];
    *tk = t->shape[t->ndim - 1];
    *rows = ct_tensor_numel(t) / *tk;
}

void ct_cpu_causal_softmax_forward(const ct_tensor *x, ct_tensor *y) {
    int64_t rows, tq, tk;
    score_dims(x, &rows, &tq, &tk);
    CT_REAL_DISPATCH(x, causal_softmax_fwd, x->data, y->data, rows, tq, tk);
}

void ct_cpu_causal_softmax_backward(const ct_tensor *y, const ct_tensor *dy, ct_tensor *dx) {
    int64_t rows, tq, tk;
    score_dims(y, &rows, &tq, &tk);
    CT_REAL_DISPATCH(y, causal_softmax_bwd, y->data, dy->data, dx->data, rows, tq, tk);
}

/* A public knob, not a kernel: defined once, by the baseline copy (cpu_impl.h). Two chunks of
 * ATTN_ROWS query rows by T keys per thread: the chunk's P and its gradient. */
#if CT_CPU_ISA_LEVEL <= 1
int64_t ct_causal_attention_workspace_numel(int64_t T) {
    CT_ASSERT(T >= 1);
    return (int64_t)omp_get_max_threads() * 2 * ATTN_ROWS * T;
}
#endif

/* The heads' shape of qkv [B, T, 3C] with H heads: B, T and D; and how many threads' slots ws holds. */
static void attention_dims(const ct_tensor *qkv, int64_t H, const ct_tensor *ws, int64_t *B, int64_t *T, int64_t *D,
                           int64_t *slots) {
    *B = qkv->shape[0];
    *T = qkv->shape[1];
    *D = qkv->shape[2] / 3 / H;
    *slots = ct_tensor_numel(ws) / (2 * ATTN_ROWS * *T);
    CT_ASSERT(ws->dtype == qkv->dtype && *slots >= 1);
}

/* The GEMMs' alpha is the type's rounding of 1 / sqrt(D), as ct_op_gemm passes it. */
void ct_cpu_causal_attention_forward(const ct_tensor *qkv, int64_t n_head, ct_tensor *lse, ct_tensor *y,
                                     ct_tensor *ws) {
    int64_t B, T, D, slots;
    attention_dims(qkv, n_head, ws, &B, &T, &D, &slots);
    CT_REAL_DISPATCH(qkv, attention_fwd, qkv->data, lse->data, y->data, ws->data, slots, B, T, n_head, D,
                     1.0 / sqrt((double)D));
}

void ct_cpu_causal_attention_backward(const ct_tensor *qkv, int64_t n_head, const ct_tensor *y,
                                      const ct_tensor *lse, const ct_tensor *dy, ct_tensor *dqkv, ct_tensor *ws) {
    (void)y; /* a chunk holds whole rows: the softmax's row dot products come from P and dP */
    int64_t B, T, D, slots;
    attention_dims(qkv, n_head, ws, &B, &T, &D, &slots);
    CT_REAL_DISPATCH(qkv, attention_bwd, qkv->data, lse->data, dy->data, dqkv->data, ws->data, slots, B, T, n_head, D,
                     1.0 / sqrt((double)D));
}
