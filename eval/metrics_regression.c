/* Regression metrics: "mse", "rmse", "mae" and "r2" over float outputs and float targets of the
 * same shape, [rows] or [rows, k] ([rows] and [rows, 1] are the same single output), with
 * scikit-learn's semantics for multioutput="uniform_average":
 *   mse, mae   the mean over outputs of each output's mean, which (every output having the same
 *              number of rows) is the mean over all elements: a sum and a count suffice, for any k;
 *   rmse       the mean over outputs of each output's sqrt(mse_j) (scikit-learn takes the root
 *              before averaging), so it keeps one sum of squared errors per output;
 *   r2         the mean over outputs of each output's R^2 = 1 - SSE_j / SST_j, with scikit-learn's
 *              rules: SSE_j == 0 gives 1 (even for a constant target), SSE_j != 0 with a constant
 *              target (SST_j == 0) gives 0; fewer than two rows give NaN (JSON null).
 * rmse and r2 therefore keep per-output fields: they learn k from their first batch (the state is
 * "blank" until then, see ct_metric_redeclare, so a shard that saw no batch still merges) unless
 * "num_outputs" fixes it up front; later batches must have the same k. mse and mae accept any k.
 *
 * State. Per output, r2 keeps sum y, sum y^2, sum (y - yhat)^2, and min y and max y (MIN/MAX
 * reductions). SST_j = sum y^2 - (sum y)^2 / n is a one-pass formula (the state must merge by
 * field-wise sums) whose relative error is about eps * sum y^2 / SST = eps * (1 + mean^2 /
 * variance): 1e-12 for a mean 100 standard deviations from 0, 1e-6 at 1e5 (standardise such
 * targets). min == max says exactly when a target is constant, where scikit-learn's two-pass rule
 * also gives SST == 0 for exactly representable means (its own rounding makes np.full(7, 0.1) look
 * non-constant and returns -5e29 there; this returns 0). A non-constant target whose computed SST is
 * not positive has lost all precision and gives NaN rather than a wrong number. Rows are added to
 * the state one by one in order, so the result does not depend on the batch size at all; merging
 * shards changes only the rounding of the float64 sums.
 *
 * Uncertainty (see ct_uncertainty_config). The unit is the row (a row's k outputs are one
 * observation, not k independent ones). mse and mae are means of per-row terms t_i (the row's mean
 * squared / absolute error), so they use the closed form: standard error s_t / sqrt(n) from sum t
 * and sum t^2, normal interval, its lower end cut at 0 (a mean of non-negative terms). rmse (a mean
 * of square roots) and r2 (a mean of ratios) have no closed form that covers k correlated outputs,
 * so they keep one record per real row (rmse: the k squared errors; r2: the k targets and the k
 * squared errors; 8 k and 16 k bytes per row) and use the percentile bootstrap over rows
 * (ct_bootstrap_samples: each resample's statistic from the rows' multiplicities); with resamples
 * = 0 they report no interval. The delta method would spare rmse's records for one output, but it
 * misses the skew of the square root near 0 and needs k^2 cross moments for k outputs, so the
 * bootstrap is used throughout. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "core/util.h"
#include "eval/metric.h"
#include "eval/uncertainty.h"

typedef struct reg_metric {
    ct_metric base;
    ct_regression_kind kind;
    int64_t outputs; /* k as configured; 0 = any (mse, mae) or learnt from the first batch (rmse, r2) */
} reg_metric;

/* Records hold 2 k doubles per row and their width is an int. */
#define MAX_OUTPUTS (INT64_C(1) << 24)

static const reg_metric *reg_of(const ct_metric *m) { return ct_container_of(m, const reg_metric, base); }

/* Field layout. mse/mae: counts {ROWS, ELEMS}, sums {TERMS (sum over elements), ROW_T and ROW_SQ
 * (sum over rows of the row's mean term and its square)}. rmse: counts {ROWS}, sums {SSE_j}. r2:
 * counts {ROWS}, sums {SY_j, SYY_j, SSE_j, MIN_j, MAX_j}, five blocks of k. rmse and r2 have no
 * fields at all while blank. */
enum { ROWS, ELEMS };
enum { TERMS, ROW_T, ROW_SQ };
enum { R2_SY, R2_SYY, R2_SSE, R2_MIN, R2_MAX, R2_BLOCKS };

static bool per_output(ct_regression_kind kind) { return kind == CT_REGRESSION_RMSE || kind == CT_REGRESSION_R2; }

/* rmse, r2: the number of outputs the state is declared for (0 while blank). */
static int64_t declared_k(const ct_metric *m) {
    return reg_of(m)->kind == CT_REGRESSION_RMSE ? m->n_sums : m->n_sums / R2_BLOCKS;
}

static inline double value_at(const ct_tensor *t, int64_t i) {
    return t->dtype == CT_F32 ? (double)((const float *)t->data)[i] : ((const double *)t->data)[i];
}

/* min/max where NaN wins, as the base's MIN/MAX merge does, so update and merge agree. */
static inline double nan_min(double a, double b) { return isnan(a) || isnan(b) ? NAN : (b < a ? b : a); }
static inline double nan_max(double a, double b) { return isnan(a) || isnan(b) ? NAN : (b > a ? b : a); }

/* --- values from sufficient statistics ---------------------------------------------------------- */

/* scikit-learn's R^2 of one output from n rows: numerator SSE, denominator SST (taken as 0 for a
 * constant target, which the caller knows exactly: min == max). A NaN target makes sy NaN. */
static double r2_one(double n, double sy, double syy, double sse, bool constant) {
    if (isnan(sse) || isnan(sy) || isnan(syy)) return NAN;
    if (sse == 0) return 1.0;
    if (constant) return 0.0;
    double sst = syy - sy * sy / n;
    if (!(sst > 0)) return NAN; /* cancellation ate every digit: say so rather than guess */
    return 1.0 - sse / sst;
}

static double rmse_value(int64_t k, double n, const double *sse) {
    double s = 0;
    for (int64_t j = 0; j < k; j++)
        s += sqrt(sse[j] / n);
    return s / (double)k;
}

/* f: the blocks SY, SYY, SSE and then either MIN, MAX (differs NULL: constant when min == max) or
 * anything, with differs[j] != 0 when output j's targets are not all equal. */
static double r2_value(int64_t k, double n, const double *f, const double *differs) {
    if (n < 2) return NAN; /* scikit-learn: not well-defined with less than two samples */
    double s = 0;
    for (int64_t j = 0; j < k; j++) {
        bool constant = differs ? differs[j] == 0 : f[R2_MIN * k + j] == f[R2_MAX * k + j];
        s += r2_one(n, f[R2_SY * k + j], f[R2_SYY * k + j], f[R2_SSE * k + j], constant);
    }
    return s / (double)k;
}

/* --- update ------------------------------------------------------------------------------------- */

/* Outputs and targets: float32/float64, [rows] or [rows, k], the same k (and the configured one). */
static ct_status check_batch(const reg_metric *r, const ct_eval_batch *b, int64_t *k) {
    char t[128], u[128];
    const ct_tensor *o = b->outputs, *l = b->labels;
    if (!o) return ct_error(CT_ERR_INVALID_ARG, "needs the model's outputs [rows] or [rows, outputs]");
    if (!l) return ct_error(CT_ERR_INVALID_ARG, "needs targets (labels), and the data has none");
    if (l->dtype != CT_F32 && l->dtype != CT_F64)
        return ct_error(CT_ERR_DTYPE, "labels %s: expected float32 or float64 regression targets",
                        ct_tensor_str(l, t, sizeof t));
    if (o->ndim > 2 || l->ndim > 2)
        return ct_error(CT_ERR_SHAPE, "outputs %s and labels %s: expected [rows] or [rows, outputs]",
                        ct_tensor_str(o, t, sizeof t), ct_tensor_str(l, u, sizeof u));
    int64_t ko = o->ndim == 2 ? o->shape[1] : 1, kl = l->ndim == 2 ? l->shape[1] : 1;
    if (ko != kl || ko < 1)
        return ct_error(CT_ERR_SHAPE, "outputs %s and labels %s: expected the same shape, [rows] or [rows, outputs]",
                        ct_tensor_str(o, t, sizeof t), ct_tensor_str(l, u, sizeof u));
    if (r->outputs > 0 && ko != r->outputs)
        return ct_error(CT_ERR_SHAPE,
                        "outputs %s: %lld outputs per row, but the metric was set up with "
                        "\"num_outputs\": %lld",
                        ct_tensor_str(o, t, sizeof t), (long long)ko, (long long)r->outputs);
    *k = ko;
    return CT_OK;
}

/* rmse and r2: the fields (and record width) for k outputs. */
static ct_status declare(ct_metric *m, int64_t k) {
    if (reg_of(m)->kind == CT_REGRESSION_RMSE) {
        CT_TRY(ct_metric_redeclare(m, 1, NULL, k, NULL));
        return ct_metric_keep_samples(m, (int)k);
    }
    ct_reduce_op *sum_ops = malloc((size_t)(R2_BLOCKS * k) * sizeof *sum_ops);
    if (!sum_ops) return ct_error(CT_ERR_NOMEM, "out of memory");
    for (int64_t j = 0; j < R2_BLOCKS * k; j++)
        sum_ops[j] = j / k == R2_MIN ? CT_REDUCE_MIN : j / k == R2_MAX ? CT_REDUCE_MAX : CT_REDUCE_SUM;
    ct_status s = ct_metric_redeclare(m, 1, NULL, R2_BLOCKS * k, sum_ops);
    free(sum_ops);
    return s == CT_OK ? ct_metric_keep_samples(m, (int)(2 * k)) : s;
}

static ct_status reg_update(ct_metric *m, const ct_eval_batch *b) {
    const reg_metric *r = reg_of(m);
    int64_t k = 0;
    CT_TRY(check_batch(r, b, &k));
    if (per_output(r->kind)) {
        int64_t have = declared_k(m);
        if (have == 0) {
            if (k > MAX_OUTPUTS)
                return ct_error(CT_ERR_SHAPE, "%lld outputs per row; at most %lld are supported", (long long)k,
                                (long long)MAX_OUTPUTS);
            CT_TRY(declare(m, k)); /* the first batch: learn k */
        } else if (k != have) {
            char t[128];
            return ct_error(CT_ERR_SHAPE, "outputs %s: %lld outputs per row, but earlier batches had %lld",
                            ct_tensor_str(b->outputs, t, sizeof t), (long long)k, (long long)have);
        }
    }
    const ct_tensor *o = b->outputs, *l = b->labels;
    int64_t rows = o->shape[0];
    int width = m->samples.width;
    if (width > 0) { /* room for every record first, so nothing below can fail */
        int64_t real = 0;
        for (int64_t i = 0; i < rows; i++)
            real += ct_metric_row_real(b, i);
        CT_TRY(ct_metric_samples_reserve(m, real));
    }
    double *f = m->sums;
    /* Row by row in order, each row straight into the state: the same additions in the same order
     * for any batch size. */
    for (int64_t i = 0; i < rows; i++) {
        if (!ct_metric_row_real(b, i)) continue;
        const int64_t base = i * k;
        double *rec = width > 0 ? m->samples.values + m->samples.n * width : NULL;
        switch (r->kind) {
        case CT_REGRESSION_MSE:
        case CT_REGRESSION_MAE: {
            double row = 0;
            for (int64_t j = 0; j < k; j++) {
                double e = value_at(l, base + j) - value_at(o, base + j);
                row += r->kind == CT_REGRESSION_MSE ? e * e : fabs(e);
            }
            double term = row / (double)k;
            f[TERMS] += row;
            f[ROW_T] += term;
            f[ROW_SQ] += term * term;
            m->counts[ELEMS] += k;
            break;
        }
        case CT_REGRESSION_RMSE:
            for (int64_t j = 0; j < k; j++) {
                double e = value_at(l, base + j) - value_at(o, base + j);
                f[j] += e * e;
                if (rec) rec[j] = e * e;
            }
            break;
        case CT_REGRESSION_R2:
            for (int64_t j = 0; j < k; j++) {
                double y = value_at(l, base + j), e = y - value_at(o, base + j);
                f[R2_SY * k + j] += y;
                f[R2_SYY * k + j] += y * y;
                f[R2_SSE * k + j] += e * e;
                f[R2_MIN * k + j] = nan_min(f[R2_MIN * k + j], y);
                f[R2_MAX * k + j] = nan_max(f[R2_MAX * k + j], y);
                if (rec) {
                    rec[j] = y;
                    rec[k + j] = e * e;
                }
            }
            break;
        }
        if (rec) m->samples.n++;
        m->counts[ROWS]++;
    }
    return CT_OK;
}

/* --- compute ------------------------------------------------------------------------------------ */

static const char *const kind_names[] = {"mse", "rmse", "mae", "r2", NULL};

static double reg_value(const ct_metric *m) {
    const reg_metric *r = reg_of(m);
    double n = (double)m->counts[ROWS];
    switch (r->kind) {
    case CT_REGRESSION_MSE:
    case CT_REGRESSION_MAE:
        return m->sums[TERMS] / (double)m->counts[ELEMS];
    case CT_REGRESSION_RMSE:
        return rmse_value(declared_k(m), n, m->sums);
    case CT_REGRESSION_R2:
        return r2_value(declared_k(m), n, m->sums, NULL);
    }
    return NAN;
}

/* Nothing seen (blank, or no real row): no key. */
static bool empty(const ct_metric *m) { return m->n_counts == 0 || m->counts[ROWS] == 0; }

static ct_status reg_compute(const ct_metric *m, const char *prefix, json_t *out) {
    if (empty(m)) return CT_OK;
    return ct_metric_put(out, prefix, kind_names[reg_of(m)->kind], reg_value(m));
}

/* --- uncertainty ------------------------------------------------------------------------------- */

typedef struct boot_ctx {
    int64_t k;
    const double *rec; /* rows x width records */
    bool finite;       /* every record value is finite: 0 * value is 0, no select needed */
} boot_ctx;

/* The resample statistics run resamples x rows times. A row drawn 0 times must stay out even when
 * it holds a NaN or an infinity (as when resampling rows one by one), where 0 * value is NaN: then
 * it is selected away; with finite records (the usual case) multiplying by the multiplicity is
 * enough, and the loop has no branch. */
#define PICK(on, v) (finite ? (v) : ((on) ? (v) : 0.0))

/* rmse of a resample from the rows' multiplicities; scratch: k doubles. */
static void rmse_stat(const int64_t *mult, int64_t n, const void *ctx, void *scratch, double *values) {
    const boot_ctx *c = ctx;
    const int64_t k = c->k;
    const bool finite = c->finite;
    const double *rec = c->rec;
    double *sse = scratch;
    if (k == 1) { /* the common case, in registers */
        double s = 0;
        for (int64_t i = 0; i < n; i++)
            s += (double)mult[i] * PICK(mult[i] != 0, rec[i]);
        values[0] = sqrt(s / (double)n);
        return;
    }
    for (int64_t j = 0; j < k; j++)
        sse[j] = 0;
    for (int64_t i = 0; i < n; i++) {
        const double w = (double)mult[i], *e2 = rec + i * k;
        for (int64_t j = 0; j < k; j++)
            sse[j] += w * PICK(mult[i] != 0, e2[j]);
    }
    values[0] = rmse_value(k, (double)n, sse);
}

/* r2 of a resample: sums over the drawn rows, and whether each output's drawn targets differ from
 * the first drawn row's (constant: min == max); scratch: 4 k doubles. */
static void r2_stat(const int64_t *mult, int64_t n, const void *ctx, void *scratch, double *values) {
    const boot_ctx *c = ctx;
    const int64_t k = c->k;
    const bool finite = c->finite;
    const double *rec = c->rec;
    int64_t first = 0;
    while (mult[first] == 0)
        first++; /* some row is drawn: the multiplicities sum to n >= 1 */
    const double *y0 = rec + first * 2 * k;
    if (k == 1) { /* the common case, in registers */
        double sy = 0, syy = 0, sse = 0, y0v = y0[0];
        int64_t diff = 0;
        for (int64_t i = 0; i < n; i++) {
            const double w = (double)mult[i];
            const bool on = mult[i] != 0;
            const double y = PICK(on, rec[2 * i]);
            sy += w * y;
            syy += w * (y * y);
            sse += w * PICK(on, rec[2 * i + 1]);
            diff += (int64_t)on & (int64_t)(rec[2 * i] != y0v);
        }
        values[0] = n < 2 ? NAN : r2_one((double)n, sy, syy, sse, diff == 0);
        return;
    }
    double *f = scratch, *differs = f + R2_MIN * k;
    for (int64_t j = 0; j < (R2_MIN + 1) * k; j++)
        f[j] = 0;
    for (int64_t i = 0; i < n; i++) {
        const double w = (double)mult[i], *y = rec + i * 2 * k, *e2 = y + k;
        const bool on = mult[i] != 0;
        for (int64_t j = 0; j < k; j++) {
            const double yj = PICK(on, y[j]);
            f[R2_SY * k + j] += w * yj;
            f[R2_SYY * k + j] += w * (yj * yj);
            f[R2_SSE * k + j] += w * PICK(on, e2[j]);
            differs[j] += on && y[j] != y0[j];
        }
    }
    values[0] = r2_value(k, (double)n, f, differs);
}

#undef PICK

static ct_status reg_uncertainty(const ct_metric *m, const ct_uncertainty_config *cfg, const char *prefix,
                                 json_t *out) {
    if (empty(m)) return CT_OK; /* no value, no interval */
    const reg_metric *r = reg_of(m);
    const char *name = kind_names[r->kind];
    if (!per_output(r->kind)) { /* a mean of per-row terms: the closed form */
        double mean, se, lo, hi;
        ct_mean_interval((double)m->counts[ROWS], m->sums[ROW_T], m->sums[ROW_SQ], cfg->confidence, &mean, &se, &lo,
                         &hi);
        if (isnan(mean)) se = lo = hi = NAN; /* a NaN value has no spread (the helper clamps a NaN variance to 0) */
        return ct_uncertainty_put(out, prefix, name, se, lo > 0 ? lo : (isnan(lo) ? lo : 0.0), hi);
    }
    if (cfg->resamples == 0) return CT_OK;
    const int64_t k = declared_k(m), n = m->samples.n;
    CT_ASSERT(n == m->counts[ROWS]); /* one record per counted row */
    double *values = malloc((size_t)cfg->resamples * sizeof *values);
    if (!values) return ct_error(CT_ERR_NOMEM, "out of memory for %lld bootstrap values", (long long)cfg->resamples);
    boot_ctx ctx = {k, m->samples.values, true};
    for (int64_t i = 0; i < n * m->samples.width && ctx.finite; i++)
        ctx.finite = isfinite(m->samples.values[i]);
    bool rmse = r->kind == CT_REGRESSION_RMSE;
    ct_status s = ct_bootstrap_samples(cfg, n, rmse ? rmse_stat : r2_stat, &ctx,
                                       (size_t)(rmse ? k : (R2_MIN + 1) * k) * sizeof(double), 1, values);
    if (s == CT_OK) s = ct_bootstrap_put(out, prefix, name, values, cfg->resamples, cfg->confidence);
    free(values);
    return s;
}

static bool reg_same_config(const ct_metric *a, const ct_metric *b) {
    return reg_of(a)->kind == reg_of(b)->kind && reg_of(a)->outputs == reg_of(b)->outputs;
}

#define REG_OPS(NAME)                                                                                                  \
    {                                                                                                                  \
        .size = sizeof(ct_metric_ops), .name = NAME, .update = reg_update, .compute = reg_compute,                     \
        .same_config = reg_same_config, .uncertainty = reg_uncertainty                                                 \
    }
static const ct_metric_ops reg_ops[] = {REG_OPS("mse"), REG_OPS("rmse"), REG_OPS("mae"), REG_OPS("r2")};

/* --- constructors and JSON ---------------------------------------------------------------------- */

const char *const ct_regression_metric_names[] = {"mse", "rmse", "mae", "r2", NULL};

ct_status ct_regression_metric_create(ct_regression_kind kind, int64_t num_outputs, ct_metric **out) {
    CT_ASSERT(out);
    CT_ASSERT(kind >= CT_REGRESSION_MSE && kind <= CT_REGRESSION_R2);
    *out = NULL;
    const char *name = kind_names[kind];
    if (num_outputs < 0 || num_outputs > MAX_OUTPUTS)
        return ct_error(CT_ERR_INVALID_ARG,
                        "metric '%s': num_outputs = %lld; expected an integer in [1, %lld] (or 0: any / learnt from "
                        "the first batch)",
                        name, (long long)num_outputs, (long long)MAX_OUTPUTS);
    reg_metric *r = calloc(1, sizeof *r);
    if (!r) return ct_error(CT_ERR_NOMEM, "metric '%s': out of memory", name);
    r->kind = kind;
    r->outputs = num_outputs;
    /* rmse, r2: blank (no fields) until k is known. */
    ct_status s = per_output(kind) ? ct_metric_base_init(&r->base, &reg_ops[kind], 0, NULL, 0, NULL)
                                   : ct_metric_base_init(&r->base, &reg_ops[kind], 2, NULL, 3, NULL);
    if (s != CT_OK) { /* base_init leaves nothing allocated on failure */
        free(r);
        return s;
    }
    if (per_output(kind) && num_outputs > 0 && (s = declare(&r->base, num_outputs)) != CT_OK) {
        ct_metric_free(&r->base);
        return ct_error_prefix(s, "metric '%s': ", name);
    }
    *out = &r->base;
    return CT_OK;
}

ct_status ct_regression_metric_from_json(const json_t *spec, const char *path, ct_metric **out) {
    CT_ASSERT(out);
    *out = NULL;
    if (!path) path = "metric";
    if (json_is_string(spec)) {
        int kind;
        CT_TRY(ct_metric_kind_index(json_string_value(spec), kind_names, "regression", path, &kind));
        return ct_metric_spec_error(ct_regression_metric_create((ct_regression_kind)kind, 0, out), path);
    }
    if (!json_is_object(spec))
        return ct_error(CT_ERR_CONFIG, "%s: expected a metric name (\"r2\") or an object with a \"type\"", path);
    const char *type;
    CT_TRY(ct_json_string(spec, path, "type", true, NULL, &type));
    char type_path[512];
    snprintf(type_path, sizeof type_path, "%s.type", path);
    int kind;
    CT_TRY(ct_metric_kind_index(type, kind_names, "regression", type_path, &kind));
    static const char *const keys[] = {"type", "num_outputs", NULL};
    CT_TRY(ct_json_check_keys(spec, path, keys));
    int64_t k;
    CT_TRY(ct_json_int(spec, path, "num_outputs", false, 0, &k));
    if (json_object_get(spec, "num_outputs") && k < 1)
        return ct_error(CT_ERR_CONFIG, "%s.num_outputs: %lld; expected an integer >= 1", path, (long long)k);
    return ct_metric_spec_error(ct_regression_metric_create((ct_regression_kind)kind, k, out), path);
}
