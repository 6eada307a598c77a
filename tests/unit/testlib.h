/* A small test library for the C unit tests: checks that count and report with file:line, a fresh
 * seed each run (printed on failure, fixed by CT_TEST_SEED=...), and a finite-difference gradient
 * checker for modules in float64. Each test program ends with ct_test_finish(), which prints
 * "N passed, N failed" and returns the exit code. */
#ifndef CT_TESTLIB_H
#define CT_TESTLIB_H

#include <math.h>
#include <stdio.h>

#include "core/rng.h"
#include "core/status.h"
#include "model/module.h"

extern int ct_test_passed, ct_test_failed;
extern uint64_t ct_test_seed;

/* Seeds the test run from CT_TEST_SEED or the clock, and prints the seed. */
void ct_test_begin(const char *name);
int ct_test_finish(void);
/* Makes "cuda" the checked device (CTRAINER_CHECKED_DEVICE=devices): the registry reads the variable
 * when the library loads, so unless it already has that value this sets it and runs the program
 * again (argv: main's); returns only when it is set (false: the program could not start again). */
bool ct_test_use_checked_device(char **argv, const char *devices);
void ct_test_fail(const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (cond)                                                                                  \
            ct_test_passed++;                                                                      \
        else                                                                                       \
            ct_test_fail(__FILE__, __LINE__, __VA_ARGS__);                                         \
    } while (0)

#define CHECK_OK(expr)                                                                             \
    do {                                                                                           \
        ct_status s_ = (expr);                                                                     \
        CHECK(s_ == CT_OK, "%s -> %s: %s", #expr, ct_status_str(s_), ct_last_error());             \
    } while (0)

/* Expects status `want` and a message containing every one of the given substrings. */
#define CHECK_ERR(expr, want, ...)                                                                 \
    do {                                                                                           \
        ct_status s_ = (expr);                                                                     \
        const char *subs_[] = {__VA_ARGS__, NULL};                                                 \
        CHECK(s_ == (want), "%s -> %s (wanted %s): %s", #expr, ct_status_str(s_), ct_status_str(want), \
              ct_last_error());                                                                    \
        for (const char **p_ = subs_; *p_; p_++)                                                   \
            CHECK(strstr(ct_last_error(), *p_) != NULL, "message of %s lacks '%s': %s", #expr, *p_,  \
                  ct_last_error());                                                                \
    } while (0)

#define CHECK_NEAR(a, b, rel)                                                                      \
    do {                                                                                           \
        double a_ = (a), b_ = (b);                                                                 \
        double scale_ = fmax(fmax(fabs(a_), fabs(b_)), 1e-30);                                     \
        CHECK(fabs(a_ - b_) <= (rel)*scale_, "%s = %.17g vs %s = %.17g (rel %.3g > %.3g)", #a, a_, #b, b_, \
              fabs(a_ - b_) / scale_, (double)(rel));                                              \
    } while (0)

/* Central finite differences of a scalar objective f(ctx) against analytic[i] = df/dtarget[i], over
 * every element of target when n <= max_probes, else max_probes random ones (rng): a fourth-order
 * stencil for a smooth f; with piecewise, a second-order one of step 1e-6, and probes whose
 * one-sided differences disagree straddle a kink and are skipped (up to 8). */
typedef double (*ct_objective_fn)(void *ctx);
typedef struct ct_fd_result {
    double rel;         /* ||fd - analytic|| / max(||fd||, ||analytic||) over the probes */
    int probes, skipped;
    bool analytic_zero; /* every probed analytic value was zero: the check proves nothing */
} ct_fd_result;
ct_fd_result ct_fd_check(ct_objective_fn f, void *ctx, double *target, const double *analytic, int64_t n,
                         int max_probes, bool piecewise, ct_rng *rng);

/* Options for the gradient checker. */
typedef struct ct_gradcheck_opts {
    int64_t batch;
    double input_scale;     /* inputs ~ U(-scale, scale) (default 1) */
    double kink_margin;     /* resample inputs closer than this to 0 (ReLU-like kinks); 0 = off */
    int max_probes;         /* elements probed per tensor (default 48) */
    double tolerance;       /* relative error bound (default 1e-6) */
    int integer_input_max;  /* > 0: inputs are integer ids in [0, max) (embedding); no input gradient */
    bool training;          /* module in training mode (default true via ct_gradcheck_defaults) */
    /* Piecewise-linear modules (max pooling, ReLU networks): a probe whose two one-sided differences
     * disagree straddles a kink, where no derivative exists; skip it (at most 8 per tensor, so a
     * broken forward cannot hide there). */
    bool piecewise;
} ct_gradcheck_opts;

ct_gradcheck_opts ct_gradcheck_defaults(int64_t batch);

/* Builds `m` (taking ownership) in float64 for the per-sample input shape, then compares the
 * analytic gradients of L = sum(forward(x) * r), for random r, w.r.t. the input and every parameter
 * against central finite differences. Records checks; returns the worst relative error seen. */
double ct_gradcheck_module(const char *label, ct_module *m, const ct_shape *in, const ct_gradcheck_opts *opts);

/* For fake two-rank communicators whose other rank mirrors this one: t doubled in place (f32, f64 or
 * i64), which is what a SUM over both ranks gives (MIN and MAX keep the value). */
void ct_test_mirror_sum(ct_tensor *t);

/* A uniform integer in [lo, hi] from rng. */
int64_t ct_test_between(ct_rng *rng, int64_t lo, int64_t hi);
/* The whole file at path (malloc'd, with a NUL after its bytes, so text reads as a string) and its
 * size in *n (when n is not NULL); NULL when it cannot be opened or read whole. */
char *ct_test_read_file(const char *path, size_t *n);
/* A host tensor of the given shape (contents unset); aborts when memory runs out. */
ct_tensor ct_test_alloc(ct_dtype dt, int ndim, const int64_t *shape);

/* Runs fn(arg) with stderr (descriptor 2) captured; returns what it printed (malloc'd), for checks
 * of warnings. */
char *ct_test_capture_stderr(void (*fn)(void *), void *arg);

#endif
