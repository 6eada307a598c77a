/* The CPU kernels' instruction-set level (backends/cpu/isa.c): the rule that turns CT_CPU_ISA and
 * the CPU's best level into the level that runs, with its errors, for every best level a CPU may
 * have (so that a machine with AVX-512 checks what an AVX2 or SSE4.2 machine would be told); the
 * rule that picks the float GEMMs' engine (CT_CPU_GEMM, backends/cpu/gemm_engine.c) at each level;
 * and that the table registered for the CPU is the chosen level's, which its description names
 * with the engine.
 * Run once per level the machine offers under the isa label (tests/isa/at_level.sh), this also
 * checks that CT_CPU_ISA reaches the dispatch. */
#include <stdlib.h>
#include <string.h>

#include "core/ops/backend.h"
#include "core/ops/ops.h"
#include "testlib.h"

static void test_choose(void) {
    int level = -1;
    for (int best = 1; best <= 4; best++) {
        CHECK_OK(ct_cpu_isa_choose(NULL, best, &level));
        CHECK(level == best, "unset: the best level %d, not %d", best, level);
        CHECK_OK(ct_cpu_isa_choose("", best, &level));
        CHECK(level == best, "empty: the best level %d, not %d", best, level);
        for (int want = 1; want <= 4; want++) {
            char v[4], spelled[16];
            snprintf(v, sizeof v, "v%d", want);
            snprintf(spelled, sizeof spelled, want == 1 ? "x86-64" : "x86-64-v%d", want);
            if (want <= best) {
                CHECK_OK(ct_cpu_isa_choose(v, best, &level));
                CHECK(level == want, "%s on a v%d CPU runs v%d, not %d", v, best, want, level);
                level = -1;
                CHECK_OK(ct_cpu_isa_choose(spelled, best, &level));
                CHECK(level == want, "%s on a v%d CPU runs v%d, not %d", spelled, best, want, level);
            } else {
                char best_name[4];
                snprintf(best_name, sizeof best_name, "v%d", best);
                CHECK_ERR(ct_cpu_isa_choose(v, best, &level), CT_ERR_INVALID_ARG, "CT_CPU_ISA=", v, "lacks",
                          best_name, ct_cpu_isa_level_name(best));
                CHECK(level == best, "a level above the CPU's leaves its best, %d, not %d", best, level);
            }
        }
    }
    /* names that are no level: a clear list of the valid ones, never a guess */
    const char *bad[] = {"v0", "v5", "avx2", "V3", "v3 ", "x86-64-v1", "native", "3"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        level = -1;
        CHECK_ERR(ct_cpu_isa_choose(bad[i], 4, &level), CT_ERR_INVALID_ARG, bad[i], "not a level", "v1", "v4");
        CHECK(level == 4, "'%s' leaves the best level, not %d", bad[i], level);
    }
    /* a build with one copy of its kernels (-march=native, other architectures) has nothing to choose */
    CHECK_ERR(ct_cpu_isa_choose("v2", 0, &level), CT_ERR_INVALID_ARG, "CT_CPU_ISA=v2", "one copy");
    CHECK_OK(ct_cpu_isa_choose(NULL, 0, &level));
    CHECK(level == 0, "a build without levels runs level 0, not %d", level);
}

/* The float GEMMs' engine for every level and CT_CPU_GEMM value: the built-in one by default and on
 * request, OpenBLAS on request; oneDNN on request where the build has it, except at level 1 (its
 * kernels need SSE4.1). */
static void test_gemm_engine_choose(void) {
#ifdef CT_HAVE_ONEDNN
    const bool built = true;
#else
    const bool built = false;
#endif
    for (int level = 0; level <= 4; level++) {
        const char *unset[] = {NULL, "", "builtin"};
        for (size_t i = 0; i < sizeof unset / sizeof *unset; i++) {
            ct_cpu_gemm_kind engine = CT_GEMM_ONEDNN;
            CHECK_OK(ct_cpu_gemm_engine_choose(unset[i], level, &engine));
            CHECK(engine == CT_GEMM_BUILTIN, "'%s' at level %d runs the built-in engine",
                  unset[i] ? unset[i] : "(unset)", level);
        }
        ct_cpu_gemm_kind engine = CT_GEMM_BUILTIN;
        CHECK_OK(ct_cpu_gemm_engine_choose("openblas", level, &engine));
        CHECK(engine == CT_GEMM_OPENBLAS, "openblas at level %d runs OpenBLAS", level);
        if (built && level != 1) {
            CHECK_OK(ct_cpu_gemm_engine_choose("onednn", level, &engine));
            CHECK(engine == CT_GEMM_ONEDNN, "onednn at level %d runs oneDNN", level);
        } else {
            engine = CT_GEMM_ONEDNN;
            CHECK_ERR(ct_cpu_gemm_engine_choose("onednn", level, &engine), CT_ERR_INVALID_ARG, "CT_CPU_GEMM=onednn",
                      built ? "SSE4.1" : "no oneDNN");
            CHECK(engine == CT_GEMM_BUILTIN, "an engine the build or level lacks leaves the built-in one at level %d",
                  level);
        }
        const char *bad[] = {"OpenBLAS", "mkl", "onednn ", "blas", "1", "built-in"};
        for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
            engine = CT_GEMM_ONEDNN;
            CHECK_ERR(ct_cpu_gemm_engine_choose(bad[i], level, &engine), CT_ERR_INVALID_ARG, bad[i],
                      "not a GEMM engine", "builtin", "openblas", "onednn");
            CHECK(engine == CT_GEMM_BUILTIN, "'%s' leaves the built-in engine at level %d", bad[i], level);
        }
    }
}

/* This process: the level CT_CPU_ISA asked for (the isa label's runs), else the CPU's best; the
 * registered table is that level's and says so. */
static void test_this_process(void) {
    const char *want = getenv("CT_CPU_ISA");
    int expect = -1;
    if (ct_cpu_isa_choose(want, ct_cpu_isa_best(), &expect) != CT_OK) {
        CHECK_ERR(ct_cpu_isa_check(), CT_ERR_INVALID_ARG, "CT_CPU_ISA");
    } else {
        CHECK_OK(ct_cpu_isa_check());
    }
    CHECK(ct_cpu_isa_level() == expect, "running level %d, expected %d (CT_CPU_ISA=%s)", ct_cpu_isa_level(), expect,
          want ? want : "(unset)");
    CHECK(strcmp(ct_cpu_isa(), ct_cpu_isa_level_name(ct_cpu_isa_level())) == 0, "ct_cpu_isa names the level");
    const ct_backend_ops *cpu = ct_backend_for_kind(CT_DEVICE_CPU);
    char what[512] = "";
    cpu->describe(0, what, sizeof what);
    char kernels[128];
    snprintf(kernels, sizeof kernels, "kernels %s", ct_cpu_isa());
    CHECK(strstr(what, kernels) != NULL, "the registered CPU table describes '%s': %s", kernels, what);
    /* and the GEMM engine CT_CPU_GEMM asked for at that level, which the description names too */
    ct_cpu_gemm_kind engine;
    if (ct_cpu_gemm_engine_choose(getenv("CT_CPU_GEMM"), expect, &engine) != CT_OK) ct_error_clear();
    static const char *const names[] = {"built-in", "OpenBLAS", "oneDNN"};
    CHECK(strstr(ct_cpu_gemm_engine(), names[engine]) != NULL, "engine '%s', expected %s", ct_cpu_gemm_engine(),
          names[engine]);
    CHECK(strstr(what, ct_cpu_gemm_engine()) != NULL, "the CPU table names the engine: %s", what);
    const bool onednn = engine == CT_GEMM_ONEDNN;
    /* oneDNN capped at the level's instruction set (CT_CPU_ISA steers it too) */
    static const char *const caps[5] = {NULL, NULL, "(sse41)", "(avx2)", "(avx512_core)"};
    if (onednn && expect >= 2)
        CHECK(strstr(ct_cpu_gemm_engine(), caps[expect]) != NULL, "level %d: oneDNN runs %s, expected %s", expect,
              ct_cpu_gemm_engine(), caps[expect]);
}

int main(void) {
    ct_test_begin("test_cpu_isa");
    test_choose();
    test_gemm_engine_choose();
    test_this_process();
    return ct_test_finish();
}
