/* The multiply-add peak of a CPU kernel level: GFLOP/s of the level's widest multiply-adds on
 * independent registers (no memory, no dependency a core cannot overlap), on every thread of a
 * parallel region at once. It is the ceiling of any float GEMM at that level, ours or a peer's,
 * so that a benchmark can say how close a rate is to what the hardware allows, and when a target
 * would take more than it.
 *
 * Each level's loop is compiled for that level alone (GCC's target attribute), as the kernels are,
 * and run only where the library runs that level: x86-64-v4 with 512-bit FMAs, v3 with 256-bit
 * FMAs, v2 and below with SSE multiplies and adds (no FMA there: a v2 GEMM issues both). Twelve FMA
 * chains a thread: enough to cover an FMA's latency on two pipes (4 cycles x 2). At SSE fourteen
 * chains, each a multiply then an add, as a GEMM's accumulator takes them: separate multiply and add
 * chains left the add pipes a fifth idle on a Zen 5 (53 GFLOP/s a thread against 62-64). A build without levels (level 0: -march=native, or another
 * architecture) runs a loop of the compiler's vectors for what the benchmark was compiled for. */
#ifndef CT_BENCH_PEAK_H
#define CT_BENCH_PEAK_H

#include <omp.h>
#include <stdint.h>
#include <time.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#define PEAK_CHAINS 12
#define PEAK_STEPS (1 << 20) /* multiply-adds of each chain between looks at the clock */

static double peak_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Each loop runs PEAK_STEPS steps of its chains and returns their sum (used, so not optimised away)
 * and its floating-point operations through *flops. The multiplier stays just above 1 and the
 * addend small: no value overflows or becomes subnormal in any run length measured here. */
#if defined(__x86_64__)
__attribute__((target("avx512f"))) static float peak_steps_v4(double *flops) {
    __m512 acc[PEAK_CHAINS];
    const __m512 mul = _mm512_set1_ps(1.0000001f), add = _mm512_set1_ps(1e-7f);
    for (int i = 0; i < PEAK_CHAINS; i++) acc[i] = _mm512_set1_ps((float)i);
    for (int s = 0; s < PEAK_STEPS; s++)
#pragma GCC unroll 12 /* the chains in registers: never an array in memory */
        for (int i = 0; i < PEAK_CHAINS; i++) acc[i] = _mm512_fmadd_ps(acc[i], mul, add);
    __m512 sum = acc[0];
    for (int i = 1; i < PEAK_CHAINS; i++) sum = _mm512_add_ps(sum, acc[i]);
    *flops = 2.0 * 16 * PEAK_CHAINS * PEAK_STEPS;
    return _mm512_reduce_add_ps(sum);
}

__attribute__((target("avx2,fma"))) static float peak_steps_v3(double *flops) {
    __m256 acc[PEAK_CHAINS];
    const __m256 mul = _mm256_set1_ps(1.0000001f), add = _mm256_set1_ps(1e-7f);
    for (int i = 0; i < PEAK_CHAINS; i++) acc[i] = _mm256_set1_ps((float)i);
    for (int s = 0; s < PEAK_STEPS; s++)
#pragma GCC unroll 12 /* the chains in registers: never an array in memory */
        for (int i = 0; i < PEAK_CHAINS; i++) acc[i] = _mm256_fmadd_ps(acc[i], mul, add);
    float lanes[8], total = 0;
    for (int i = 0; i < PEAK_CHAINS; i++) {
        _mm256_storeu_ps(lanes, acc[i]);
        for (int l = 0; l < 8; l++) total += lanes[l];
    }
    *flops = 2.0 * 8 * PEAK_CHAINS * PEAK_STEPS;
    return total;
}

/* SSE: each of 14 chains a multiply then an add (14 of the 16 registers, the two constants the rest). */
#define PEAK_SSE_CHAINS 14
static float peak_steps_sse(double *flops) {
    __m128 acc[PEAK_SSE_CHAINS];
    const __m128 mul = _mm_set1_ps(1.0000001f), add = _mm_set1_ps(1e-7f);
    for (int i = 0; i < PEAK_SSE_CHAINS; i++) acc[i] = _mm_set1_ps((float)i);
    for (int s = 0; s < PEAK_STEPS; s++)
#pragma GCC unroll 14 /* the chains in registers: never an array in memory */
        for (int i = 0; i < PEAK_SSE_CHAINS; i++) acc[i] = _mm_add_ps(_mm_mul_ps(acc[i], mul), add);
    float lanes[4], total = 0;
    for (int i = 0; i < PEAK_SSE_CHAINS; i++) {
        _mm_storeu_ps(lanes, acc[i]);
        for (int l = 0; l < 4; l++) total += lanes[l];
    }
    *flops = 2.0 * 4 * PEAK_SSE_CHAINS * PEAK_STEPS; /* 4 lanes, a multiply and an add per chain and step */
    return total;
}
#endif

/* Level 0: the compiler's own vectors of the build's target, a multiply then an add in one
 * expression (contracted to an FMA where the target has one and the compiler contracts). */
static float peak_steps_native(double *flops) {
#if defined(__AVX512F__)
    enum { lanes = 16 };
#elif defined(__AVX__)
    enum { lanes = 8 };
#else
    enum { lanes = 4 };
#endif
    typedef float vec __attribute__((vector_size(lanes * 4)));
    const vec mul = (vec){0} + 1.0000001f, add = (vec){0} + 1e-7f; /* a scalar operand fills every lane */
    vec acc[PEAK_CHAINS];
    for (int i = 0; i < PEAK_CHAINS; i++) acc[i] = (vec){0} + (float)i;
    for (int s = 0; s < PEAK_STEPS; s++)
#pragma GCC unroll 12 /* the chains in registers: never an array in memory */
        for (int i = 0; i < PEAK_CHAINS; i++) acc[i] = acc[i] * mul + add;
    float total = 0;
    for (int i = 0; i < PEAK_CHAINS; i++)
        for (int l = 0; l < lanes; l++) total += acc[i][l];
    *flops = 2.0 * lanes * PEAK_CHAINS * PEAK_STEPS;
    return total;
}

/* GFLOP/s of `threads` threads each running the loop of `level` (ct_cpu_isa_level's numbering) for
 * about a second, together. */
static double peak_gflops(int level, int threads) {
    double flops_all = 0, seconds = 0;
    float kept = 0;
#pragma omp parallel num_threads(threads) reduction(+ : flops_all, kept) reduction(max : seconds)
    {
        double t0 = peak_now(), t = 0, flops = 0, f;
        float keep = 0;
        do {
#if defined(__x86_64__)
            keep += level >= 4   ? peak_steps_v4(&f)
                    : level == 3 ? peak_steps_v3(&f)
                    : level >= 1 ? peak_steps_sse(&f)
                                 : peak_steps_native(&f);
#else
            (void)level;
            keep += peak_steps_native(&f);
#endif
            flops += f;
        } while ((t = peak_now() - t0) < 1.0);
        flops_all += flops;
        seconds = t;
        kept += keep;
    }
    volatile float sink = kept; /* the sums are used: the loops stay */
    (void)sink;
    return flops_all / seconds * 1e-9;
}

#endif
