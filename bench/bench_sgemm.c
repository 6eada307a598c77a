/* sgemm throughput, the physical limit of CPU training: GFLOP/s of ct_op_gemm (the float GEMM engine's
 * kernels: the built-in ones, or OpenBLAS's or oneDNN's under CT_CPU_GEMM (backends/cpu/sgemm.c,
 * gemm_engine.c), split into a block per thread by backends/cpu/blas.c where the product is large
 * enough) at the shapes of the Fashion-MNIST MLP's forward and backward GEMMs (batch 128), at those
 * of the GPT example's linear layers and at a large square size, the engine, and the kernel set
 * OpenBLAS chose for this CPU (OPENBLAS_CORETYPE overrides its choice); and what the hardware allows
 * at the kernels' instruction-set level: the multiply-add peak of the same threads (bench/peak.h), so
 * that a rate, or a target, reads as a fraction of it.
 * Usage: bench_sgemm [THREADS]. Prints one JSON line. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "bench/peak.h"

#include "core/ops/ops.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* GFLOP/s of C[m,n] = op(A) op(B) repeated for about `seconds`. */
static double measure(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double seconds) {
    int64_t sa[2] = {ta ? k : m, ta ? m : k}, sb[2] = {tb ? n : k, tb ? k : n}, sc[2] = {m, n};
    ct_tensor a, b, c;
    ct_tensor_alloc(&a, CT_F32, CT_CPU, 2, sa);
    ct_tensor_alloc(&b, CT_F32, CT_CPU, 2, sb);
    ct_tensor_alloc(&c, CT_F32, CT_CPU, 2, sc);
    ct_op_fill(&a, 0.5);
    ct_op_fill(&b, 0.25);
    ct_op_gemm(ta, tb, 1.0, &a, &b, 0.0, &c); /* warm up */
    int reps = 0;
    double t0 = now(), t;
    do {
        ct_op_gemm(ta, tb, 1.0, &a, &b, 0.0, &c);
        reps++;
    } while ((t = now() - t0) < seconds);
    ct_tensor_free(&a);
    ct_tensor_free(&b);
    ct_tensor_free(&c);
    return 2.0 * m * n * k * reps / t * 1e-9;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 2;
    ct_set_num_threads(threads);
    /* The MLP's step: forward X W^T for each layer, dW = dY^T X, dX = dY W (784-256-128-10, batch 128). */
    const int64_t dims[3][2] = {{784, 256}, {256, 128}, {128, 10}};
    double flops = 0, secs = 0;
    for (int l = 0; l < 3; l++) {
        int64_t in = dims[l][0], out = dims[l][1];
        double f = 2.0 * 128 * in * out;
        double g1 = measure(false, true, 128, out, in, 0.2);
        double g2 = measure(true, false, out, in, 128, 0.2);
        double g3 = l ? measure(false, false, 128, in, out, 0.2) : 0;
        flops += f * (l ? 3 : 2);
        secs += f / (g1 * 1e9) + f / (g2 * 1e9) + (l ? f / (g3 * 1e9) : 0);
    }
    /* The GPT example's linear layers and LM head (examples/configs/fortunes_gpt.json: 4096 rows of batch
     * 32 x context 128, width 128, vocabulary 257): forward, weight gradient, input gradient. */
    const int64_t gpt[5][2] = {{128, 384}, {128, 128}, {128, 512}, {512, 128}, {128, 257}};
    double gpt_flops = 0, gpt_secs = 0;
    for (int l = 0; l < 5; l++) {
        int64_t in = gpt[l][0], out = gpt[l][1];
        double f = 2.0 * 4096 * in * out;
        gpt_flops += 3 * f;
        gpt_secs += f / (measure(false, true, 4096, out, in, 0.2) * 1e9) +
                    f / (measure(true, false, out, in, 4096, 0.2) * 1e9) +
                    f / (measure(false, false, 4096, in, out, 0.2) * 1e9);
    }
    double square = measure(false, false, 1024, 1024, 1024, 1.0);
    double peak = peak_gflops(ct_cpu_isa_level(), threads);
    printf("{\"threads\": %d, \"gemm_engine\": \"%s\", \"openblas_core\": \"%s\", \"sgemm_gflops_mlp_shapes\": %.1f, "
           "\"sgemm_gflops_gpt_shapes\": %.1f, \"sgemm_gflops_1024\": %.1f, \"level\": \"%s\", "
           "\"peak_gflops\": %.1f}\n",
           threads, ct_cpu_gemm_engine(), openblas_get_corename(), flops / secs * 1e-9, gpt_flops / gpt_secs * 1e-9,
           square, ct_cpu_isa(), peak);
    return 0;
}
