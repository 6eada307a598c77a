/* Which copy of the CPU kernels runs: the instruction-set level, chosen when the library loads.
 *
 * An x86-64 build (without CTRAINER_NATIVE) compiles the kernel files for baseline x86-64 and again
 * for x86-64-v2 (SSE4.2), v3 (AVX2, FMA) and v4 (AVX-512), each copy with its own table
 * (isa_names.h), as OpenBLAS and oneDNN keep a kernel set per CPU generation: one binary then runs
 * on any x86-64 machine and takes that machine's best path. The best level the CPU offers is asked
 * of cpuid (through the compiler's runtime, which also checks that the operating system saves the
 * wider registers); CT_CPU_ISA=v1|v2|v3|v4 forces a lower one, so that every level can be tested
 * and benchmarked on one machine. A value the CPU cannot honour leaves the best level in place and
 * is reported by ct_cpu_isa_check (the CLI and ct_trainer_init stop on it). Compiled once, at the
 * baseline flags: it must run on any x86-64 CPU. */
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_impl.h"
#include "core/ops/backend.h"
#include "core/ops/ops.h"

#ifdef CT_CPU_ISA_MULTI
extern const ct_backend_ops ct_backend_cpu_v2, ct_backend_cpu_v3, ct_backend_cpu_v4;
#define CT_CPU_ISA_TOP 4
#else
#define CT_CPU_ISA_TOP 0
#endif

/* Level 0 is the one copy of a build without levels. */
static const char *const level_names[5] = {
#if defined(CT_CPU_ISA_NATIVE)
    "native (the build machine's -march=native)",
#else
    "the build's target",
#endif
    "x86-64 (SSE2)", "x86-64-v2 (SSE4.2)", "x86-64-v3 (AVX2, FMA)", "x86-64-v4 (AVX-512)"};

static const ct_backend_ops *level_table(int level) {
#ifdef CT_CPU_ISA_MULTI
    static const ct_backend_ops *const tables[5] = {&ct_backend_cpu, &ct_backend_cpu, &ct_backend_cpu_v2,
                                                    &ct_backend_cpu_v3, &ct_backend_cpu_v4};
    return tables[level];
#else
    (void)level;
    return &ct_backend_cpu;
#endif
}

const char *ct_cpu_isa_level_name(int level) {
    return level >= 0 && level <= 4 ? level_names[level] : "unknown level";
}

/* The best level this CPU and operating system run (0 in a build without levels). */
static int cpu_best_level(void) {
#if defined(CT_CPU_ISA_MULTI) && (defined(__x86_64__) || defined(__i386__))
    __builtin_cpu_init();
#define HAS(f) __builtin_cpu_supports(f)
    /* the levels' defining features (the x86-64 psABI); the few not asked for (cx16, lahf, movbe,
     * lzcnt, and f16c, which clang's builtin does not know) come with these on every CPU made */
    if (!(HAS("sse3") && HAS("ssse3") && HAS("sse4.1") && HAS("sse4.2") && HAS("popcnt"))) return 1;
    if (!(HAS("avx") && HAS("avx2") && HAS("bmi") && HAS("bmi2") && HAS("fma"))) return 2;
    if (!(HAS("avx512f") && HAS("avx512bw") && HAS("avx512cd") && HAS("avx512dq") && HAS("avx512vl"))) return 3;
    return 4;
#undef HAS
#else
    return CT_CPU_ISA_TOP;
#endif
}

ct_status ct_cpu_isa_choose(const char *want, int best, int *level) {
    *level = best;
    if (!want || !*want) return CT_OK;
    static const char *const spelled[5] = {NULL, "x86-64", "x86-64-v2", "x86-64-v3", "x86-64-v4"};
    int asked = 0;
    for (int l = 1; l <= 4; l++) {
        char short_name[3] = {'v', (char)('0' + l), '\0'};
        if (strcmp(want, short_name) == 0 || strcmp(want, spelled[l]) == 0) asked = l;
    }
    if (!asked)
        return ct_error(CT_ERR_INVALID_ARG,
                        "CT_CPU_ISA='%s' is not a level: use v1 (x86-64, SSE2), v2 (SSE4.2), v3 (AVX2, FMA) or "
                        "v4 (AVX-512), or unset it for the best this CPU offers",
                        want);
    if (best == 0)
        return ct_error(CT_ERR_INVALID_ARG,
                        "CT_CPU_ISA=%s: this build has one copy of its kernels, for %s; build without "
                        "CTRAINER_NATIVE on x86-64 to choose levels, or unset CT_CPU_ISA",
                        want, level_names[0]);
    if (asked > best)
        return ct_error(CT_ERR_INVALID_ARG,
                        "CT_CPU_ISA=%s asks for %s, which this CPU lacks: it offers up to v%d, %s; name v1 to v%d "
                        "or unset it",
                        want, level_names[asked], best, level_names[best], best);
    *level = asked;
    return CT_OK;
}

static int chosen_level;
static const char *forced; /* CT_CPU_ISA as read when the library loaded */
bool ct_cpu_sse_on_avx;

/* Whether the CPU and the operating system run AVX: the v2 copy of the kernels (legacy SSE) then
 * clears the registers' upper halves where it starts its work (ct_cpu_sse_work_start, cpu_impl.h). */
static bool cpu_has_avx(void) {
#if defined(CT_CPU_ISA_MULTI) && (defined(__x86_64__) || defined(__i386__))
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx");
#else
    return false;
#endif
}

const ct_backend_ops *ct_backend_cpu_select(void) {
    forced = getenv("CT_CPU_ISA");
    int best = cpu_best_level(), level;
    if (ct_cpu_isa_choose(forced, best, &level) != CT_OK) ct_error_clear(); /* reported by ct_cpu_isa_check */
    chosen_level = level;
    ct_cpu_sse_on_avx = level == 2 && cpu_has_avx();
    ct_cpu_gemm_engine_init(level);
    return level_table(level);
}

const char *ct_cpu_isa(void) { return level_names[chosen_level]; }

int ct_cpu_isa_level(void) { return chosen_level; }

int ct_cpu_isa_best(void) { return cpu_best_level(); }

ct_status ct_cpu_isa_check(void) {
    int level;
    CT_TRY(ct_cpu_isa_choose(forced, cpu_best_level(), &level));
    return ct_cpu_gemm_engine_check(chosen_level);
}
