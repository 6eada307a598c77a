/* Normalisation kernels over one real type R; included by norm.c for float and double. Every sum
 * is a float64 accumulator, so float32 statistics carry no more error than their final rounding. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>

/* Batch norm forward over x as [n, c, inner]; one channel per iteration, so threads never share
 * an output. */
static void FN(bn_fwd)(const R *x, const R *w, const R *b, R *rm, R *rv, bool training, double momentum,
                       double eps, R *y, double *smean, double *srstd, int64_t n, int64_t c, int64_t inner) {
    double count = (double)(n * inner);
#pragma omp parallel for schedule(static) if (n * c * inner > CT_OMP_MIN)
    for (int64_t ch = 0; ch < c; ch++) {
        double mean, rstd;
        if (training) {
            /* Two passes (mean, then squared deviations): no cancellation when |mean| >> std. */
            double sum = 0.0;
            for (int64_t i = 0; i < n; i++) {
                const R *p = x + (i * c + ch) * inner;
                for (int64_t s = 0; s < inner; s++) sum += p[s];
            }
            mean = sum / count;
            double sq = 0.0;
            for (int64_t i = 0; i < n; i++) {
                const R *p = x + (i * c + ch) * inner;
                for (int64_t s = 0; s < inner; s++) {
                    double d = p[s] - mean;
                    sq += d * d;
                }
            }
            double var = sq / count;
            rstd = 1.0 / sqrt(var + eps);
            /* PyTorch updates running_var with the unbiased estimate (count > 1 is the caller's check). */
            rm[ch] = (R)((1.0 - momentum) * (double)rm[ch] + momentum * mean);
            rv[ch] = (R)((1.0 - momentum) * (double)rv[ch] + momentum * sq / (count - 1.0));
        } else {
            mean = rm[ch];
            rstd = 1.0 / sqrt((double)rv[ch] + eps);
        }
        smean[ch] = mean;
        srstd[ch] = rstd;
        double scale = w ? (double)w[ch] * rstd : rstd;
        double shift = b ? (double)b[ch] : 0.0;
        for (int64_t i = 0; i < n; i++) {
            const R *p = x + (i * c + ch) * inner;
            R *q = y + (i * c + ch) * inner;
            for (int64_t s = 0; s < inner; s++) q[s] = (R)((p[s] - mean) * scale + shift);
        }
    }
}

static void FN(bn_bwd)(const R *x, const R *dy, const R *w, const double *smean, const double *srstd,
                       bool training, R *dx, R *dw, R *db, int64_t n, int64_t c, int64_t inner) {
    double count = (double)(n * inner);
#pragma omp parallel for schedule(static) if (n * c * inner > CT_OMP_MIN)
    for (int64_t ch = 0; ch < c; ch++) {
        double mean = smean[ch], rstd = srstd[ch];
        double sum_dy = 0.0, sum_dy_xhat = 0.0;
        if (training || dw || db)
            for (int64_t i = 0; i < n; i++) {
                const R *p = x + (i * c + ch) * inner;
                const R *g = dy + (i * c + ch) * inner;
                for (int64_t s = 0; s < inner; s++) {
                    sum_dy += g[s];
                    sum_dy_xhat += g[s] * ((p[s] - mean) * rstd);
                }
            }
        if (dw) dw[ch] += (R)sum_dy_xhat;
        if (db) db[ch] += (R)sum_dy;
        if (!dx) continue;
        double k = (w ? (double)w[ch] : 1.0) * rstd;
        /* Training: the batch mean and variance depend on every x, hence the two mean terms. */
        double a = training ? sum_dy / count : 0.0;
        double bcoef = training ? sum_dy_xhat / count : 0.0;
        for (int64_t i = 0; i < n; i++) {
            const R *p = x + (i * c + ch) * inner;
            const R *g = dy + (i * c + ch) * inner;
            R *q = dx + (i * c + ch) * inner;
            for (int64_t s = 0; s < inner; s++) q[s] = (R)(k * (g[s] - a - (p[s] - mean) * rstd * bcoef));
        }
    }
}

/* A row's sums go through CT_LN_LANES independent float64 accumulators, added up in lane order
 * at the end: one running sum is a chain of dependent adds that runs an element per add's latency,
 * the lanes vectorise. The order is the source's, so every level gives the same sums. */
#ifndef CT_LN_LANES
#define CT_LN_LANES 8
static inline double ct_ln_lanes_total(const double *acc) {
    double t = 0.0;
    for (int l = 0; l < CT_LN_LANES; l++) t += acc[l];
    return t;
}
/* The lanes as vectors of the level's width (CT_LN_VD doubles, CT_LN_LANES / CT_LN_VD of them), for
 * loops the compiler's vectoriser leaves scalar (two sums fed by one value). Lane l is still element
 * j + l of each step. */
#if defined(__AVX512F__)
#define CT_LN_VD 8
#elif defined(__AVX__)
#define CT_LN_VD 4
#else
#define CT_LN_VD 2
#endif
typedef double ct_ln_vd __attribute__((vector_size(CT_LN_VD * sizeof(double))));
#endif
/* CT_LN_VD elements of R, loaded from anywhere and widened to float64 */
typedef R FN(ln_vr) __attribute__((vector_size(CT_LN_VD * sizeof(R)), aligned(sizeof(R))));
static inline ct_ln_vd FN(ln_load)(const R *p) { return __builtin_convertvector(*(const FN(ln_vr) *)p, ct_ln_vd); }

/* sum(p) and then sum((p - mean)^2) of a row of f (two passes: no cancellation when |mean| >> std). */
static inline void FN(ln_row_stats)(const R *p, int64_t f, double *mean_out, double *var_out) {
    double acc[CT_LN_LANES] = {0};
    int64_t j = 0;
    for (; j + CT_LN_LANES <= f; j += CT_LN_LANES)
        for (int l = 0; l < CT_LN_LANES; l++) acc[l] += p[j + l];
    double sum = ct_ln_lanes_total(acc);
    for (; j < f; j++) sum += p[j];
    const double mean = sum / (double)f;
    double sq[CT_LN_LANES] = {0};
    for (j = 0; j + CT_LN_LANES <= f; j += CT_LN_LANES)
        for (int l = 0; l < CT_LN_LANES; l++) {
            double d = p[j + l] - mean;
            sq[l] += d * d;
        }
    double var = ct_ln_lanes_total(sq);
    for (; j < f; j++) {
        double d = p[j] - mean;
        var += d * d;
    }
    *mean_out = mean;
    *var_out = var / (double)f;
}

/* With res (and sum), the row normalised is x + res, written to sum first (and read back from there
 * while it is in cache). */
static void FN(ln_fwd)(const R *x, const R *res, const R *w, const R *b, double eps, R *sum, R *y, double *smean,
                       double *srstd, int64_t rows, int64_t f) {
#pragma omp parallel for schedule(static) if (rows * f > CT_OMP_MIN)
    for (int64_t r = 0; r < rows; r++) {
        const R *p = x + r * f;
        R *q = y + r * f;
        if (res) {
            R *s = sum + r * f;
            const R *e = res + r * f;
            for (int64_t j = 0; j < f; j++) s[j] = p[j] + e[j];
            p = s;
        }
        double mean, var;
        FN(ln_row_stats)(p, f, &mean, &var);
        double rstd = 1.0 / sqrt(var + eps);
        smean[r] = mean;
        srstd[r] = rstd;
        for (int64_t j = 0; j < f; j++) {
            double v = (p[j] - mean) * rstd;
            if (w) v *= w[j];
            if (b) v += b[j];
            q[j] = (R)v;
        }
    }
}

/* Columns per block of the parameter-gradient pass: a block's float64 sums live on the stack. */
#define CT_LN_COLS 64

/* With dres, each row of dx is dres's plus the norm's (rounded first, as a separate add takes it). */
static void FN(ln_bwd)(const R *x, const R *dy, const R *w, const double *smean, const double *srstd, const R *dres,
                       R *dx, R *dw, R *db, int64_t rows, int64_t f) {
    if (dx) {
#pragma omp parallel for schedule(static) if (rows * f > CT_OMP_MIN)
        for (int64_t r = 0; r < rows; r++) {
            const R *p = x + r * f;
            const R *g = dy + r * f;
            R *q = dx + r * f;
            double mean = smean[r], rstd = srstd[r];
            ct_ln_vd lanes_g[CT_LN_LANES / CT_LN_VD] = {{0}}, lanes_gx[CT_LN_LANES / CT_LN_VD] = {{0}};
            int64_t j = 0;
            for (; j + CT_LN_LANES <= f; j += CT_LN_LANES)
                for (int h = 0; h < CT_LN_LANES / CT_LN_VD; h++) {
                    const int64_t e = j + h * CT_LN_VD;
                    ct_ln_vd gj = FN(ln_load)(g + e);
                    if (w) gj *= FN(ln_load)(w + e);
                    lanes_g[h] += gj;
                    lanes_gx[h] += gj * ((FN(ln_load)(p + e) - mean) * rstd);
                }
            double sum_g = 0.0, sum_g_xhat = 0.0; /* the lanes in order, as ct_ln_lanes_total adds them */
            for (int l = 0; l < CT_LN_LANES; l++) {
                sum_g += lanes_g[l / CT_LN_VD][l % CT_LN_VD];
                sum_g_xhat += lanes_gx[l / CT_LN_VD][l % CT_LN_VD];
            }
            for (; j < f; j++) {
                double gj = w ? (double)g[j] * w[j] : (double)g[j];
                sum_g += gj;
                sum_g_xhat += gj * ((p[j] - mean) * rstd);
            }
            double a = sum_g / (double)f, bcoef = sum_g_xhat / (double)f;
            for (j = 0; j < f; j++) {
                double gj = w ? (double)g[j] * w[j] : (double)g[j];
                q[j] = (R)(rstd * (gj - a - (p[j] - mean) * rstd * bcoef));
            }
            /* a pass of its own over the row (in cache): in one expression the compiler could
             * contract the add into the product (an FMA), and double would lose the separate add's bits */
            if (dres)
                for (j = 0; j < f; j++) q[j] = dres[r * f + j] + q[j];
        }
    }
    if (!dw && !db) return;
    /* Parameter gradients sum over rows: each thread owns a block of columns, so no two threads
     * write the same element and the summation order does not depend on the thread count. */
    int64_t blocks = (f + CT_LN_COLS - 1) / CT_LN_COLS;
#pragma omp parallel for schedule(static) if (rows * f > CT_OMP_MIN)
    for (int64_t blk = 0; blk < blocks; blk++) {
        int64_t j0 = blk * CT_LN_COLS, j1 = j0 + CT_LN_COLS < f ? j0 + CT_LN_COLS : f;
        double accw[CT_LN_COLS] = {0}, accb[CT_LN_COLS] = {0};
        for (int64_t r = 0; r < rows; r++) {
            const R *p = x + r * f;
            const R *g = dy + r * f;
            double mean = smean[r], rstd = srstd[r];
            for (int64_t j = j0; j < j1; j++) {
                accw[j - j0] += g[j] * ((p[j] - mean) * rstd);
                accb[j - j0] += g[j];
            }
        }
        for (int64_t j = j0; j < j1; j++) {
            if (dw) dw[j] += (R)accw[j - j0];
            if (db) db[j] += (R)accb[j - j0];
        }
    }
}
