/* Fused optimizer updates and the gradient norm on the GPU against the CPU, through the public
 * ct_op_* entry points (so their CUDA dispatch is tested too).
 *
 * Optimizers: 20 steps of SGD (plain, weight decay, momentum with and without dampening, nesterov)
 * and Adam / AdamW (L2 or decoupled decay, with and without amsgrad, default and random betas), on a
 * random flat range (odd sizes, one above the CPU's OpenMP threshold), fresh random gradients each
 * step fed to both backends, float32 and float64. Parameters and every state buffer are compared
 * after the 20 steps: float32 < 1e-5, float64 < 1e-12, relative to max(|x|, rms(x) / 10). Both
 * backends do the same float operations in the same order; they may differ where one compiler fuses
 * a multiply-add the other rounds twice, which on a momentum or first-moment buffer that cancels
 * toward zero is an ulp of its typical size, hence the floor at a tenth of the buffer's rms.
 * One amsgrad run feeds a NaN gradient at step 10: NaN must win the max and stay, on both.
 *
 * Norms: sum_squares_det and l2_norm of float32 / float64 tensors of sizes around the GPU's chunk
 * (4096) and up to 3 million elements agree with the CPU's < 1e-12 (both sum squares in float64,
 * in different fixed orders); the GPU value is bit-identical when computed again; inf and NaN
 * elements give inf and NaN; float64 values near 1e200, whose squares overflow, give inf for the sum
 * of squares and the (finite) rescaled norm for l2_norm, as on the CPU. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/ops/ops.h"
#include "cuda_testlib.h"

#ifdef CT_HAVE_CUDA

#define STEPS 20

static ct_rng rng;

static double uniform(double lo, double hi) { return lo + (hi - lo) * ct_rng_uniform(&rng); }

static int64_t rand_size(void) {
    switch (ct_rng_below(&rng, 4)) {
    case 0: return 1 + (int64_t)ct_rng_below(&rng, 9);
    case 1: return 1 + (int64_t)ct_rng_below(&rng, 5000);
    case 2: return 40000 + (int64_t)ct_rng_below(&rng, 60000); /* above CT_OMP_MIN: the CPU runs threaded */
    default: return 4096 * (1 + (int64_t)ct_rng_below(&rng, 4)) + (int64_t)ct_rng_below(&rng, 3) - 1;
    }
}

/* Elements compared and those with the same bits on both backends (reported, not required: the
 * same bits are expected where the CPU build fuses multiply-adds as the GPU kernels do). */
static int64_t compared, identical;

static void compare(const char *cfg, const char *what, const ct_tensor *gpu, const ct_tensor *cpu) {
    char label[160];
    snprintf(label, sizeof label, "%s %s %s (n=%lld)", cfg, what, ct_dtype_name(cpu->dtype),
             (long long)ct_tensor_numel(cpu));
    double floor = fmax(ct_ct_rms(cpu) / 10, 1e-30);
    ct_ct_check_close(label, gpu, cpu, cpu->dtype == CT_F32 ? 1e-5 : 1e-12, floor);
    ct_tensor back = ct_ct_to_cpu(gpu);
    size_t es = ct_dtype_size(cpu->dtype);
    for (int64_t i = 0; i < ct_tensor_numel(cpu); i++)
        identical += memcmp((char *)back.data + i * es, (char *)cpu->data + i * es, es) == 0;
    compared += ct_tensor_numel(cpu);
    ct_tensor_free(&back);
}

static void report_identical(const char *what) {
    printf("%s: %lld of %lld elements bit-identical to the CPU's\n", what, (long long)identical, (long long)compared);
    identical = compared = 0;
}

/* One parameter range with up to three state buffers, on the CPU and mirrored on the GPU. */
typedef struct run {
    int64_t n;
    int nstate;
    ct_tensor p, g, s[3];     /* CPU */
    ct_tensor gp, gg, gs[3];  /* GPU */
} run;

static void run_init(run *r, ct_dtype dt, int nstate) {
    r->n = rand_size();
    r->nstate = nstate;
    r->p = ct_ct_rand(&rng, dt, 1, &r->n, -1, 1);
    r->g = ct_ct_zeros(dt, 1, &r->n);
    r->gp = ct_ct_to_gpu(&r->p);
    r->gg = ct_ct_to_gpu(&r->g);
    for (int i = 0; i < nstate; i++) {
        r->s[i] = ct_ct_zeros(dt, 1, &r->n); /* optimizer states start at zero */
        r->gs[i] = ct_ct_to_gpu(&r->s[i]);
    }
}

/* Fresh random gradients for both backends; a NaN at `nan_at` when >= 0. */
static void run_grads(run *r, int64_t nan_at) {
    for (int64_t i = 0; i < r->n; i++) ct_tensor_set(&r->g, i, uniform(-1, 1));
    if (nan_at >= 0) ct_tensor_set(&r->g, nan_at, NAN);
    if (ct_tensor_copy_to(&r->gg, &r->g) != CT_OK) abort();
}

static void run_free(run *r) {
    ct_tensor_free(&r->p);
    ct_tensor_free(&r->g);
    ct_tensor_free(&r->gp);
    ct_tensor_free(&r->gg);
    for (int i = 0; i < r->nstate; i++) {
        ct_tensor_free(&r->s[i]);
        ct_tensor_free(&r->gs[i]);
    }
}

static void sgd_case(ct_dtype dt, const char *name, ct_sgd_args a) {
    run r;
    bool mom = a.momentum != 0;
    run_init(&r, dt, mom ? 1 : 0);
    for (int step = 1; step <= STEPS; step++) {
        run_grads(&r, -1);
        a.first_step = step == 1;
        ct_op_sgd_step(&r.p, &r.g, mom ? &r.s[0] : NULL, &a);
        ct_op_sgd_step(&r.gp, &r.gg, mom ? &r.gs[0] : NULL, &a);
    }
    char cfg[160];
    snprintf(cfg, sizeof cfg, "sgd %s (lr %g wd %g momentum %g dampening %g%s)", name, a.lr, a.weight_decay,
             a.momentum, a.dampening, a.nesterov ? " nesterov" : "");
    compare(cfg, "param", &r.gp, &r.p);
    if (mom) compare(cfg, "momentum_buffer", &r.gs[0], &r.s[0]);
    compare(cfg, a.clear_grad ? "grad (cleared)" : "grad", &r.gg, &r.g);
    run_free(&r);
}

static void test_sgd(ct_dtype dt) {
    double lr = uniform(1e-3, 3e-2), wd = uniform(1e-4, 1e-1), mom = uniform(0.5, 0.9);
    sgd_case(dt, "plain", (ct_sgd_args){.lr = lr});
    sgd_case(dt, "decay", (ct_sgd_args){.lr = lr, .weight_decay = wd});
    sgd_case(dt, "momentum", (ct_sgd_args){.lr = lr, .momentum = mom});
    sgd_case(dt, "momentum+dampening+decay",
             (ct_sgd_args){.lr = lr, .weight_decay = wd, .momentum = mom, .dampening = uniform(0.05, 0.5)});
    sgd_case(dt, "nesterov+decay", (ct_sgd_args){.lr = lr, .weight_decay = wd, .momentum = mom, .nesterov = true});
    sgd_case(dt, "momentum, clearing the gradient", (ct_sgd_args){.lr = lr, .momentum = mom, .clear_grad = true});
}

static void adam_case(ct_dtype dt, const char *name, ct_adam_args a, int64_t nan_step) {
    run r;
    run_init(&r, dt, a.amsgrad ? 3 : 2);
    int64_t nan_at = (int64_t)ct_rng_below(&rng, (uint64_t)r.n);
    for (int step = 1; step <= STEPS; step++) {
        run_grads(&r, step == nan_step ? nan_at : -1);
        a.step = step;
        ct_op_adam_step(&r.p, &r.g, &r.s[0], &r.s[1], a.amsgrad ? &r.s[2] : NULL, &a);
        ct_op_adam_step(&r.gp, &r.gg, &r.gs[0], &r.gs[1], a.amsgrad ? &r.gs[2] : NULL, &a);
    }
    char cfg[200];
    snprintf(cfg, sizeof cfg, "%s %s (lr %g wd %g betas %g %g eps %g%s)", a.decoupled_decay ? "adamw" : "adam", name,
             a.lr, a.weight_decay, a.beta1, a.beta2, a.eps, a.amsgrad ? " amsgrad" : "");
    compare(cfg, "param", &r.gp, &r.p);
    compare(cfg, "exp_avg", &r.gs[0], &r.s[0]);
    compare(cfg, "exp_avg_sq", &r.gs[1], &r.s[1]);
    if (a.amsgrad) compare(cfg, "max_exp_avg_sq", &r.gs[2], &r.s[2]);
    compare(cfg, a.clear_grad ? "grad (cleared)" : "grad", &r.gg, &r.g);
    if (nan_step > 0) {
        ct_tensor back = ct_ct_to_cpu(&r.gs[2]), pback = ct_ct_to_cpu(&r.gp);
        CHECK(isnan(ct_tensor_get(&back, nan_at)) && isnan(ct_tensor_get(&r.s[2], nan_at)),
              "%s: the NaN of step %lld did not stay in max_exp_avg_sq (gpu %g, cpu %g)", cfg, (long long)nan_step,
              ct_tensor_get(&back, nan_at), ct_tensor_get(&r.s[2], nan_at));
        CHECK(isnan(ct_tensor_get(&pback, nan_at)), "%s: the parameter of the NaN gradient is %g", cfg,
              ct_tensor_get(&pback, nan_at));
        ct_tensor_free(&back);
        ct_tensor_free(&pback);
    }
    run_free(&r);
}

static void test_adam(ct_dtype dt) {
    for (int decoupled = 0; decoupled < 2; decoupled++)
        for (int ams = 0; ams < 2; ams++)
            for (int decay = 0; decay < 2; decay++) {
                bool defaults = ct_rng_below(&rng, 2);
                ct_adam_args a = {
                    .lr = uniform(1e-4, 1e-2),
                    .weight_decay = decay ? uniform(1e-3, 1e-1) : 0.0,
                    .beta1 = defaults ? 0.9 : uniform(0.8, 0.95),
                    .beta2 = defaults ? 0.999 : uniform(0.99, 0.9999),
                    .eps = defaults ? 1e-8 : 1e-6,
                    .decoupled_decay = decoupled,
                    .amsgrad = ams,
                };
                adam_case(dt, decay ? "decay" : "no decay", a, -1);
            }
    ct_adam_args a = {.lr = 1e-3, .weight_decay = 1e-2, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
                      .decoupled_decay = true, .amsgrad = true};
    adam_case(dt, "nan gradient", a, 10);
    a.clear_grad = true;
    adam_case(dt, "clearing the gradient", a, -1);
}

/* --- norms --------------------------------------------------------------------------------------- */

static void norm_case(ct_dtype dt, int64_t n) {
    ct_tensor t = ct_ct_rand(&rng, dt, 1, &n, -3, 3);
    ct_tensor g = ct_ct_to_gpu(&t);
    double cs = ct_op_sum_squares_det(&t), gs = ct_op_sum_squares_det(&g), gs2 = ct_op_sum_squares_det(&g);
    double cn = ct_op_l2_norm(&t), gn = ct_op_l2_norm(&g);
    CHECK(fabs(gs - cs) <= 1e-12 * fmax(cs, 1e-300), "sum_squares %s n=%lld: gpu %.17g cpu %.17g", ct_dtype_name(dt),
          (long long)n, gs, cs);
    CHECK(fabs(gn - cn) <= 1e-12 * fmax(cn, 1e-300), "l2_norm %s n=%lld: gpu %.17g cpu %.17g", ct_dtype_name(dt),
          (long long)n, gn, cn);
    CHECK(gs == gs2, "sum_squares %s n=%lld not deterministic: %.17g then %.17g", ct_dtype_name(dt), (long long)n, gs,
          gs2);
    if (n > 0) {
        int64_t at = (int64_t)ct_rng_below(&rng, (uint64_t)n);
        ct_tensor_set(&t, at, INFINITY);
        ct_tensor gi = ct_ct_to_gpu(&t);
        CHECK(isinf(ct_op_sum_squares_det(&gi)) && isinf(ct_op_l2_norm(&gi)),
              "%s n=%lld: an inf element gives sum %g norm %g", ct_dtype_name(dt), (long long)n,
              ct_op_sum_squares_det(&gi), ct_op_l2_norm(&gi));
        ct_tensor_set(&t, (at + n / 2) % n, NAN);
        ct_tensor gnan = ct_ct_to_gpu(&t);
        CHECK(isnan(ct_op_sum_squares_det(&gnan)) && isnan(ct_op_l2_norm(&gnan)),
              "%s n=%lld: a NaN element (with an inf) gives sum %g norm %g", ct_dtype_name(dt), (long long)n,
              ct_op_sum_squares_det(&gnan), ct_op_l2_norm(&gnan));
        ct_tensor_free(&gi);
        ct_tensor_free(&gnan);
    }
    ct_tensor_free(&t);
    ct_tensor_free(&g);
}

static void test_norms(void) {
    static const int64_t sizes[] = {0, 1, 2, 255, 256, 257, 4095, 4096, 4097, 8191, 65537};
    for (int d = 0; d < 2; d++) {
        ct_dtype dt = d ? CT_F64 : CT_F32;
        for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) norm_case(dt, sizes[i]);
        norm_case(dt, 1 + (int64_t)ct_rng_below(&rng, 3000000));
        norm_case(dt, 1 + (int64_t)ct_rng_below(&rng, 100000));
    }
    /* float64 squares that overflow: the sum is inf, the norm is rescaled and finite. */
    int64_t n = 1000 + (int64_t)ct_rng_below(&rng, 20000);
    ct_tensor t = ct_ct_rand(&rng, CT_F64, 1, &n, -1e200, 1e200);
    ct_tensor g = ct_ct_to_gpu(&t);
    double cn = ct_op_l2_norm(&t), gn = ct_op_l2_norm(&g);
    CHECK(isinf(ct_op_sum_squares_det(&g)), "f64 near 1e200: sum of squares %g, not inf", ct_op_sum_squares_det(&g));
    CHECK(isfinite(cn) && fabs(gn - cn) <= 1e-12 * cn, "f64 near 1e200 (n=%lld): l2_norm gpu %.17g cpu %.17g",
          (long long)n, gn, cn);
    ct_tensor_free(&t);
    ct_tensor_free(&g);
}

#endif

int main(void) {
    ct_cuda_test_begin("test_cuda_optim");
#ifdef CT_HAVE_CUDA
    ct_rng_init(&rng, ct_test_seed, 0, CT_RNG_USER);
    test_sgd(CT_F32);
    report_identical("sgd f32");
    test_sgd(CT_F64);
    report_identical("sgd f64");
    test_adam(CT_F32);
    report_identical("adam f32");
    test_adam(CT_F64);
    report_identical("adam f64");
    test_norms();
#endif
    return ct_test_finish();
}
