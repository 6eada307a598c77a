/* The engine of the CPU's float GEMMs, chosen once when the library loads: the built-in kernels by
 * default (sgemm.c, whose ct_cpu_sgemm every float GEMM of the kernels goes through), OpenBLAS's sgemm
 * under CT_CPU_GEMM=openblas, oneDNN's where the build has it (CTRAINER_ONEDNN,
 * cmake/CtrainerOneDNN.cmake) under CT_CPU_GEMM=onednn; ct_cpu_sgemm_library calls the chosen
 * library. float64 GEMMs stay with OpenBLAS, which the built-in engine and oneDNN lack.
 *
 * The libraries stay as opt-ins for comparison and for a user who trusts them over ours. oneDNN's
 * JIT sgemm rounds a row of C by the kernel the call's row count selects (below 16 rows, and from
 * about 200 rows at some shapes, bench/README.md), so a sample's outputs change in their last bits
 * between evaluation batch sizes (unit.test_trainer checks that they do not; on oneDNN it fails at
 * batches 1 and 7); the independence from the world size holds on every engine. oneDNN's JIT
 * kernels start at SSE4.1, so level v1 (SSE2) cannot take it. oneDNN is capped at the instruction
 * set of the level the CPU kernels run at (dnnl_set_max_cpu_isa, before its first use), so that
 * CT_CPU_ISA steers it as it steers ours. The library is opened only when asked for (onednn_open).
 * ct_cpu_isa_check reports a CT_CPU_GEMM value that cannot be honoured, and a library that cannot
 * be opened.
 *
 * Threads: every engine runs single-threaded inside a parallel region (oneDNN does not nest, and we
 * link OpenBLAS's OpenMP build), where blas.c's split of a product into a block per thread calls
 * it. Compiled once, at the baseline flags, beside isa.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_impl.h"
#include "core/ops/backend.h"

#ifdef CT_HAVE_ONEDNN
#include <dlfcn.h>
#include <oneapi/dnnl/dnnl.h>
#endif

static ct_cpu_gemm_kind in_use; /* the engine */
static const char *asked;     /* CT_CPU_GEMM as read when the library loaded */
static char description[160] = "float GEMMs: built-in"; /* for ct_cpu_gemm_engine */
static char load_failure[400]; /* why oneDNN, asked for, could not be opened */

ct_status ct_cpu_gemm_engine_choose(const char *want, int level, ct_cpu_gemm_kind *engine) {
    *engine = CT_GEMM_BUILTIN;
    if (!want || !*want || strcmp(want, "builtin") == 0) return CT_OK;
    if (strcmp(want, "openblas") == 0) {
        *engine = CT_GEMM_OPENBLAS;
        return CT_OK;
    }
    if (strcmp(want, "onednn") != 0)
        return ct_error(CT_ERR_INVALID_ARG,
                        "CT_CPU_GEMM='%s' is not a GEMM engine: use builtin, openblas or onednn, or unset it", want);
#ifndef CT_HAVE_ONEDNN
    (void)level;
    return ct_error(CT_ERR_INVALID_ARG,
                    "CT_CPU_GEMM=onednn: this build has no oneDNN (configure with libdnnl-dev installed, or "
                    "-DCTRAINER_ONEDNN=ON); unset it for the built-in engine");
#else
    if (level == 1) /* level 0, a build without levels, runs its target's kernels: oneDNN picks its own */
        return ct_error(CT_ERR_INVALID_ARG,
                        "CT_CPU_GEMM=onednn: oneDNN's kernels need SSE4.1, above the level the CPU kernels run at "
                        "(x86-64, SSE2); unset it, or CT_CPU_ISA");
    *engine = CT_GEMM_ONEDNN;
    return CT_OK;
#endif
}

#ifdef CT_HAVE_ONEDNN
/* oneDNN's functions we call, from the library opened when CT_CPU_GEMM=onednn asks for it (CMake
 * links nothing of it: cmake/CtrainerOneDNN.cmake). It is opened into the global scope and the
 * names are looked up there, so a preloaded definition comes first, as with a linked library
 * (tests/oracle/kill_shim.c counts dnnl_sgemm's calls that way). */
static struct {
    typeof(dnnl_sgemm) *sgemm;
    typeof(dnnl_set_max_cpu_isa) *set_max_cpu_isa;
    typeof(dnnl_get_effective_cpu_isa) *get_effective_cpu_isa;
    typeof(dnnl_version) *version;
} dnnl;

static bool onednn_open(void) {
    if (!dlopen(CT_ONEDNN_SONAME, RTLD_NOW | RTLD_GLOBAL)) {
        snprintf(load_failure, sizeof load_failure, "cannot open %s (%s); install libdnnl2, or unset it",
                 CT_ONEDNN_SONAME, dlerror());
        return false;
    }
    dnnl.sgemm = (typeof(dnnl.sgemm))dlsym(RTLD_DEFAULT, "dnnl_sgemm");
    dnnl.set_max_cpu_isa = (typeof(dnnl.set_max_cpu_isa))dlsym(RTLD_DEFAULT, "dnnl_set_max_cpu_isa");
    dnnl.get_effective_cpu_isa = (typeof(dnnl.get_effective_cpu_isa))dlsym(RTLD_DEFAULT, "dnnl_get_effective_cpu_isa");
    dnnl.version = (typeof(dnnl.version))dlsym(RTLD_DEFAULT, "dnnl_version");
    if (!dnnl.sgemm || !dnnl.set_max_cpu_isa || !dnnl.get_effective_cpu_isa || !dnnl.version) {
        snprintf(load_failure, sizeof load_failure, "%s lacks oneDNN's C API (dnnl_sgemm and friends)",
                 CT_ONEDNN_SONAME);
        return false;
    }
    return true;
}

static const char *isa_name(dnnl_cpu_isa_t isa) {
    switch (isa) {
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    default: return "another instruction set";
    }
}

/* Caps oneDNN at the instruction set of the CPU kernels' level (0: a build without levels, whose
 * kernels are the build target's; oneDNN then takes the CPU's best too). */
static void cap_onednn(int level) {
    static const dnnl_cpu_isa_t caps[5] = {dnnl_cpu_isa_all, dnnl_cpu_isa_sse41, dnnl_cpu_isa_sse41,
                                           dnnl_cpu_isa_avx2, dnnl_cpu_isa_avx512_core};
    /* It fails only once oneDNN has run (in a program that used it before us): it keeps its ISA. */
    if (level >= 2 && level <= 4) (void)dnnl.set_max_cpu_isa(caps[level]);
}
#endif

void ct_cpu_gemm_engine_init(int level) {
    asked = getenv("CT_CPU_GEMM");
    if (ct_cpu_gemm_engine_choose(asked, level, &in_use) != CT_OK)
        ct_error_clear(); /* reported by ct_cpu_isa_check; the default engine runs meanwhile */
    if (in_use == CT_GEMM_OPENBLAS) snprintf(description, sizeof description, "float GEMMs: OpenBLAS");
#ifdef CT_HAVE_ONEDNN
    if (in_use == CT_GEMM_ONEDNN && !onednn_open()) in_use = CT_GEMM_BUILTIN; /* ct_cpu_isa_check reports it */
    if (in_use == CT_GEMM_ONEDNN) {
        cap_onednn(level);
        const dnnl_version_t *v = dnnl.version();
        snprintf(description, sizeof description, "float GEMMs: oneDNN %d.%d.%d sgemm (%s)", v->major, v->minor,
                 v->patch, isa_name(dnnl.get_effective_cpu_isa()));
    }
#endif
}

ct_status ct_cpu_gemm_engine_check(int level) {
    ct_cpu_gemm_kind want;
    CT_TRY(ct_cpu_gemm_engine_choose(asked, level, &want));
    if (load_failure[0]) return ct_error(CT_ERR_INVALID_ARG, "CT_CPU_GEMM=onednn: %s", load_failure);
    return CT_OK;
}

const char *ct_cpu_gemm_engine(void) { return description; }

ct_cpu_gemm_kind ct_cpu_gemm_engine_kind(void) { return in_use; }

void ct_cpu_sgemm_library(CBLAS_ORDER order, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, float alpha,
                          const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc) {
#ifdef CT_HAVE_ONEDNN
    if (in_use == CT_GEMM_ONEDNN) {
        /* oneDNN's sgemm is row-major, as every caller here is */
        if (order != CblasRowMajor) ct_abort_at(__FILE__, __LINE__, "ct_cpu_sgemm: row-major only");
        dnnl_status_t s = dnnl.sgemm(ta == CblasNoTrans ? 'N' : 'T', tb == CblasNoTrans ? 'N' : 'T', m, n, k, alpha, a,
                                     lda, b, ldb, beta, c, ldc);
        /* it checks only what CBLAS checks (sizes, leading dimensions): a failure is a caller's bug */
        if (s != dnnl_success) ct_abort_at(__FILE__, __LINE__, "oneDNN sgemm failed (status %d)", (int)s);
        return;
    }
#endif
    cblas_sgemm(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
