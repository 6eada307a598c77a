/* cuBLASLt in the host emulation: what backends/cuda/linear.cu calls (include/cublasLt.h), with the
 * library's documented meaning and its documented rules enforced, so that a call the real library
 * would refuse, or would compute differently from what linear.cu means, fails a test on any machine.
 *
 * The product is column-major, D = epilogue(alpha op(A) op(B) + beta C), op(A) m x k, op(B) k x n;
 * it is computed by the CPU's GEMM on the same memory (a packed column-major r x c matrix is the
 * row-major [c, r] one, its transpose), with float32 inputs rounded as tensor cores round them under
 * the descriptor's compute type. Epilogues: BIAS adds bias[i] to row i of D (the bias has D's row
 * count); GELU_AUX(_BIAS) stores the value before the tanh GELU in the aux matrix (leading dimension
 * a multiple of 8, at least D's rows) and the GELU of it in D; BGRADB stores (not adds) the sums of
 * op(B) over k, one per column of D, at the bias pointer.
 *
 * What the library refuses (an error status) ends the process here, naming the rule: an attribute
 * of the wrong size, layouts that do not make op(A) op(B) = D, a leading dimension below the row
 * count, an epilogue without the pointer it needs, an aux leading dimension off the rule, an
 * algorithm used for another problem than the one the heuristic was asked about (a stale plan), a
 * workspace smaller than the algorithm's, pointers less aligned than the heuristic was told. On a GPU
 * linear.cu would take a refused heuristic for "no algorithm" and run the separate ops with a
 * warning; here no test passes on a call the library would refuse. Not modelled (linear.cu never
 * asks for them, and they end the process likewise): layouts with padding between columns, C other
 * than D, other types and epilogues. */
#include <cublasLt.h>

#include <cstring>
#include <vector>

#include "backends/cuda/ops_cuda.h"
#include "core/ops/backend.h"
#include "emulated_libraries.h"

struct ct_emu_lt {};

struct ct_emu_lt_op {
    cublasComputeType_t compute;
    cublasOperation_t trans_a = CUBLAS_OP_N, trans_b = CUBLAS_OP_N;
    cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    void *bias = nullptr, *aux = nullptr;
    int64_t ld_aux = 0;
};

struct ct_emu_lt_layout {
    uint64_t rows, cols;
    int64_t ld;
};

struct ct_emu_lt_pref {
    uint64_t max_workspace = 0;
    uint32_t alignment[4] = {256, 256, 256, 256}; /* A, B, C, D */
};

namespace {

constexpr uint64_t kMagic = 0x4c54454d55ull; /* marks an algorithm this emulation's heuristic made */
constexpr size_t kAlgoWorkspace = 64 << 10;  /* what its algorithms ask of the workspace */

bool has_bias(cublasLtEpilogue_t e) { return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS; }
bool has_gelu(cublasLtEpilogue_t e) { return e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS; }

ct_math_mode mode_of(cublasComputeType_t c) {
    switch (c) {
    case CUBLAS_COMPUTE_32F: return CT_MATH_F32;
    case CUBLAS_COMPUTE_32F_FAST_TF32: return CT_MATH_TF32;
    case CUBLAS_COMPUTE_32F_FAST_16BF: return CT_MATH_BF16;
    case CUBLAS_COMPUTE_32F_FAST_16F: return CT_MATH_FP16;
    }
    ct_abort_at(__FILE__, __LINE__, "emulated cuBLASLt: unknown compute type %d", (int)c);
}

[[noreturn]] void refuse(const char *why) { ct_abort_at(__FILE__, __LINE__, "emulated cuBLASLt: %s", why); }

/* The problem's sizes; a refusal where the descriptors do not describe one. */
void check_problem(const ct_emu_lt_op *op, const ct_emu_lt_layout *a, const ct_emu_lt_layout *b,
                   const ct_emu_lt_layout *c, const ct_emu_lt_layout *d, uint64_t *m, uint64_t *n, uint64_t *k) {
    if (!op || !a || !b || !c || !d) refuse("a descriptor is missing");
    *m = d->rows, *n = d->cols;
    const bool ta = op->trans_a == CUBLAS_OP_T, tb = op->trans_b == CUBLAS_OP_T;
    *k = ta ? a->rows : a->cols;
    if ((ta ? a->cols : a->rows) != *m) refuse("op(A)'s rows are not D's");
    if ((tb ? b->cols : b->rows) != *k) refuse("op(B)'s rows are not op(A)'s columns");
    if ((tb ? b->rows : b->cols) != *n) refuse("op(B)'s columns are not D's");
    if (c->rows != d->rows || c->cols != d->cols || c->ld != d->ld) refuse("C's layout is not D's");
    for (const ct_emu_lt_layout *l : {a, b, d})
        if (l->ld < (int64_t)l->rows || l->ld < 1) refuse("a leading dimension below the row count");
    if (has_bias(op->epilogue) && !op->bias) refuse("a bias epilogue without BIAS_POINTER");
    if (op->epilogue == CUBLASLT_EPILOGUE_BGRADB && !op->bias) refuse("BGRADB without BIAS_POINTER");
    if (has_gelu(op->epilogue)) {
        if (!op->aux) refuse("a GELU_AUX epilogue without EPILOGUE_AUX_POINTER");
        if (op->ld_aux % 8 != 0 || op->ld_aux < (int64_t)*m)
            refuse("EPILOGUE_AUX_LD must be divisible by 8 and at least D's rows");
    }
}

template <typename T> cublasStatus_t take(T *to, const void *buf, size_t size) {
    if (size != sizeof(T)) refuse("an attribute of the wrong size");
    std::memcpy(to, buf, size);
    return CUBLAS_STATUS_SUCCESS;
}

/* The epilogue and transposes of op as one number, for an algorithm's record of its problem. */
uint64_t op_code(const ct_emu_lt_op *op) { return ((uint64_t)op->epilogue << 2) | (op->trans_a << 1) | op->trans_b; }

uint32_t alignment(const void *p) {
    uintptr_t bits = 256 | (uintptr_t)p;
    return (uint32_t)(bits & (~bits + 1));
}

/* A packed column-major rows x cols float matrix as the row-major tensor [cols, rows] it is. */
ct_tensor row_major(const void *data, const ct_emu_lt_layout *l) {
    const int64_t shape[2] = {(int64_t)l->cols, (int64_t)l->rows};
    return ct_tensor_view(const_cast<void *>(data), CT_F32, CT_CPU, 2, shape);
}

}  // namespace

cublasStatus_t cublasLtCreate(cublasLtHandle_t *handle) {
    static ct_emu_lt one;
    *handle = &one;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *desc, cublasComputeType_t compute, cudaDataType_t scale) {
    if (scale != CUDA_R_32F) refuse("a float32 GEMM's scale type is float32");
    *desc = new ct_emu_lt_op{compute};
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
    delete desc;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                                              const void *buf, size_t size) {
    switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA: return take(&desc->trans_a, buf, size);
    case CUBLASLT_MATMUL_DESC_TRANSB: return take(&desc->trans_b, buf, size);
    case CUBLASLT_MATMUL_DESC_EPILOGUE: return take(&desc->epilogue, buf, size);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return take(&desc->bias, buf, size);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: return take(&desc->aux, buf, size);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: return take(&desc->ld_aux, buf, size);
    }
    refuse("an attribute the emulation does not know");
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *layout, cudaDataType_t type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
    if (type != CUDA_R_32F) refuse("only float32 matrices are emulated");
    *layout = new ct_emu_lt_layout{rows, cols, ld};
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
    delete layout;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *pref) {
    *pref = new ct_emu_lt_pref;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
    delete pref;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void *buf,
                                                    size_t size) {
    switch (attr) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: return take(&pref->max_workspace, buf, size);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES: return take(&pref->alignment[0], buf, size);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES: return take(&pref->alignment[1], buf, size);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES: return take(&pref->alignment[2], buf, size);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: return take(&pref->alignment[3], buf, size);
    }
    refuse("a preference the emulation does not know");
}

/* One algorithm for every valid problem, marked with the problem and what it needs (workspace,
 * alignment), which cublasLtMatmul checks. */
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t a,
                                              cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
                                              cublasLtMatrixLayout_t d, cublasLtMatmulPreference_t pref,
                                              int requested, cublasLtMatmulHeuristicResult_t *results, int *count) {
    uint64_t m, n, k;
    check_problem(op, a, b, c, d, &m, &n, &k);
    if (!pref || requested < 1 || !results || !count) refuse("no room for a result");
    uint32_t align = 256;
    for (uint32_t x : pref->alignment) align = std::min(align, x);
    if ((op->bias && alignment(op->bias) < 4) || (op->aux && alignment(op->aux) < 4))
        refuse("a bias or aux pointer not aligned to its float");
    std::memset(results, 0, sizeof *results);
    const size_t ws = std::min<uint64_t>(kAlgoWorkspace, pref->max_workspace);
    const uint64_t fields[8] = {kMagic, m, n, k, op_code(op), ws, align, (uint64_t)op->compute};
    std::memcpy(results->algo.data, fields, sizeof fields);
    results->workspaceSize = ws;
    results->state = CUBLAS_STATUS_SUCCESS;
    results->wavesCount = 1.0f;
    *count = 1;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t op, const void *alpha, const void *a,
                              cublasLtMatrixLayout_t adesc, const void *b, cublasLtMatrixLayout_t bdesc,
                              const void *beta, const void *c, cublasLtMatrixLayout_t cdesc, void *d,
                              cublasLtMatrixLayout_t ddesc, const cublasLtMatmulAlgo_t *algo, void *workspace,
                              size_t workspace_bytes, cudaStream_t) {
    uint64_t m, n, k;
    check_problem(op, adesc, bdesc, cdesc, ddesc, &m, &n, &k);
    const uint64_t *f = algo ? algo->data : nullptr;
    if (!f || f[0] != kMagic) refuse("an algorithm the heuristic did not give");
    if (f[1] != m || f[2] != n || f[3] != k || f[4] != op_code(op) || f[7] != (uint64_t)op->compute)
        refuse("an algorithm chosen for another problem");
    if (workspace_bytes < f[5] || (f[5] && !workspace)) refuse("less workspace than the algorithm needs");
    for (const void *p : {a, b, c, (const void *)d})
        if (alignment(p) < f[6]) refuse("a matrix less aligned than the heuristic was told");
    if (c != d) refuse("C other than D is not emulated");
    for (const ct_emu_lt_layout *l : {adesc, bdesc, ddesc})
        if (l->ld != (int64_t)l->rows) refuse("padded layouts are not emulated");

    /* D^T = op(B)^T op(A)^T, all row-major: the memory of op(X)'s stored matrix X is X^T, which is
     * op(X)^T as it is when op is the identity and transposed when op transposes */
    ct_tensor ta = row_major(a, adesc), tb = row_major(b, bdesc), td = row_major(d, ddesc);
    ct_emu_gemm(mode_of(op->compute), op->trans_b == CUBLAS_OP_T, op->trans_a == CUBLAS_OP_T, *(const float *)alpha,
                &tb, &ta, *(const float *)beta, &td);
    float *out = (float *)d;
    if (has_bias(op->epilogue))
        for (uint64_t j = 0; j < n; j++)
            for (uint64_t i = 0; i < m; i++) out[i + j * m] += ((const float *)op->bias)[i];
    if (has_gelu(op->epilogue)) {
        for (uint64_t j = 0; j < n; j++) std::memcpy((float *)op->aux + j * op->ld_aux, out + j * m, m * sizeof(float));
        ct_backend_for_kind(CT_DEVICE_CPU)->activation_forward(CT_ACT_GELU_TANH, &td, &td);
    }
    if (op->epilogue == CUBLASLT_EPILOGUE_BGRADB) {
        /* column j of op(B) is row j of B's memory (transposed) or column j (as it is) */
        const float *pb = (const float *)b;
        for (uint64_t j = 0; j < n; j++) {
            double sum = 0;
            for (uint64_t p = 0; p < k; p++)
                sum += op->trans_b == CUBLAS_OP_T ? pb[j + p * bdesc->ld] : pb[p + j * bdesc->ld];
            ((float *)op->bias)[j] = (float)sum;
        }
    }
    return CUBLAS_STATUS_SUCCESS;
}
