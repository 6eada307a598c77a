/* The fused causal attention's speed on one device: ct_op_causal_attention_forward and _backward
 * (core/ops/ops_attn.h) on float32 qkv [B, T, 3 H D] under a math mode (on CUDA: float32 and tf32
 * run the CUDA cores' kernels, bf16 and fp16 the tensor cores'; the CPU computes in float32 only).
 * FLOPs are counted as FlashAttention counts them: 4 B H T^2 D for the forward's two products, halved
 * for the causal mask, and 2.5 times that for the backward's five. bench/attention.py runs it beside
 * PyTorch's scaled_dot_product_attention.
 * Usage: bench_attention DEVICE B T H D [MATH [SECONDS]] (MATH: float32, tf32, bf16, fp16). Prints
 * one JSON line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/status.h"
#include "core/ops/ops.h"
#include "core/ops/ops_attn.h"
#include "core/rng.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* A tensor on dev holding uniform values in [-1, 1). */
static ct_tensor random_on(ct_device dev, int ndim, const int64_t *shape, ct_rng *rng) {
    ct_tensor host, t;
    if (ct_tensor_alloc(&host, CT_F32, CT_CPU, ndim, shape) != CT_OK ||
        ct_tensor_alloc(&t, CT_F32, dev, ndim, shape) != CT_OK) {
        fprintf(stderr, "bench_attention: %s\n", ct_last_error());
        exit(1);
    }
    float *h = host.data;
    for (int64_t i = 0, n = ct_tensor_numel(&host); i < n; i++) h[i] = (float)(2.0 * ct_rng_uniform(rng) - 1.0);
    if (ct_tensor_copy_to(&t, &host) != CT_OK) {
        fprintf(stderr, "bench_attention: %s\n", ct_last_error());
        exit(1);
    }
    ct_tensor_free(&host);
    return t;
}

/* Waits for the device's queued work: a copy to the host has finished when it returns. */
static void wait_for(const ct_tensor *t) {
    float one;
    ct_device_copy(&one, CT_CPU, t->data, t->device, sizeof one);
}

static ct_math_mode parse_math(const char *s) {
    for (int m = CT_MATH_F32; m <= CT_MATH_FP16; m++)
        if (strcmp(s, ct_math_mode_name((ct_math_mode)m)) == 0) return (ct_math_mode)m;
    fprintf(stderr, "bench_attention: math mode '%s' is none of float32, tf32, bf16, fp16\n", s);
    exit(2);
}

int main(int argc, char **argv) {
    if (argc < 6) {
        fprintf(stderr, "usage: bench_attention DEVICE B T H D [MATH [SECONDS]]\n");
        return 2;
    }
    ct_device dev;
    if (ct_device_parse(argv[1], &dev) != CT_OK || ct_device_check(dev) != CT_OK) {
        fprintf(stderr, "bench_attention: %s\n", ct_last_error());
        return 1;
    }
    const int64_t B = atoll(argv[2]), T = atoll(argv[3]), H = atoll(argv[4]), D = atoll(argv[5]);
    const ct_math_mode math = argc > 6 ? parse_math(argv[6]) : CT_MATH_F32;
    const double seconds = argc > 7 ? atof(argv[7]) : 2.0;
    if (B < 1 || T < 1 || H < 1 || D < 1 || D > CT_FUSED_ATTENTION_MAX_HEAD_DIM) {
        fprintf(stderr, "bench_attention: B, T, H at least 1 and D from 1 to %d\n", CT_FUSED_ATTENTION_MAX_HEAD_DIM);
        return 2;
    }
    if (ct_device_set_math_mode(dev, math) != CT_OK) {
        fprintf(stderr, "bench_attention: %s\n", ct_last_error());
        return 1;
    }
    ct_rng rng;
    ct_rng_init(&rng, 1, 0, CT_RNG_USER);
    const int64_t C = H * D, sq[3] = {B, T, 3 * C}, sy[3] = {B, T, C}, sl[3] = {B, H, T};
    const int64_t sw[1] = {ct_causal_attention_workspace_numel(T)};
    ct_tensor qkv = random_on(dev, 3, sq, &rng), dy = random_on(dev, 3, sy, &rng), y = random_on(dev, 3, sy, &rng);
    ct_tensor lse = random_on(dev, 3, sl, &rng), dqkv = random_on(dev, 3, sq, &rng), ws = random_on(dev, 1, sw, &rng);
    double t_fwd = 0, t_bwd = 0;
    int reps = 0;
    for (int warm = 0; warm < 2; warm++) { /* the first round tunes, allocates and loads kernels */
        ct_op_causal_attention_forward(&qkv, H, &lse, &y, &ws);
        ct_op_causal_attention_backward(&qkv, H, &y, &lse, &dy, &dqkv, &ws);
    }
    wait_for(&dqkv);
    do {
        double t0 = now();
        ct_op_causal_attention_forward(&qkv, H, &lse, &y, &ws);
        wait_for(&y);
        double t1 = now();
        ct_op_causal_attention_backward(&qkv, H, &y, &lse, &dy, &dqkv, &ws);
        wait_for(&dqkv);
        t_fwd += t1 - t0;
        t_bwd += now() - t1;
        reps++;
    } while (t_fwd + t_bwd < seconds);
    const double fwd_flops = 4.0 * B * H * T * T * D / 2, bwd_flops = 2.5 * fwd_flops;
    char name[32];
    printf("{\"device\": \"%s\", \"math\": \"%s\", \"B\": %lld, \"T\": %lld, \"H\": %lld, \"D\": %lld, \"reps\": %d, "
           "\"forward_ms\": %.4f, \"backward_ms\": %.4f, \"forward_tflops\": %.3f, \"backward_tflops\": %.3f}\n",
           ct_device_str(dev, name, sizeof name), ct_math_mode_name(math), (long long)B, (long long)T, (long long)H,
           (long long)D, reps, 1e3 * t_fwd / reps, 1e3 * t_bwd / reps, fwd_flops * reps / t_fwd * 1e-12,
           bwd_flops * reps / t_bwd * 1e-12);
    ct_tensor *all[] = {&qkv, &dy, &y, &lse, &dqkv, &ws};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) ct_tensor_free(all[i]);
    return 0;
}
