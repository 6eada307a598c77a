/* Loss kernels over one real type R; included by loss.c for float and double. Everything is
 * computed and accumulated in double and only the gradients are stored as R (the cross-entropy's
 * exps through loss.c's exp_shifted, vectorised). Sums go through
 * CT_LOSS_CHUNKS fixed partial sums (see loss.c), so they do not depend on the thread count. */
#include <math.h>
#include <stdint.h>

/* --- softmax cross-entropy ---------------------------------------------------------------------- */

/* max and log-sum-exp of one row. A NaN anywhere makes lse NaN (exp(NaN - m) is NaN whatever m is),
 * which is how NaN logits reach the sum instead of being skipped by the comparison. The sum runs over
 * 8 float64 lanes added in lane order at the end, so that its exps vectorise. */
static double FN(row_lse)(const R *z, int64_t c) {
    double m = z[0];
    for (int64_t j = 1; j < c; j++)
        if (z[j] > m) m = z[j];
    double lanes[8] = {0}, se = 0.0;
    int64_t j = 0;
    for (; j + 8 <= c; j += 8)
        for (int l = 0; l < 8; l++) lanes[l] += FN(exp_shifted)(z[j + l], m);
    for (int l = 0; l < 8; l++) se += lanes[l];
    for (; j < c; j++) se += FN(exp_shifted)(z[j], m);
    return m + log(se);
}

/* The loss of a row with a valid target y, given its log-sum-exp. */
static double FN(row_loss)(const R *zr, int64_t c, int64_t y, const double *w, double eps, double lse) {
    double loss = (1.0 - eps) * (w ? w[y] : 1.0) * (lse - (double)zr[y]);
    if (eps != 0.0) {
        /* sum_c w_c (lse - z_c), the smoothing term over all classes */
        double smooth = 0.0;
        if (w)
            for (int64_t j = 0; j < c; j++) smooth += w[j] * (lse - (double)zr[j]);
        else
            for (int64_t j = 0; j < c; j++) smooth += lse - (double)zr[j];
        loss += eps / (double)c * smooth;
    }
    return loss;
}

/* d loss / d z_j = (1-eps) w_y (p_j - [j == y]) + eps/C (W p_j - w_j), W = sum_c w_c; so
 * dz_j = scale * (a p_j - eps/C w_j - [j == y] (1-eps) w_y) with a = (1-eps) w_y + eps/C W.
 * Writes the row's gradient into dr, which may alias zr: z_y is read before the row is written. */
static void FN(row_grad)(const R *zr, int64_t c, int64_t y, const double *w, double eps, double wsum, double scale,
                         double lse, R *dr) {
    double es = eps / (double)c;
    const R zy = zr[y];
    double wy = w ? w[y] : 1.0;
    double a = scale * ((1.0 - eps) * wy + es * wsum);
    double b = scale * es;
    if (w)
        for (int64_t j = 0; j < c; j++) dr[j] = (R)(a * FN(exp_shifted)(zr[j], lse) - b * w[j]);
    else
        for (int64_t j = 0; j < c; j++) dr[j] = (R)(a * FN(exp_shifted)(zr[j], lse) - b);
    /* the target's own term, added to what was computed in double */
    double py = a * FN(exp_shifted)(zy, lse) - b * wy;
    dr[y] = (R)(py - scale * (1.0 - eps) * wy);
}

/* W = sum_c w_c (C when unweighted), the gradient's smoothing term. */
static double FN(weight_sum)(const double *w, int64_t c) {
    double wsum = (double)c;
    if (w) {
        wsum = 0.0;
        for (int64_t j = 0; j < c; j++) wsum += w[j];
    }
    return wsum;
}

static int64_t FN(xent_fwd)(const R *z, const void *tgt, bool t64, int64_t rows, int64_t c, const double *w,
                            double eps, int64_t ignore, double *sum, double *count) {
    double psum[CT_LOSS_CHUNKS], pcount[CT_LOSS_CHUNKS];
    int64_t pbad[CT_LOSS_CHUNKS];
    CT_LOSS_FOR_CHUNKS(rows * c > CT_OMP_MIN, k, {
        double s = 0.0, n = 0.0;
        int64_t bad = -1;
        for (int64_t r = chunk_lo(rows, k); r < chunk_lo(rows, k + 1); r++) {
            int64_t y = target_at(tgt, t64, r);
            if (y == ignore) continue;
            if (y < 0 || y >= c) {
                if (bad < 0) bad = r;
                continue;
            }
            const R *zr = z + r * c;
            s += FN(row_loss)(zr, c, y, w, eps, FN(row_lse)(zr, c));
            n += w ? w[y] : 1.0;
        }
        psum[k] = s;
        pcount[k] = n;
        pbad[k] = bad;
    });
    double s = 0.0, n = 0.0;
    for (int k = 0; k < CT_LOSS_CHUNKS; k++) {
        if (pbad[k] >= 0) return pbad[k]; /* chunks are in row order: the first one found is the first */
        s += psum[k];
        n += pcount[k];
    }
    *sum = s;
    *count = n;
    return -1;
}

/* Each row's loss and count alone, as xent_fwd gives them for that row (0 and 0 when ignored): rows
 * are independent, so any thread count writes the same values. */
static int64_t FN(xent_rows)(const R *z, const void *tgt, bool t64, int64_t rows, int64_t c, const double *w,
                             double eps, int64_t ignore, double *loss, double *count) {
    int64_t pbad[CT_LOSS_CHUNKS];
    CT_LOSS_FOR_CHUNKS(rows * c > CT_OMP_MIN, k, {
        int64_t bad = -1;
        for (int64_t r = chunk_lo(rows, k); r < chunk_lo(rows, k + 1); r++) {
            int64_t y = target_at(tgt, t64, r);
            loss[r] = count[r] = 0.0;
            if (y == ignore) continue;
            if (y < 0 || y >= c) {
                if (bad < 0) bad = r;
                continue;
            }
            const R *zr = z + r * c;
            loss[r] = FN(row_loss)(zr, c, y, w, eps, FN(row_lse)(zr, c));
            count[r] = w ? w[y] : 1.0;
        }
        pbad[k] = bad;
    });
    for (int k = 0; k < CT_LOSS_CHUNKS; k++)
        if (pbad[k] >= 0) return pbad[k];
    return -1;
}

/* The first largest entry of a row, NaN above every number (torch.argmax). Each of 8 lanes keeps
 * its largest entry and where it first was (a compare and two blends, so it vectorises where a
 * running argmax would not), and keeps a NaN it meets (a blend on an unordered compare); the first of
 * the lanes' largest is then the row's. A row with a NaN takes the plain scan, which ranks it first. */
static int64_t FN(first_argmax)(const R *zr, int64_t c) {
    R best[8], poison[8];
    int32_t at[8];
    for (int l = 0; l < 8; l++) {
        best[l] = (R)-INFINITY;
        poison[l] = 0;
        at[l] = -1;
    }
    int64_t j = 0;
    for (; j + 8 <= c && c <= INT32_MAX; j += 8)
        for (int l = 0; l < 8; l++) {
            R v = zr[j + l];
            bool more = v > best[l];
            poison[l] = v == v ? poison[l] : v;
            best[l] = more ? v : best[l];
            at[l] = more ? (int32_t)(j + l) : at[l];
        }
    bool nan = false;
    for (int l = 0; l < 8; l++) nan |= isnan(poison[l]);
    for (int64_t k = j; k < c; k++) nan |= isnan(zr[k]);
    int64_t a = 0;
    if (nan) {
        for (int64_t k = 1; k < c && !isnan(zr[a]); k++)
            if (isnan(zr[k]) || zr[k] > zr[a]) a = k;
        return a;
    }
    R m = (R)-INFINITY;
    a = -1;
    for (int l = 0; l < 8; l++)
        if (at[l] >= 0 && (best[l] > m || (best[l] == m && at[l] < a))) {
            m = best[l];
            a = at[l];
        }
    for (; j < c; j++) /* after every block: the strict > keeps an earlier equal one */
        if (zr[j] > m) {
            m = zr[j];
            a = j;
        }
    return a < 0 ? 0 : a; /* every entry -inf: the first */
}

/* Each row's token values (ops_loss.h's ct_op_token_values): the first largest logit a, then the sum
 * of exp(z_j - z_a) over j != a in 8 lanes as row_lse sums, so that its exps vectorise: element j goes
 * to lane j % 8 in order of j, a's block of 8 alone skipping a. Rows are independent: any thread
 * count writes the same values. */
static void FN(token_values)(const R *z, const void *tgt, bool t64, int64_t rows, int64_t c, double *nll,
                             double *hit) {
#pragma omp parallel for schedule(static) if (rows * c > CT_OMP_MIN)
    for (int64_t r = 0; r < rows; r++) {
        int64_t y = target_at(tgt, t64, r);
        nll[r] = hit[r] = 0.0;
        if (y < 0 || y >= c) continue;
        const R *zr = z + r * c;
        int64_t a = FN(first_argmax)(zr, c);
        hit[r] = a == y ? 1.0 : 0.0;
        double m = zr[a];
        if (isnan(m) || isinf(m)) { /* log_softmax's NaN: exp(inf - inf) poisons every entry */
            nll[r] = NAN;
            continue;
        }
        double lanes[8] = {0}, rest = 0.0;
        int64_t j = 0, block_of_a = a / 8 * 8;
        for (; j + 8 <= c && j < block_of_a; j += 8)
            for (int l = 0; l < 8; l++) lanes[l] += FN(exp_shifted)(zr[j + l], m);
        if (j + 8 <= c) {
            for (int l = 0; l < 8; l++) lanes[l] += j + l == a ? 0.0 : FN(exp_shifted)(zr[j + l], m);
            j += 8;
        }
        for (; j + 8 <= c; j += 8)
            for (int l = 0; l < 8; l++) lanes[l] += FN(exp_shifted)(zr[j + l], m);
        for (int l = 0; l < 8; l++) rest += lanes[l];
        for (; j < c; j++)
            if (j != a) rest += FN(exp_shifted)(zr[j], m);
        nll[r] = (m - (double)zr[y]) + log1p(rest);
    }
}

/* How many classes rank above the label y of a row (ops_loss.h's ct_op_class_ranks): before y, those
 * larger or NaN (not <= s[y]); after y, those equal too (not < s[y]); a NaN label is passed only by
 * the NaNs after it. Each loop is a compare and a count, which vectorises. */
static int64_t FN(count_above)(const R *sr, int64_t c, int64_t y) {
    R sy = sr[y];
    int64_t n = 0;
    if (isnan(sy)) {
        for (int64_t j = y + 1; j < c; j++) n += isnan(sr[j]);
        return n;
    }
    for (int64_t j = 0; j < y; j++) n += !(sr[j] <= sy);
    for (int64_t j = y + 1; j < c; j++) n += !(sr[j] < sy);
    return n;
}

static void FN(class_ranks)(const R *s, const void *tgt, bool t64, int64_t rows, int64_t c, int64_t *pred,
                            int64_t *above) {
#pragma omp parallel for schedule(static) if (rows * c > CT_OMP_MIN)
    for (int64_t r = 0; r < rows; r++) {
        const R *sr = s + r * c;
        int64_t y = target_at(tgt, t64, r);
        pred[r] = FN(first_argmax)(sr, c);
        above[r] = y >= 0 && y < c ? FN(count_above)(sr, c, y) : -1;
    }
}

static int64_t FN(xent_bwd)(const R *z, const void *tgt, bool t64, int64_t rows, int64_t c, const double *w,
                            double eps, int64_t ignore, double scale, R *dz) {
    double wsum = FN(weight_sum)(w, c);
    int64_t pbad[CT_LOSS_CHUNKS];
    CT_LOSS_FOR_CHUNKS(rows * c > CT_OMP_MIN, k, {
        int64_t bad = -1;
        for (int64_t r = chunk_lo(rows, k); r < chunk_lo(rows, k + 1); r++) {
            int64_t y = target_at(tgt, t64, r);
            const R *zr = z + r * c;
            R *dr = dz + r * c;
            if (y == ignore || y < 0 || y >= c) {
                if (y != ignore && bad < 0) bad = r;
                for (int64_t j = 0; j < c; j++) dr[j] = 0;
                continue;
            }
            FN(row_grad)(zr, c, y, w, eps, wsum, scale, FN(row_lse)(zr, c), dr);
        }
        pbad[k] = bad;
    });
    for (int k = 0; k < CT_LOSS_CHUNKS; k++)
        if (pbad[k] >= 0) return pbad[k];
    return -1;
}

/* Forward and backward in one pass per row (ct_op_fused_classifier). The targets are checked first,
 * serially (one integer per row, cheap beside a row of logits), so that an invalid one is reported
 * before any row of dz, which may be z itself, is written. The sums go through the same fixed
 * chunks as xent_fwd, so they equal its bits. */
static int64_t FN(xent_fused)(const R *z, const void *tgt, bool t64, int64_t rows, int64_t c, const double *w,
                              double eps, int64_t ignore, double scale, double *sum, double *count, R *dz) {
    for (int64_t r = 0; r < rows; r++) {
        int64_t y = target_at(tgt, t64, r);
        if (y != ignore && (y < 0 || y >= c)) return r;
    }
    double wsum = FN(weight_sum)(w, c);
    double psum[CT_LOSS_CHUNKS], pcount[CT_LOSS_CHUNKS];
    CT_LOSS_FOR_CHUNKS(rows * c > CT_OMP_MIN, k, {
        double s = 0.0, n = 0.0;
        for (int64_t r = chunk_lo(rows, k); r < chunk_lo(rows, k + 1); r++) {
            int64_t y = target_at(tgt, t64, r);
            const R *zr = z + r * c;
            R *dr = dz + r * c;
            if (y == ignore) {
                for (int64_t j = 0; j < c; j++) dr[j] = 0;
                continue;
            }
            double lse = FN(row_lse)(zr, c);
            s += FN(row_loss)(zr, c, y, w, eps, lse); /* reads the row before row_grad overwrites it */
            n += w ? w[y] : 1.0;
            FN(row_grad)(zr, c, y, w, eps, wsum, scale, lse, dr);
        }
        psum[k] = s;
        pcount[k] = n;
    });
    double s = 0.0, n = 0.0;
    for (int k = 0; k < CT_LOSS_CHUNKS; k++) {
        s += psum[k];
        n += pcount[k];
    }
    *sum = s;
    *count = n;
    return -1;
}

/* --- elementwise losses -------------------------------------------------------------------------- */

/* The elementwise losses of x[i] against y[i] for i in [lo, hi), added in order in double; pos_weight
 * is indexed by the element's position in the whole tensor, base + i. */
static double FN(pointwise_range)(ct_pointwise_loss kind, double delta, const double *pw, int64_t npw, const R *x,
                                  const R *y, int64_t base, int64_t lo, int64_t hi) {
    double acc = 0.0;
    switch (kind) {
    case CT_LOSS_MSE:
        for (int64_t i = lo; i < hi; i++) {
            double d = (double)x[i] - (double)y[i];
            acc += d * d;
        }
        break;
    case CT_LOSS_L1:
        for (int64_t i = lo; i < hi; i++) acc += fabs((double)x[i] - (double)y[i]);
        break;
    case CT_LOSS_HUBER:
        for (int64_t i = lo; i < hi; i++) {
            double d = (double)x[i] - (double)y[i], ad = fabs(d);
            acc += ad <= delta ? 0.5 * d * d : delta * (ad - 0.5 * delta);
        }
        break;
    case CT_LOSS_BCE_LOGITS:
        for (int64_t i = lo; i < hi; i++) {
            double v = x[i], t = y[i];
            double lw = pw ? 1.0 + (pw[(base + i) % npw] - 1.0) * t : 1.0;
            /* softplus(-v) = log(1 + exp(-v)) without overflow for either sign of v */
            double sp = fmax(-v, 0.0) + log1p(exp(-fabs(v)));
            acc += (1.0 - t) * v + lw * sp;
        }
        break;
    }
    return acc;
}

static double FN(pointwise_fwd)(ct_pointwise_loss kind, double delta, const double *pw, int64_t npw, const R *x,
                                const R *y, int64_t n) {
    double part[CT_LOSS_CHUNKS];
    CT_LOSS_FOR_CHUNKS(n > CT_OMP_MIN, k, {
        part[k] = FN(pointwise_range)(kind, delta, pw, npw, x, y, 0, chunk_lo(n, k), chunk_lo(n, k + 1));
    });
    double s = 0.0;
    for (int k = 0; k < CT_LOSS_CHUNKS; k++) s += part[k];
    return s;
}

/* loss[r] for each of `rows` rows of m elements: the sum pointwise_fwd gives for the row alone, its
 * chunks the same and added in the same order (bit for bit), the rows shared among the threads. */
static void FN(pointwise_rows)(ct_pointwise_loss kind, double delta, const double *pw, int64_t npw, const R *x,
                               const R *y, int64_t rows, int64_t m, double *loss) {
#pragma omp parallel for if (rows * m > CT_OMP_MIN && rows > 1)
    for (int64_t r = 0; r < rows; r++) {
        const R *xr = x + r * m, *yr = y + r * m;
        double s = 0.0;
        for (int k = 0; k < CT_LOSS_CHUNKS; k++)
            s += FN(pointwise_range)(kind, delta, pw, npw, xr, yr, r * m, chunk_lo(m, k), chunk_lo(m, k + 1));
        loss[r] = s;
    }
}

static void FN(pointwise_bwd)(ct_pointwise_loss kind, double delta, const double *pw, int64_t npw, const R *x,
                              const R *y, int64_t n, double scale, R *dx) {
    switch (kind) {
    case CT_LOSS_MSE:
#pragma omp parallel for if (n > CT_OMP_MIN)
        for (int64_t i = 0; i < n; i++) dx[i] = (R)(2.0 * scale * ((double)x[i] - (double)y[i]));
        break;
    case CT_LOSS_L1:
#pragma omp parallel for if (n > CT_OMP_MIN)
        for (int64_t i = 0; i < n; i++) {
            double d = (double)x[i] - (double)y[i];
            /* torch.sign: 0 at 0, NaN for NaN */
            dx[i] = (R)(scale * (d > 0 ? 1.0 : d < 0 ? -1.0 : d == 0 ? 0.0 : d));
        }
        break;
    case CT_LOSS_HUBER:
#pragma omp parallel for if (n > CT_OMP_MIN)
        for (int64_t i = 0; i < n; i++) {
            double d = (double)x[i] - (double)y[i];
            dx[i] = (R)(scale * (d < -delta ? -delta : d > delta ? delta : d));
        }
        break;
    case CT_LOSS_BCE_LOGITS:
#pragma omp parallel for if (n > CT_OMP_MIN)
        for (int64_t i = 0; i < n; i++) {
            double v = x[i], t = y[i];
            double lw = pw ? 1.0 + (pw[i % npw] - 1.0) * t : 1.0;
            /* sigmoid(-v), split by sign so exp never overflows */
            double e = exp(-fabs(v));
            double sig_neg = v >= 0 ? e / (1.0 + e) : 1.0 / (1.0 + e);
            dx[i] = (R)(scale * ((1.0 - t) - lw * sig_neg));
        }
        break;
    }
}
