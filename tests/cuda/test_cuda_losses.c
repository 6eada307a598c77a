/* The loss ops on CUDA against the CPU backend, on the same fresh random inputs each run, through the
 * public ct_op_* entry points (so the dispatch of core/ops/dispatch.c is covered too).
 *
 * Cross-entropy: logits [N, C] and [N, T, C] in f32 and f64, i64 and i32 targets, class counts from
 * 1 to 2000 (below, at and far above a warp's 32 lanes), with and without class weights, label
 * smoothing and ignore_index (the default -100, or a real class); the sum and the weight count
 * (to 1e-12: both backends compute in double) and the gradient, which must overwrite whatever
 * dlogits held. Also: the first invalid target row (two invalid rows, before and after each other)
 * from forward and backward, NaN logits reaching the sum and the row's gradient, backward in place
 * (dlogits aliasing logits), and many rows (several reduction blocks). The fused classifier
 * (ct_op_fused_classifier, in place) on every random setup against the CPU's forward and backward,
 * and with invalid targets: the first row reported, the logits left untouched.
 *
 * Pointwise losses (mse, l1, huber, bce_with_logits): random shapes up to 3-D, sizes up to ~300k
 * (the capped reduction grid), targets equal to predictions in places (l1's and huber's d == 0),
 * large logits for bce, pos_weight absent, [1] or [last dim]; sum to 1e-12, gradient vs CPU.
 *
 * Language-model token values (ct_op_token_values): see token_values_compare; a classifier's class
 * ranks (ct_op_class_ranks): see class_ranks_compare.
 *
 * Gradients are compared relative to max(|cpu|, floor) with floor a fraction of |scale| (the size
 * of a gradient entry): f32 1e-5, f64 1e-12. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/ops/ops.h"
#include "cuda_testlib.h"

static ct_rng rng;

static double urand(double lo, double hi) { return lo + (hi - lo) * ct_rng_uniform(&rng); }
static int64_t irand(int64_t lo, int64_t hi) { return lo + (int64_t)ct_rng_below(&rng, (uint64_t)(hi - lo + 1)); }

static double grad_tol(ct_dtype dt) { return dt == CT_F32 ? 1e-5 : 1e-12; }
/* Entries far below the gradient's scale are compared absolutely: f64 values there differ by
 * rounding of the softmax (~1e-15 of the scale), f32 ones by one rounding to float. */
static double grad_floor(ct_dtype dt, double scale) { return dt == CT_F32 ? 1e-6 * fabs(scale) : fabs(scale); }

static void check_sum(const char *what, double gpu, double cpu) {
    bool both_nan = isnan(gpu) && isnan(cpu);
    double err = fabs(gpu - cpu) / fmax(fabs(cpu), 1e-300);
    CHECK(both_nan || (gpu == cpu) || err <= 1e-12, "%s: gpu %.17g, cpu %.17g (rel %.3g > 1e-12)", what, gpu, cpu,
          err);
}

static void set_target(ct_tensor *t, int64_t i, int64_t v) {
    if (t->dtype == CT_I64)
        ((int64_t *)t->data)[i] = v;
    else
        ((int32_t *)t->data)[i] = (int32_t)v;
}

static void free_all(ct_tensor *ts, int n) {
    for (int i = 0; i < n; i++) ct_tensor_free(&ts[i]);
}

/* --- cross-entropy -------------------------------------------------------------------------------- */

typedef struct xent_setup {
    ct_dtype dt;
    int ndim;
    int64_t shape[3], rows, c;
    ct_tensor logits, target, weight;           /* CPU */
    ct_tensor g_logits, g_target, g_weight;     /* GPU copies */
    ct_xent_opts cpu, gpu;
} xent_setup;

static int64_t pick_classes(void) {
    switch (irand(0, 3)) {
    case 0: return irand(1, 31);
    case 1: return 32;
    case 2: return irand(33, 200);
    default: return irand(500, 2000);
    }
}

/* Random logits, targets (about 10% ignore_index) and options; everything mirrored on the GPU. With
 * many_rows, rows_hint rows [N, C] of at most 40 classes: many rows for the reduction blocks, and a
 * size that stays bounded (the classes and positions of the other setups would make it up to 1.7e9
 * logits, minutes apart from seed to seed under the sanitizers). */
static void xent_make(xent_setup *x, ct_dtype dt, int64_t rows_hint, bool many_rows) {
    memset(x, 0, sizeof *x);
    x->dt = dt;
    x->ndim = many_rows ? 2 : (int)irand(2, 3);
    x->c = many_rows ? irand(1, 40) : pick_classes();
    int64_t n = rows_hint > 0 ? rows_hint : irand(1, 300), t = x->ndim == 3 ? irand(1, 12) : 1;
    x->shape[0] = n;
    x->shape[1] = x->ndim == 3 ? t : x->c;
    x->shape[2] = x->c;
    x->rows = n * t;
    double lim = urand(0.5, 8.0);
    x->logits = ct_ct_rand(&rng, dt, x->ndim, x->shape, -lim, lim);
    ct_dtype tdt = irand(0, 1) ? CT_I64 : CT_I32;
    x->target = ct_ct_rand(&rng, tdt, x->ndim - 1, x->shape, 0, (double)x->c);
    bool weighted = irand(0, 1);
    double eps = irand(0, 2) == 0 ? 0.0 : irand(0, 9) == 0 ? 1.0 : urand(0.0, 1.0);
    int64_t ignore = irand(0, 1) ? -100 : irand(0, x->c - 1);
    for (int64_t r = 0; r < x->rows; r++)
        if (irand(0, 9) == 0) set_target(&x->target, r, ignore);
    if (weighted) x->weight = ct_ct_rand(&rng, CT_F64, 1, &x->c, 0.1, 3.0);
    x->g_logits = ct_ct_to_gpu(&x->logits);
    x->g_target = ct_ct_to_gpu(&x->target);
    if (weighted) x->g_weight = ct_ct_to_gpu(&x->weight);
    x->cpu = (ct_xent_opts){weighted ? &x->weight : NULL, eps, ignore};
    x->gpu = (ct_xent_opts){weighted ? &x->g_weight : NULL, eps, ignore};
}

static void xent_free(xent_setup *x) {
    ct_tensor ts[6] = {x->logits, x->target, x->weight, x->g_logits, x->g_target, x->g_weight};
    free_all(ts, 6);
}

static const char *xent_str(const xent_setup *x, char *buf, size_t cap) {
    snprintf(buf, cap, "xent %s rows %lld C %lld %s weight %s eps %g ignore %lld", ct_dtype_name(x->dt),
             (long long)x->rows, (long long)x->c, ct_dtype_name(x->target.dtype), x->cpu.weight ? "yes" : "no",
             x->cpu.label_smoothing, (long long)x->cpu.ignore_index);
    return buf;
}

/* ct_op_cross_entropy_rows, CPU against GPU, on one setup. */
static void rows_compare(const xent_setup *x, const char *what) {
    /* Per row, into host arrays from one copy back: each row's loss as the CPU's, counts exactly. A
     * row's loss is w (lse - z_y) (and smoothing's terms): a small one keeps the rounding of its
     * log-sum-exp, so its error is relative to that scale, w (max |z| + log C + 1), not to itself.
     * Called on one setup in four: the emulated kernel is slow under the sanitizers, and every kind
     * of setup still comes round over the test's hundreds. */
    double *rc = malloc((size_t)x->rows * 4 * sizeof *rc), *nc = rc + x->rows, *rg = nc + x->rows, *ng = rg + x->rows;
    int64_t bc = ct_op_cross_entropy_rows(&x->logits, &x->target, &x->cpu, rc, nc);
    int64_t bg = ct_op_cross_entropy_rows(&x->g_logits, &x->g_target, &x->gpu, rg, ng);
    CHECK(bc == -1 && bg == -1, "%s: rows report invalid rows (cpu %lld, gpu %lld)", what, (long long)bc,
          (long long)bg);
    double wmax = 1;
    for (int64_t j = 0; x->cpu.weight && j < x->c; j++) wmax = fmax(wmax, ((const double *)x->weight.data)[j]);
    const float *z32 = x->dt == CT_F32 ? x->logits.data : NULL;
    const double *z64 = x->dt == CT_F64 ? x->logits.data : NULL;
    int64_t off = 0, first = -1; /* rows outside the bound, and the first of them */
    for (int64_t r = 0; r < x->rows; r++) {
        double zmax = 0;
        for (int64_t j = r * x->c; j < (r + 1) * x->c; j++) zmax = fmax(zmax, fabs(z32 ? (double)z32[j] : z64[j]));
        double scale = wmax * (zmax + log((double)x->c) + 1);
        bool ok = (fabs(rg[r] - rc[r]) <= 1e-12 * fmax(fabs(rc[r]), scale) || (isnan(rg[r]) && isnan(rc[r]))) &&
                  ng[r] == nc[r];
        if (!ok && first < 0) first = r;
        off += !ok;
    }
    CHECK(off == 0, "%s: %lld rows differ, the first %lld: loss gpu %.17g, cpu %.17g; count gpu %g, cpu %g", what,
          (long long)off, (long long)first, first < 0 ? 0 : rg[first], first < 0 ? 0 : rc[first],
          first < 0 ? 0 : ng[first], first < 0 ? 0 : nc[first]);
    free(rc);
}

/* Forward and backward, CPU against GPU, on one random setup. */
static void xent_compare(xent_setup *x) {
    char what[160], w2[200];
    xent_str(x, what, sizeof what);
    double sc = 0, cc = 0, sg = -1, cg = -1;
    int64_t bc = ct_op_cross_entropy_forward(&x->logits, &x->target, &x->cpu, &sc, &cc);
    int64_t bg = ct_op_cross_entropy_forward(&x->g_logits, &x->g_target, &x->gpu, &sg, &cg);
    CHECK(bc == -1 && bg == -1, "%s: forward reports invalid rows (cpu %lld, gpu %lld)", what, (long long)bc,
          (long long)bg);
    snprintf(w2, sizeof w2, "%s: sum", what);
    check_sum(w2, sg, sc);
    snprintf(w2, sizeof w2, "%s: count", what);
    check_sum(w2, cg, cc);
    if (irand(0, 3) == 0) rows_compare(x, what); /* one setup in four: see rows_compare */

    double scale = urand(0.1, 3.0) * (irand(0, 1) ? 1.0 : -1.0);
    ct_tensor dc = ct_ct_zeros(x->dt, x->ndim, x->shape);
    /* dlogits starts as garbage: backward must overwrite every element, ignored rows included */
    ct_tensor junk = ct_ct_rand(&rng, x->dt, x->ndim, x->shape, -9, 9);
    ct_tensor dg = ct_ct_to_gpu(&junk);
    bc = ct_op_cross_entropy_backward(&x->logits, &x->target, &x->cpu, scale, &dc);
    bg = ct_op_cross_entropy_backward(&x->g_logits, &x->g_target, &x->gpu, scale, &dg);
    CHECK(bc == -1 && bg == -1, "%s: backward reports invalid rows (cpu %lld, gpu %lld)", what, (long long)bc,
          (long long)bg);
    snprintf(w2, sizeof w2, "%s: dlogits (scale %g)", what, scale);
    ct_ct_check_close(w2, &dg, &dc, grad_tol(x->dt), grad_floor(x->dt, scale));

    /* The fused classifier on the GPU, in place on a copy of the logits: the forward's sums (the
     * same per-row values through the same reduction) and the CPU backward's gradient. */
    ct_tensor fz = ct_ct_to_gpu(&x->logits);
    double sf = -1, cf = -1;
    bg = ct_op_fused_classifier(&fz, &x->g_target, &x->gpu, scale, &sf, &cf, &fz);
    CHECK(bg == -1, "%s: fused reports invalid row %lld", what, (long long)bg);
    snprintf(w2, sizeof w2, "%s: fused sum", what);
    check_sum(w2, sf, sc);
    snprintf(w2, sizeof w2, "%s: fused count", what);
    check_sum(w2, cf, cc);
    snprintf(w2, sizeof w2, "%s: fused dlogits in place (scale %g)", what, scale);
    ct_ct_check_close(w2, &fz, &dc, grad_tol(x->dt), grad_floor(x->dt, scale));
    ct_tensor ts[4] = {dc, junk, dg, fz};
    free_all(ts, 4);
}

static void xent_random(void) {
    for (int dti = 0; dti < 2; dti++) {
        ct_dtype dt = dti ? CT_F64 : CT_F32;
        for (int k = 0; k < 24; k++) {
            xent_setup x;
            xent_make(&x, dt, 0, false);
            xent_compare(&x);
            xent_free(&x);
        }
        /* many rows: the per-row values go through several reduction blocks */
        xent_setup x;
        xent_make(&x, dt, irand(20000, 70000) / (dt == CT_F64 ? 4 : 1), true);
        xent_compare(&x);
        xent_free(&x);
    }
}

/* Two invalid targets (one too large, one negative and not ignore_index): both backends report the
 * first row, forward and backward, and backward still writes the same gradient everywhere. */
static void xent_invalid(void) {
    for (int dti = 0; dti < 2; dti++) {
        xent_setup x;
        xent_make(&x, dti ? CT_F64 : CT_F32, irand(3, 400), false);
        int64_t r1 = irand(0, x.rows - 2), r2 = irand(r1 + 1, x.rows - 1);
        bool big_first = irand(0, 1);
        set_target(&x.target, r1, big_first ? x.c + irand(0, 5) : -7);
        set_target(&x.target, r2, big_first ? -7 : x.c);
        if (x.cpu.ignore_index == -7) x.cpu.ignore_index = x.gpu.ignore_index = -100;
        ct_tensor_free(&x.g_target);
        x.g_target = ct_ct_to_gpu(&x.target);
        double s = 0, n = 0;
        int64_t bc = ct_op_cross_entropy_forward(&x.logits, &x.target, &x.cpu, &s, &n);
        int64_t bg = ct_op_cross_entropy_forward(&x.g_logits, &x.g_target, &x.gpu, &s, &n);
        CHECK(bc == r1 && bg == r1, "invalid targets at rows %lld and %lld: forward says cpu %lld, gpu %lld",
              (long long)r1, (long long)r2, (long long)bc, (long long)bg);
        double *rows4 = malloc((size_t)x.rows * 4 * sizeof *rows4);
        bc = ct_op_cross_entropy_rows(&x.logits, &x.target, &x.cpu, rows4, rows4 + x.rows);
        bg = ct_op_cross_entropy_rows(&x.g_logits, &x.g_target, &x.gpu, rows4 + 2 * x.rows, rows4 + 3 * x.rows);
        free(rows4);
        CHECK(bc == r1 && bg == r1, "invalid targets at rows %lld and %lld: the rows op says cpu %lld, gpu %lld",
              (long long)r1, (long long)r2, (long long)bc, (long long)bg);
        double scale = urand(0.5, 2.0);
        ct_tensor dc = ct_ct_zeros(x.dt, x.ndim, x.shape), dg = ct_ct_to_gpu(&dc);
        bc = ct_op_cross_entropy_backward(&x.logits, &x.target, &x.cpu, scale, &dc);
        bg = ct_op_cross_entropy_backward(&x.g_logits, &x.g_target, &x.gpu, scale, &dg);
        CHECK(bc == r1 && bg == r1, "invalid targets at rows %lld and %lld: backward says cpu %lld, gpu %lld",
              (long long)r1, (long long)r2, (long long)bc, (long long)bg);
        ct_ct_check_close("xent dlogits with invalid rows", &dg, &dc, grad_tol(x.dt), grad_floor(x.dt, scale));
        /* The fused classifier reports the same first row and, in place, leaves the logits as they were. */
        ct_tensor fz = ct_ct_to_gpu(&x.logits);
        bg = ct_op_fused_classifier(&fz, &x.g_target, &x.gpu, scale, &s, &n, &fz);
        CHECK(bg == r1, "invalid targets at rows %lld and %lld: fused says gpu %lld", (long long)r1, (long long)r2,
              (long long)bg);
        ct_ct_check_equal("fused with an invalid target leaves the logits untouched", &fz, &x.logits);
        ct_tensor ts[3] = {dc, dg, fz};
        free_all(ts, 3);
        xent_free(&x);
    }
}

/* A NaN logit makes the sum NaN on both backends and its row's gradient NaN; backward in place. */
static void xent_nan_and_in_place(void) {
    for (int dti = 0; dti < 2; dti++) {
        ct_dtype dt = dti ? CT_F64 : CT_F32;
        xent_setup x;
        xent_make(&x, dt, irand(2, 200), false);
        /* a row with a valid, not ignored target gets the NaN */
        x.cpu.ignore_index = x.gpu.ignore_index = -100;
        int64_t row = irand(0, x.rows - 1);
        set_target(&x.target, row, irand(0, x.c - 1));
        ct_tensor_set(&x.logits, row * x.c + irand(0, x.c - 1), NAN);
        ct_tensor_free(&x.g_logits);
        ct_tensor_free(&x.g_target);
        x.g_logits = ct_ct_to_gpu(&x.logits);
        x.g_target = ct_ct_to_gpu(&x.target);
        double sc = 0, cc = 0, sg = 0, cg = 0;
        ct_op_cross_entropy_forward(&x.logits, &x.target, &x.cpu, &sc, &cc);
        ct_op_cross_entropy_forward(&x.g_logits, &x.g_target, &x.gpu, &sg, &cg);
        CHECK(isnan(sc) && isnan(sg), "NaN logit: sums cpu %g gpu %g (both must be NaN)", sc, sg);

        /* in place: dlogits is the logits tensor itself */
        double scale = urand(0.1, 2.0);
        ct_tensor dc = ct_ct_zeros(dt, x.ndim, x.shape);
        ct_op_cross_entropy_backward(&x.logits, &x.target, &x.cpu, scale, &dc);
        ct_op_cross_entropy_backward(&x.g_logits, &x.g_target, &x.gpu, scale, &x.g_logits);
        ct_ct_check_close("xent dlogits in place (with a NaN row)", &x.g_logits, &dc, grad_tol(dt),
                          grad_floor(dt, scale));
        ct_tensor_free(&dc);
        xent_free(&x);
    }
}

/* --- pointwise losses ---------------------------------------------------------------------------- */

static const char *kind_name(ct_pointwise_loss k) {
    return k == CT_LOSS_MSE ? "mse" : k == CT_LOSS_L1 ? "l1" : k == CT_LOSS_HUBER ? "huber" : "bce_with_logits";
}

static void pointwise_case(ct_dtype dt, ct_pointwise_loss kind, bool big) {
    int ndim = (int)irand(1, 3);
    int64_t shape[3] = {irand(1, 40), irand(1, 30), irand(1, 9)};
    if (big) {
        ndim = 2;
        shape[0] = irand(1000, 3000);
        shape[1] = irand(60, 130);
    }
    bool bce = kind == CT_LOSS_BCE_LOGITS;
    double lim = bce && irand(0, 1) ? 40.0 : 3.0;
    ct_tensor pred = ct_ct_rand(&rng, dt, ndim, shape, -lim, lim);
    ct_tensor target = ct_ct_rand(&rng, dt, ndim, shape, bce ? 0.0 : -3.0, bce ? 1.0 : 3.0);
    int64_t n = ct_tensor_numel(&pred);
    if (!bce) /* d == 0 in places: sign(0) = 0, huber's quadratic side */
        for (int64_t i = 0; i < n; i++)
            if (irand(0, 19) == 0) ct_tensor_set(&target, i, ct_tensor_get(&pred, i));
    ct_pointwise_opts oc = {.delta = urand(0.1, 2.0), .pos_weight = NULL}, og = oc;
    ct_tensor pw = {0}, gpw = {0};
    int pw_kind = bce ? (int)irand(0, 2) : 0;
    if (pw_kind) {
        int64_t npw = pw_kind == 1 ? 1 : shape[ndim - 1];
        pw = ct_ct_rand(&rng, CT_F64, 1, &npw, 0.2, 5.0);
        gpw = ct_ct_to_gpu(&pw);
        oc.pos_weight = &pw;
        og.pos_weight = &gpw;
    }
    ct_tensor gpred = ct_ct_to_gpu(&pred), gtarget = ct_ct_to_gpu(&target);
    char what[160];
    snprintf(what, sizeof what, "%s %s numel %lld delta %g pos_weight %s", kind_name(kind), ct_dtype_name(dt),
             (long long)n, oc.delta, pw_kind == 0 ? "none" : pw_kind == 1 ? "[1]" : "[last dim]");

    double sc = ct_op_pointwise_loss_forward(kind, &oc, &pred, &target);
    double sg = ct_op_pointwise_loss_forward(kind, &og, &gpred, &gtarget);
    CHECK(isfinite(sc), "%s: CPU sum %g is not finite", what, sc);
    char w2[200];
    snprintf(w2, sizeof w2, "%s: sum", what);
    check_sum(w2, sg, sc);
    /* per row (the first dimension), each to the tolerance of a sum */
    double *rc = malloc(2 * (size_t)shape[0] * sizeof *rc), *rg = rc + shape[0];
    CT_ASSERT(rc);
    ct_op_pointwise_loss_rows(kind, &oc, &pred, &target, rc);
    ct_op_pointwise_loss_rows(kind, &og, &gpred, &gtarget, rg);
    for (int64_t r = 0; r < shape[0]; r++) {
        snprintf(w2, sizeof w2, "%s: row %lld of %lld", what, (long long)r, (long long)shape[0]);
        check_sum(w2, rg[r], rc[r]);
    }
    free(rc);

    double scale = urand(0.1, 3.0) * (irand(0, 1) ? 1.0 : -1.0);
    ct_tensor dc = ct_ct_zeros(dt, ndim, shape);
    ct_tensor junk = ct_ct_rand(&rng, dt, ndim, shape, -9, 9);
    ct_tensor dg = ct_ct_to_gpu(&junk);
    ct_op_pointwise_loss_backward(kind, &oc, &pred, &target, scale, &dc);
    ct_op_pointwise_loss_backward(kind, &og, &gpred, &gtarget, scale, &dg);
    snprintf(w2, sizeof w2, "%s: dpred (scale %g)", what, scale);
    ct_ct_check_close(w2, &dg, &dc, grad_tol(dt), grad_floor(dt, scale));
    ct_tensor ts[9] = {pred, target, pw, gpw, gpred, gtarget, dc, junk, dg};
    free_all(ts, 9);
}

static void pointwise_random(void) {
    const ct_pointwise_loss kinds[] = {CT_LOSS_MSE, CT_LOSS_L1, CT_LOSS_HUBER, CT_LOSS_BCE_LOGITS};
    for (int dti = 0; dti < 2; dti++)
        for (int k = 0; k < 4; k++) {
            for (int rep = 0; rep < 6; rep++) pointwise_case(dti ? CT_F64 : CT_F32, kinds[k], false);
            pointwise_case(dti ? CT_F64 : CT_F32, kinds[k], true);
        }
}

/* --- language-model token values ------------------------------------------------------------------- */

/* ct_op_token_values, CPU against GPU: class counts around a warp's 32 lanes and far above, f32 and
 * f64, i64 and i32 labels, with planted rows for each rule: a NaN (NLL NaN, the first NaN is the
 * argmax), a largest +inf (NLL NaN), maxima tied within one lane's classes and across lanes (the first
 * wins), a -inf, a confident token (NLL near 1e-25), labels outside [0, C) (0 and 0). Hits exactly;
 * NLLs to 1e-12 of their log-sum-exp's scale (max |z| + log C + 1), both summing exps in double. */
static void token_values_compare(void) {
    static const int64_t widths[] = {1, 31, 32, 33, 300, 2000};
    for (int setup = 0; setup < 8; setup++) {
        const ct_dtype dt = setup % 2 ? CT_F32 : CT_F64, lt = setup % 4 < 2 ? CT_I64 : CT_I32;
        const int64_t c = widths[irand(0, 5)], rows = irand(1, 90);
        ct_tensor z = ct_ct_zeros(dt, 2, (int64_t[]){rows, c}), y = ct_ct_zeros(lt, 1, (int64_t[]){rows});
        const double spread = urand(0.5, 20);
        for (int64_t i = 0; i < rows * c; i++) ct_tensor_set(&z, i, urand(-spread, spread));
        for (int64_t r = 0; r < rows; r++) {
            set_target(&y, r, irand(-1, c)); /* -1 and c: outside */
            int64_t j = irand(0, c - 1), k = irand(0, c - 1), same_lane = j + 32 < c ? j + 32 : k;
            switch (c > 1 ? r % 8 : 7) {
            case 0: ct_tensor_set(&z, r * c + j, NAN); break;
            case 1: ct_tensor_set(&z, r * c + j, INFINITY); break;
            case 2: ct_tensor_set(&z, r * c + j, 2 * spread), ct_tensor_set(&z, r * c + k, 2 * spread); break;
            case 3: ct_tensor_set(&z, r * c + j, 2 * spread), ct_tensor_set(&z, r * c + same_lane, 2 * spread); break;
            case 4: ct_tensor_set(&z, r * c + j, -INFINITY); break;
            case 5:
                for (int64_t i = 0; i < c; i++) ct_tensor_set(&z, r * c + i, i == j ? 60.0 : 0.0);
                set_target(&y, r, j);
                break;
            case 6: set_target(&y, r, irand(0, 1) ? -100 : c + 3); break;
            default: break;
            }
        }
        ct_tensor gz = ct_ct_to_gpu(&z), gy = ct_ct_to_gpu(&y);
        double *v = malloc(4 * (size_t)rows * sizeof *v), *nc = v, *hc = v + rows, *ng = v + 2 * rows, *hg = v + 3 * rows;
        ct_op_token_values(&z, &y, nc, hc);
        ct_op_token_values(&gz, &gy, ng, hg);
        int64_t off = 0, first = -1;
        for (int64_t r = 0; r < rows; r++) {
            double zmax = 0;
            for (int64_t i = r * c; i < (r + 1) * c; i++) {
                double e = fabs(ct_tensor_get(&z, i));
                if (isfinite(e)) zmax = fmax(zmax, e);
            }
            double scale = zmax + log((double)c) + 1;
            bool ok = hg[r] == hc[r] && (ng[r] == nc[r] || (isnan(ng[r]) && isnan(nc[r])) ||
                                         fabs(ng[r] - nc[r]) <= 1e-12 * fmax(fabs(nc[r]), scale));
            if (!ok && first < 0) first = r;
            off += !ok;
        }
        CHECK(off == 0, "token values (%s logits, %s labels, %lld x %lld): %lld rows differ, the first %lld: gpu nll "
              "%.17g hit %g, cpu %.17g and %g", ct_dtype_name(dt), ct_dtype_name(lt), (long long)rows, (long long)c,
              (long long)off, (long long)first, first >= 0 ? ng[first] : 0.0, first >= 0 ? hg[first] : 0.0,
              first >= 0 ? nc[first] : 0.0, first >= 0 ? hc[first] : 0.0);
        free(v);
        ct_tensor ts[4] = {z, y, gz, gy};
        free_all(ts, 4);
    }
}

/* ct_op_class_ranks, CPU against GPU, exactly: widths around a warp's 32 lanes and far above, f32 and
 * f64, i64 and i32 labels, scores drawn from few values (ties everywhere, across lanes too), and planted
 * rows: a NaN label score with NaNs after it, a NaN elsewhere, +inf and -inf, a row of equal scores,
 * labels outside [0, C) (-1). */
static void class_ranks_compare(void) {
    static const int64_t widths[] = {1, 2, 31, 32, 33, 300, 2000};
    for (int setup = 0; setup < 10; setup++) {
        const ct_dtype dt = setup % 2 ? CT_F32 : CT_F64, lt = setup % 4 < 2 ? CT_I64 : CT_I32;
        const int64_t c = widths[irand(0, 6)], rows = irand(1, 90);
        ct_tensor z = ct_ct_zeros(dt, 2, (int64_t[]){rows, c}), y = ct_ct_zeros(lt, 1, (int64_t[]){rows});
        for (int64_t i = 0; i < rows * c; i++) ct_tensor_set(&z, i, irand(0, 1) ? urand(-5, 5) : irand(-2, 2));
        for (int64_t r = 0; r < rows; r++) {
            int64_t label = irand(0, c - 1), j = irand(0, c - 1);
            set_target(&y, r, label);
            switch (r % 7) {
            case 0: ct_tensor_set(&z, r * c + label, NAN), ct_tensor_set(&z, r * c + j, NAN); break;
            case 1: ct_tensor_set(&z, r * c + j, NAN); break;
            case 2: ct_tensor_set(&z, r * c + j, INFINITY), ct_tensor_set(&z, r * c + label, INFINITY); break;
            case 3: ct_tensor_set(&z, r * c + label, -INFINITY); break;
            case 4:
                for (int64_t i = 0; i < c; i++) ct_tensor_set(&z, r * c + i, 1.5);
                break;
            case 5: set_target(&y, r, irand(0, 1) ? -1 : c); break;
            default: break;
            }
        }
        ct_tensor gz = ct_ct_to_gpu(&z), gy = ct_ct_to_gpu(&y);
        int64_t *v = malloc(4 * (size_t)rows * sizeof *v);
        ct_op_class_ranks(&z, &y, v, v + rows);
        ct_op_class_ranks(&gz, &gy, v + 2 * rows, v + 3 * rows);
        int64_t off = 0, first = -1;
        for (int64_t r = 0; r < rows; r++)
            if (v[r] != v[2 * rows + r] || v[rows + r] != v[3 * rows + r]) {
                if (first < 0) first = r;
                off++;
            }
        CHECK(off == 0, "class ranks (%s scores, %s labels, %lld x %lld): %lld rows differ, the first %lld: gpu pred "
              "%lld above %lld, cpu %lld and %lld", ct_dtype_name(dt), ct_dtype_name(lt), (long long)rows,
              (long long)c, (long long)off, (long long)first, (long long)(first >= 0 ? v[2 * rows + first] : 0),
              (long long)(first >= 0 ? v[3 * rows + first] : 0), (long long)(first >= 0 ? v[first] : 0),
              (long long)(first >= 0 ? v[rows + first] : 0));
        free(v);
        ct_tensor ts[4] = {z, y, gz, gy};
        free_all(ts, 4);
    }
}

int main(void) {
    ct_cuda_test_begin("test_cuda_losses");
    ct_rng_init(&rng, ct_test_seed, 0, CT_RNG_USER);
    xent_random();
    xent_invalid();
    xent_nan_and_in_place();
    pointwise_random();
    token_values_compare();
    class_ranks_compare();
    return ct_test_finish();
}
