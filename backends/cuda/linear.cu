/* A linear layer's forward and backward on the GPU through cuBLASLt (ct_op_linear_forward and
 * ct_op_linear_backward). The GEMM's epilogue adds the bias and applies the tanh GELU (writing the
 * GELU's input to `pre` as well, for the backward), and the weight gradient's GEMM sums the bias
 * gradient as it reads dy: none of them is a pass over a [rows, out] matrix of its own. At GPT-2's
 * MLP width those passes would move several times the bytes the GEMMs themselves read and write.
 *
 * A ReLU is not left to the epilogue: ct_op_activation_forward's ReLU lets a NaN through (PyTorch's
 * clamp_min), so that a bad batch reaches the loss, and cuBLASLt does not say what its ReLU does with
 * one. It runs as its own kernel after a GEMM with the bias epilogue.
 *
 * Layout, as in blas.cu: a row-major [r, c] buffer read column-major is its transpose (c x r).
 * - Forward: y [rows, out] is D = op(A) op(B) + bias read column-major (out x rows), with m = out,
 *   n = rows, k = in. A is the weight's memory, W^T (in x out), transposed; B is x's memory, x^T
 *   (in x rows), as it is. cuBLASLt's bias has one value per row of D: per column of y.
 * - Weight gradient: dW [out, in] is D (in x out) = x^T dy with m = in, n = out, k = rows, beta 1
 *   (gradients accumulate). A is x's memory as it is; B is dy's memory, dy^T (out x rows),
 *   transposed. BGRADB sums op(B) over k, one value per column of D: dy's column sums. cuBLASLt
 *   stores that sum rather than adding it, so it goes to a scratch vector that is then added to dbias.
 * - Input gradient: dx = dy W, a plain GEMM (blas.cu).
 *
 * float32 only, in the thread's math mode (blas.cu's compute types). float64, an empty sum (in = 0)
 * and a product cuBLASLt's heuristic finds no algorithm for (with a warning) take the separate ops
 * instead, as do GELU outputs whose width is not a multiple of 8 (cuBLASLt's rule for the leading
 * dimension of the GELU input it writes). The algorithm cuBLASLt's heuristic picks for a shape is kept per thread, so a step asks
 * it once per distinct GEMM, not once per call. */
#include <climits>
#include <cstdint>

#include "backends/cuda/cuda_handles.h"
#include "backends/cuda/ops_cuda.h"
#include "core/log.h"

namespace {

/* What cuBLASLt may use of device memory for one GEMM (NVIDIA's advice for Hopper). */
constexpr size_t kMaxWorkspace = size_t(32) << 20;

/* One column-major GEMM D = epilogue(alpha op(A) op(B) + beta D) as cuBLASLt is asked for it. */
struct lt_gemm {
    int64_t m, n, k;
    bool trans_a, trans_b;
    const float *a, *b;
    int64_t lda, ldb;
    float beta;
    float *d;
    int64_t ldd;
    cublasLtEpilogue_t epilogue;
    void *bias;     /* the bias (BIAS epilogues); with BGRADB, set by lt_matmul */
    void *aux;      /* the GELU's input (GELU_AUX epilogues) */
    int64_t ld_aux; /* its leading dimension */
};

/* The largest power of two (up to 256) that divides every address g passes: cuBLASLt's
 * algorithms state the alignment they need, and the heuristic is told this one. */
uint32_t alignment_of(const lt_gemm &g) {
    uintptr_t bits = 256 | (uintptr_t)g.a | (uintptr_t)g.b | (uintptr_t)g.d | (uintptr_t)g.bias | (uintptr_t)g.aux;
    return (uint32_t)(bits & (~bits + 1));
}

/* The heuristic's answer for one kind of GEMM, remembered per thread. */
struct plan {
    int device;
    cublasComputeType_t compute;
    cublasLtEpilogue_t epilogue;
    int64_t m, n, k;
    bool trans_a, trans_b, accumulate;
    uint32_t alignment;
    bool usable; /* false: cuBLASLt has no algorithm for it */
    cublasLtMatmulAlgo_t algo;
    size_t workspace;

    bool same(const plan &o) const {
        return device == o.device && compute == o.compute && epilogue == o.epilogue && m == o.m && n == o.n &&
               k == o.k && trans_a == o.trans_a && trans_b == o.trans_b && accumulate == o.accumulate &&
               alignment == o.alignment;
    }
};

constexpr int kPlans = 64; /* distinct GEMMs a thread's model has: a few per layer shape */
thread_local plan plans[kPlans];
thread_local int plans_used, plans_next;

/* The descriptors of one call, destroyed however the call ends. */
struct descriptors {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    cublasLtMatmulPreference_t pref = nullptr;
    ~descriptors() {
        if (pref) cublasLtMatmulPreferenceDestroy(pref);
        if (d) cublasLtMatrixLayoutDestroy(d);
        if (b) cublasLtMatrixLayoutDestroy(b);
        if (a) cublasLtMatrixLayoutDestroy(a);
        if (op) cublasLtMatmulDescDestroy(op);
    }
};

template <typename T> void set_op(cublasLtMatmulDesc_t op, cublasLtMatmulDescAttributes_t what, const T &value) {
    CT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, what, &value, sizeof value));
}

template <typename T>
void set_pref(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t what, const T &value) {
    CT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(p, what, &value, sizeof value));
}

/* The plan for g under the descriptors made for it: the remembered one, or the heuristic's answer. */
const plan &plan_for(const lt_gemm &g, cublasComputeType_t compute, descriptors &desc) {
    plan want{};
    want.device = ct_cuda_current_device();
    want.compute = compute;
    want.epilogue = g.epilogue;
    want.m = g.m, want.n = g.n, want.k = g.k;
    want.trans_a = g.trans_a, want.trans_b = g.trans_b, want.accumulate = g.beta != 0.0f;
    want.alignment = alignment_of(g);
    for (int i = 0; i < plans_used; i++)
        if (plans[i].same(want)) return plans[i];

    CT_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&desc.pref));
    set_pref(desc.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, kMaxWorkspace);
    set_pref(desc.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, want.alignment);
    set_pref(desc.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, want.alignment);
    set_pref(desc.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, want.alignment);
    set_pref(desc.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, want.alignment);
    cublasLtMatmulHeuristicResult_t found{};
    int count = 0;
    cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(ct_cublaslt_handle(), desc.op, desc.a, desc.b, desc.d, desc.d,
                                                      desc.pref, 1, &found, &count);
    want.usable = s == CUBLAS_STATUS_SUCCESS && count > 0 && found.state == CUBLAS_STATUS_SUCCESS;
    want.algo = found.algo;
    want.workspace = found.workspaceSize;
    /* Which epilogues a library version has kernels for, for which types and compute types, is a
     * table of its own: where it has none the separate ops do the work, said once per GEMM shape. */
    if (!want.usable)
        ct_log_warning("cuda:%d: cuBLASLt has no algorithm for a %lld x %lld x %lld GEMM with epilogue %d in %s math "
                       "(%s); the linear layer runs it as separate ops", want.device, (long long)g.m, (long long)g.n,
                       (long long)g.k, (int)g.epilogue, ct_math_mode_name(ct_cuda_math_mode()),
                       s == CUBLAS_STATUS_SUCCESS ? "no result" : cublasGetStatusString(s));

    plan &slot = plans[plans_used < kPlans ? plans_used++ : plans_next++ % kPlans];
    slot = want;
    return slot;
}

/* Runs g on the thread's stream in its math mode; false, and nothing done, where cuBLASLt has no
 * algorithm for it. With BGRADB the bias gradient (n floats) goes to the start of the thread's
 * library workspace, ahead of cuBLASLt's own share; *sums points to it, valid until the next use of
 * the workspace on this thread (ops on the stream after this one). */
bool lt_matmul(lt_gemm g, float **sums) {
    const cublasComputeType_t compute = ct_cuda_f32_compute_type(ct_cuda_math_mode());
    const size_t scratch = g.epilogue == CUBLASLT_EPILOGUE_BGRADB ? (g.n * sizeof(float) + 255) / 256 * 256 : 0;
    /* for the heuristic, which reads the pointer's alignment: the workspace's, as at the call */
    if (scratch) g.bias = ct_cuda_workspace(scratch);
    descriptors desc;
    CT_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc.op, compute, CUDA_R_32F));
    const cublasOperation_t ta = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    set_op(desc.op, CUBLASLT_MATMUL_DESC_TRANSA, ta);
    set_op(desc.op, CUBLASLT_MATMUL_DESC_TRANSB, tb);
    set_op(desc.op, CUBLASLT_MATMUL_DESC_EPILOGUE, g.epilogue);
    if (g.bias) set_op(desc.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, g.bias);
    if (g.aux) {
        set_op(desc.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, g.aux);
        set_op(desc.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, g.ld_aux);
    }
    /* the stored shapes: op(A) is m x k, op(B) k x n */
    CT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&desc.a, CUDA_R_32F, g.trans_a ? g.k : g.m, g.trans_a ? g.m : g.k,
                                               g.lda));
    CT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&desc.b, CUDA_R_32F, g.trans_b ? g.n : g.k, g.trans_b ? g.k : g.n,
                                               g.ldb));
    CT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&desc.d, CUDA_R_32F, g.m, g.n, g.ldd));
    const plan &p = plan_for(g, compute, desc);
    if (!p.usable) return false;
    char *workspace = scratch + p.workspace ? (char *)ct_cuda_workspace(scratch + p.workspace) : nullptr;
    if (scratch) { /* the workspace may have grown into a new buffer */
        set_op(desc.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, (void *)workspace);
        *sums = (float *)workspace;
    }
    const float alpha = 1.0f;
    CT_CUBLAS_CHECK(cublasLtMatmul(ct_cublaslt_handle(), desc.op, &alpha, g.a, desc.a, g.b, desc.b, &g.beta, g.d,
                                   desc.d, g.d, desc.d, &p.algo, p.workspace ? workspace + scratch : nullptr,
                                   p.workspace, ct_cuda_stream_t()));
    return true;
}

/* Whether a product of these sizes fits cuBLASLt's path (float32, a non-empty sum, sizes its
 * int64 layouts and our int32 kernels share). */
bool lt_fits(const ct_tensor *t, int64_t m, int64_t n, int64_t k) {
    return t->dtype == CT_F32 && m > 0 && n > 0 && k > 0 && m <= INT_MAX && n <= INT_MAX && k <= INT_MAX;
}

}  // namespace

extern "C" void ct_cuda_op_linear_forward(const ct_tensor *x, const ct_tensor *weight, const ct_tensor *bias,
                                          ct_activation act, ct_tensor *pre, ct_tensor *y) {
    const int64_t rows = y->shape[0], out = y->shape[1], in = x->shape[1];
    if (rows == 0) return;
    const bool gelu = act == CT_ACT_GELU_TANH;
    if (lt_fits(y, out, rows, in) && (!gelu || out % 8 == 0)) {
        lt_gemm g{};
        g.m = out, g.n = rows, g.k = in;
        g.trans_a = true, g.trans_b = false;
        g.a = (const float *)weight->data, g.lda = in;
        g.b = (const float *)x->data, g.ldb = in;
        g.d = (float *)y->data, g.ldd = out;
        g.bias = bias ? bias->data : nullptr;
        if (gelu) {
            g.epilogue = bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
            g.aux = pre->data, g.ld_aux = out;
        } else {
            g.epilogue = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
        }
        if (lt_matmul(g, nullptr)) {
            if (act == CT_ACT_RELU) ct_cuda_op_activation_forward(act, y, y);
            return;
        }
    }
    /* the same values in separate ops */
    ct_tensor *z = gelu ? pre : y;
    ct_cuda_op_gemm(false, true, 1.0, x, weight, 0.0, z);
    if (bias) ct_cuda_op_bias_add(z, bias, 1);
    if (act != CT_ACT_NONE) ct_cuda_op_activation_forward(act, z, y);
}

extern "C" void ct_cuda_op_linear_backward(const ct_tensor *dy, const ct_tensor *x, const ct_tensor *weight,
                                           ct_tensor *dweight, ct_tensor *dbias, ct_tensor *dx) {
    const int64_t rows = dy->shape[0], out = dy->shape[1], in = x->shape[1];
    if (rows == 0) return; /* dweight and dbias gain nothing, dx has no rows */
    bool done = false;
    if (lt_fits(dy, in, out, rows)) {
        lt_gemm g{};
        g.m = in, g.n = out, g.k = rows;
        g.trans_a = false, g.trans_b = true;
        g.a = (const float *)x->data, g.lda = in;
        g.b = (const float *)dy->data, g.ldb = out;
        g.beta = 1.0f;
        g.d = (float *)dweight->data, g.ldd = in;
        g.epilogue = dbias ? CUBLASLT_EPILOGUE_BGRADB : CUBLASLT_EPILOGUE_DEFAULT;
        float *sums = nullptr;
        done = lt_matmul(g, &sums);
        if (done && dbias) {
            const ct_tensor s = ct_tensor_view(sums, CT_F32, dy->device, 1, &out);
            ct_cuda_op_axpy(1.0, &s, dbias);
        }
    }
    if (!done) {
        ct_cuda_op_gemm(true, false, 1.0, dy, x, 1.0, dweight);
        if (dbias) ct_cuda_op_bias_grad(dy, dbias, 1);
    }
    if (dx) ct_cuda_op_gemm(false, false, 1.0, dy, weight, 0.0, dx);
}
