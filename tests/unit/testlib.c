/* Test helpers (see testlib.h). */
#include "testlib.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/ops/ops.h"
#include "model/model.h"

int ct_test_passed, ct_test_failed;
uint64_t ct_test_seed;
static const char *test_name = "test";

void ct_test_begin(const char *name) {
    test_name = name;
    const char *env = getenv("CT_TEST_SEED");
    if (env)
        ct_test_seed = strtoull(env, NULL, 0);
    else {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ct_test_seed = (uint64_t)ts.tv_sec * 1000003u ^ (uint64_t)ts.tv_nsec;
    }
    printf("%s: seed %llu (rerun with CT_TEST_SEED=%llu)\n", name, (unsigned long long)ct_test_seed,
           (unsigned long long)ct_test_seed);
    /* a CT_CPU_ISA or CT_CPU_GEMM that cannot be honoured (oneDNN asked for and not opened, say)
     * would test another path than the one asked for, under its label's name */
    if (ct_cpu_isa_check() != CT_OK) ct_test_fail(__FILE__, __LINE__, "%s", ct_last_error());
}

void ct_test_fail(const char *file, int line, const char *fmt, ...) {
    ct_test_failed++;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stdout, "FAIL %s:%d: ", file, line);
    vfprintf(stdout, fmt, ap);
    fprintf(stdout, "\n");
    va_end(ap);
}

bool ct_test_use_checked_device(char **argv, const char *devices) {
    const char *have = getenv("CTRAINER_CHECKED_DEVICE");
    if (have && strcmp(have, devices) == 0) return true;
    setenv("CTRAINER_CHECKED_DEVICE", devices, 1);
    execv("/proc/self/exe", argv);
    perror("execv");
    return false;
}

int ct_test_finish(void) {
    if (ct_test_failed) printf("%s: seed was %llu\n", test_name, (unsigned long long)ct_test_seed);
    printf("%d passed, %d failed\n", ct_test_passed, ct_test_failed);
    return ct_test_failed ? 1 : 0;
}

ct_gradcheck_opts ct_gradcheck_defaults(int64_t batch) {
    return (ct_gradcheck_opts){.batch = batch, .input_scale = 1.0, .max_probes = 48, .tolerance = 1e-6,
                               .training = true};
}

/* f with target[i] set to x, then restored. */
static double f_at(ct_objective_fn f, void *ctx, double *target, int64_t i, double x) {
    double saved = target[i];
    target[i] = x;
    double v = f(ctx);
    target[i] = saved;
    return v;
}

/* The derivative of a smooth f along target[i]: the fourth-order central stencil
 * (8 (f(x+H) - f(x-H)) - (f(x+2H) - f(x-2H))) / 12H with H = 1e-5 max(1, |x|). Its truncation
 * error is of order H^4 times f's fifth derivative, its rounding error of order eps |f| / H. The
 * second-order (f(x+h) - f(x-h)) / 2h needs h = 1e-6 to keep its truncation (h^2 times the third
 * derivative) small and then loses eps |f| / 1e-6 to rounding, which exceeded the 1e-6 bound where
 * a gradient is small against the objective (a float64 GPT's LayerNorm bias: 1.58e-6, now 2.6e-7);
 * a step of 1e-4 would cut the rounding further but let the truncation through where a LayerNorm
 * row's variance is small (3.7e-6 for a GPT's position embedding, 5e-10 at 1e-5). */
static double smooth_derivative(ct_objective_fn f, void *ctx, double *target, int64_t i) {
    double x = target[i], H = 1e-5 * fmax(1.0, fabs(x));
    double d1 = f_at(f, ctx, target, i, x + H) - f_at(f, ctx, target, i, x - H);
    double d2 = f_at(f, ctx, target, i, x + 2 * H) - f_at(f, ctx, target, i, x - 2 * H);
    return (8 * d1 - d2) / (12 * H);
}

ct_fd_result ct_fd_check(ct_objective_fn f, void *ctx, double *target, const double *analytic, int64_t n,
                         int max_probes, bool piecewise, ct_rng *rng) {
    const int max_skips = 8;
    int64_t candidates = n <= max_probes ? n : max_probes + (piecewise ? max_skips : 0);
    double diff2 = 0.0, a2 = 0.0, f2 = 0.0;
    ct_fd_result r = {0};
    for (int64_t k = 0; k < candidates && r.probes < max_probes && r.skipped <= max_skips; k++) {
        int64_t i = n <= max_probes ? k : (int64_t)ct_rng_below(rng, (uint64_t)n);
        double fd;
        if (!piecewise) {
            fd = smooth_derivative(f, ctx, target, i);
        } else {
            /* a kink inside [x - h, x + h] shows as one-sided slopes that disagree: skipped */
            double saved = target[i], h = 1e-6 * fmax(1.0, fabs(saved));
            double l0 = f(ctx), lp = f_at(f, ctx, target, i, saved + h), lm = f_at(f, ctx, target, i, saved - h);
            double fp = (lp - l0) / h, fm = (l0 - lm) / h;
            if (fabs(fp - fm) > 1e-6 * (fabs(fp) + fabs(fm)) + 1e-7) {
                r.skipped++;
                continue;
            }
            fd = (lp - lm) / (2 * h);
        }
        diff2 += (fd - analytic[i]) * (fd - analytic[i]);
        a2 += analytic[i] * analytic[i];
        f2 += fd * fd;
        r.probes++;
    }
    r.rel = (a2 == 0.0 && f2 == 0.0) ? 0.0 : sqrt(diff2) / fmax(sqrt(fmax(a2, f2)), 1e-300);
    r.analytic_zero = a2 == 0.0;
    return r;
}

/* L = sum(y * r) of a model for its current parameters and input. */
typedef struct model_objective {
    ct_model *model;
    ct_tensor *x;
    const double *r;
} model_objective;

static double objective(void *ctx) {
    model_objective *o = ctx;
    ct_tensor y;
    ct_status s = ct_model_forward(o->model, o->x, &y);
    if (s != CT_OK) {
        ct_test_fail(__FILE__, __LINE__, "forward failed: %s", ct_last_error());
        return NAN;
    }
    double acc = 0.0;
    int64_t n = ct_tensor_numel(&y);
    for (int64_t i = 0; i < n; i++) acc += ((double *)y.data)[i] * o->r[i];
    return acc;
}

static double probe(const char *label, const char *what, ct_model *model, ct_tensor *x, const double *r,
                    double *target, const double *analytic, int64_t n, const ct_gradcheck_opts *o, ct_rng *rng) {
    model_objective ctx = {model, x, r};
    ct_fd_result res = ct_fd_check(objective, &ctx, target, analytic, n, o->max_probes, o->piecewise, rng);
    CHECK(res.skipped <= 8, "%s: %s: %d probes straddled a kink; the forward is not piecewise linear", label, what,
          res.skipped);
    CHECK(res.rel < o->tolerance, "%s: gradient of %s: relative error %.3g over %d probes (%d at kinks skipped, bound %.3g)",
          label, what, res.rel, res.probes, res.skipped, o->tolerance);
    CHECK(!res.analytic_zero || n == 0, "%s: gradient of %s is all zero: the check would prove nothing", label, what);
    return res.rel;
}

double ct_gradcheck_module(const char *label, ct_module *m, const ct_shape *in, const ct_gradcheck_opts *o) {
    ct_rng rng;
    ct_rng_init(&rng, ct_test_seed, 0, CT_RNG_USER);
    ct_model model;
    ct_model_options mo = {.dtype = CT_F64, .device = CT_CPU, .max_batch = o->batch, .seed = ct_test_seed};
    ct_status s = ct_model_build(&model, m, in, &mo);
    if (s != CT_OK) {
        ct_test_fail(__FILE__, __LINE__, "%s: build failed: %s", label, ct_last_error());
        return INFINITY;
    }
    ct_model_train(&model, o->training);
    bool want_dx = o->integer_input_max == 0;
    /* Parameters: the layer's own init is fine, but nudge them off special values (zero bias,
     * unit norm weights) so a wrongly-indexed gradient cannot hide behind symmetry. */
    double *pv = model.params.values.data;
    for (int64_t i = 0; i < ct_tensor_numel(&model.params.values); i++) pv[i] += 0.1 * (ct_rng_uniform(&rng) - 0.5);

    int ndim;
    int64_t shape[CT_MAX_DIMS];
    ct_shape_with_batch(in, o->batch, &ndim, shape);
    ct_tensor x;
    ct_tensor_alloc(&x, want_dx ? CT_F64 : CT_I64, CT_CPU, ndim, shape);
    int64_t nx = ct_tensor_numel(&x);
    for (int64_t i = 0; i < nx; i++) {
        if (!want_dx) {
            ((int64_t *)x.data)[i] = (int64_t)ct_rng_below(&rng, (uint64_t)o->integer_input_max);
            continue;
        }
        double v;
        do v = (2 * ct_rng_uniform(&rng) - 1) * o->input_scale;
        while (o->kink_margin > 0 && fabs(v) < o->kink_margin);
        ((double *)x.data)[i] = v;
    }
    ct_tensor y;
    ct_model_forward(&model, &x, &y);
    int64_t ny = ct_tensor_numel(&y);
    double *r = malloc((size_t)ny * sizeof *r);
    for (int64_t i = 0; i < ny; i++) r[i] = 2 * ct_rng_uniform(&rng) - 1;
    ct_tensor dy = y;
    ct_tensor_alloc(&dy, CT_F64, CT_CPU, y.ndim, y.shape);
    memcpy(dy.data, r, (size_t)ny * sizeof *r);

    /* Training runs the first layer without an input gradient; the parameter gradients of that
     * path must equal those computed with it, which are the ones checked below. */
    ct_model_zero_grad(&model);
    CHECK_OK(ct_model_backward(&model, &dy));
    size_t gbytes = ct_tensor_nbytes(&model.params.grads);
    double *without_dx = malloc(gbytes ? gbytes : 1);
    memcpy(without_dx, model.params.grads.data, gbytes);
    if (want_dx) {
        CHECK_OK(ct_model_enable_input_grad(&model));
        CHECK_OK(ct_model_forward(&model, &x, &y));
    }
    ct_model_zero_grad(&model);
    s = ct_model_backward(&model, &dy);
    ct_tensor dx = model.dx;
    CHECK(memcmp(without_dx, model.params.grads.data, gbytes) == 0,
          "%s: parameter gradients differ with and without the input gradient", label);
    free(without_dx);
    CHECK(s == CT_OK, "%s: backward failed: %s", label, ct_last_error());
    double worst = 0.0;
    if (s == CT_OK) {
        if (want_dx) {
            double *dxc = malloc((size_t)nx * sizeof *dxc);
            memcpy(dxc, dx.data, (size_t)nx * sizeof *dxc);
            worst = fmax(worst, probe(label, "input", &model, &x, r, x.data, dxc, nx, o, &rng));
            free(dxc);
        }
        for (int i = 0; i < model.params.count; i++) {
            ct_param *p = &model.params.items[i];
            if (p->flags & CT_PARAM_BUFFER) continue;
            double *grad = malloc((size_t)p->numel * sizeof *grad);
            memcpy(grad, p->grad->data, (size_t)p->numel * sizeof *grad);
            worst = fmax(worst, probe(label, p->name, &model, &x, r, p->value->data, grad, p->numel, o, &rng));
            free(grad);
        }
    }
    free(r);
    ct_tensor_free(&x);
    ct_tensor_free(&dy);
    ct_model_free(&model);
    printf("%s: worst relative gradient error %.3g\n", label, worst);
    return worst;
}

void ct_test_mirror_sum(ct_tensor *t) {
    int64_t n = ct_tensor_numel(t);
    if (t->dtype == CT_F32)
        for (int64_t i = 0; i < n; i++) ((float *)t->data)[i] *= 2;
    else if (t->dtype == CT_F64)
        for (int64_t i = 0; i < n; i++) ((double *)t->data)[i] *= 2;
    else
        for (int64_t i = 0; i < n; i++) ((int64_t *)t->data)[i] *= 2;
}

char *ct_test_capture_stderr(void (*fn)(void *), void *arg) {
    fflush(stderr);
    FILE *cap = tmpfile();
    CT_ASSERT(cap);
    int saved = dup(2);
    dup2(fileno(cap), 2);
    fn(arg);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    long len = ftell(cap);
    char *out = calloc(1, (size_t)(len > 0 ? len : 0) + 1);
    rewind(cap);
    if (len > 0) out[fread(out, 1, (size_t)len, cap)] = 0;
    fclose(cap);
    return out;
}

char *ct_test_read_file(const char *path, size_t *n) {
    if (n) *n = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    long len = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    char *buf = len >= 0 && fseek(f, 0, SEEK_SET) == 0 ? malloc((size_t)len + 1) : NULL;
    if (buf && fread(buf, 1, (size_t)len, f) != (size_t)len) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (!buf) return NULL;
    buf[len] = '\0';
    if (n) *n = (size_t)len;
    return buf;
}

int64_t ct_test_between(ct_rng *rng, int64_t lo, int64_t hi) {
    return lo + (int64_t)ct_rng_below(rng, (uint64_t)(hi - lo + 1));
}

ct_tensor ct_test_alloc(ct_dtype dt, int ndim, const int64_t *shape) {
    ct_tensor t;
    CT_ASSERT(ct_tensor_alloc(&t, dt, CT_CPU, ndim, shape) == CT_OK);
    return t;
}
