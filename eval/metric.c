/* The metric base (see metric.h): state declaration and reset, the vtable wrappers that validate a
 * batch once for every metric and prefix errors with the metric's name, field-by-field merging with
 * the declared reductions, helpers for implementations, and metric sets.
 *
 * Merging is the reason the state is declared rather than private: with each field's reduction
 * known here, two states (two batches' worth, two ranks' worth) combine without the metric's help,
 * and a later all-reduce across processes can reduce the same arrays with MPI_SUM/MIN/MAX. */
#include "eval/metric.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "core/ops/ops.h"
#include "core/vtable.h"

/* Members appended to ct_metric_ops later are absent from tables written earlier. */
#define HAS_OP(ops, member) ((ops)->size >= offsetof(ct_metric_ops, member) + sizeof((ops)->member) && (ops)->member)

const char *ct_metric_name(const ct_metric *m) { return m->ops->name; }

/* --- state -------------------------------------------------------------------------------------- */

/* The four arrays of a declaration, allocated together so that a failure leaves nothing behind. */
typedef struct decl {
    int64_t n_counts, n_sums;
    int64_t *counts;
    double *sums;
    ct_reduce_op *count_ops, *sum_ops;
} decl;

static void decl_free(decl *d) {
    free(d->counts);
    free(d->sums);
    free(d->count_ops);
    free(d->sum_ops);
}

static ct_status decl_alloc(decl *d, const char *name, int64_t n_counts, const ct_reduce_op *count_ops, int64_t n_sums,
                            const ct_reduce_op *sum_ops) {
    CT_ASSERT(n_counts >= 0 && n_sums >= 0);
    *d = (decl){.n_counts = n_counts, .n_sums = n_sums};
    if ((uint64_t)n_counts > SIZE_MAX / sizeof(int64_t) || (uint64_t)n_sums > SIZE_MAX / sizeof(double))
        return ct_error(CT_ERR_NOMEM, "metric '%s': a state of %lld counts and %lld sums is too large", name,
                        (long long)n_counts, (long long)n_sums);
    if (n_counts) {
        d->counts = malloc((size_t)n_counts * sizeof *d->counts);
        d->count_ops = malloc((size_t)n_counts * sizeof *d->count_ops);
    }
    if (n_sums) {
        d->sums = malloc((size_t)n_sums * sizeof *d->sums);
        d->sum_ops = malloc((size_t)n_sums * sizeof *d->sum_ops);
    }
    if ((n_counts && (!d->counts || !d->count_ops)) || (n_sums && (!d->sums || !d->sum_ops))) {
        decl_free(d);
        *d = (decl){0};
        return ct_error(CT_ERR_NOMEM, "metric '%s': out of memory for a state of %lld counts and %lld sums", name,
                        (long long)n_counts, (long long)n_sums);
    }
    for (int64_t i = 0; i < n_counts; i++) d->count_ops[i] = count_ops ? count_ops[i] : CT_REDUCE_SUM;
    for (int64_t i = 0; i < n_sums; i++) d->sum_ops[i] = sum_ops ? sum_ops[i] : CT_REDUCE_SUM;
    return CT_OK;
}

/* Replaces m's declaration by d (m's old arrays are freed). */
static void decl_install(ct_metric *m, decl *d) {
    free(m->counts);
    free(m->sums);
    free(m->count_ops);
    free(m->sum_ops);
    m->n_counts = d->n_counts;
    m->n_sums = d->n_sums;
    m->counts = d->counts;
    m->sums = d->sums;
    m->count_ops = d->count_ops;
    m->sum_ops = d->sum_ops;
}

static ct_status check_ops(const ct_metric_ops *ops) {
    CT_TRY(CT_OPS_CHECK_SIZE(ct_metric_ops, ops, compute));
    CT_TRY(CT_OPS_CHECK_MEMBER(ct_metric_ops, ops, name, "is the metric's key: \"<prefix>_<name>\""));
    CT_TRY(CT_OPS_CHECK_MEMBER(ct_metric_ops, ops, update, "adds a batch to the state"));
    return CT_OPS_CHECK_MEMBER(ct_metric_ops, ops, compute, "turns the state into values");
}

ct_status ct_metric_check(const ct_metric *m) {
    if (!m) return ct_error(CT_ERR_INVALID_ARG, "metric is NULL");
    return check_ops(m->ops);
}

ct_status ct_metric_base_init(ct_metric *m, const ct_metric_ops *ops, int64_t n_counts, const ct_reduce_op *count_ops,
                              int64_t n_sums, const ct_reduce_op *sum_ops) {
    CT_ASSERT(m);
    CT_TRY(check_ops(ops));
    decl d;
    CT_TRY(decl_alloc(&d, ops->name, n_counts, count_ops, n_sums, sum_ops));
    m->ops = ops;
    m->counts = NULL;
    m->sums = NULL;
    m->count_ops = m->sum_ops = NULL;
    m->samples = (ct_metric_samples){0};
    decl_install(m, &d);
    ct_metric_reset(m);
    return CT_OK;
}

ct_status ct_metric_redeclare(ct_metric *m, int64_t n_counts, const ct_reduce_op *count_ops, int64_t n_sums,
                              const ct_reduce_op *sum_ops) {
    CT_ASSERT(m && m->ops);
    decl d;
    CT_TRY(decl_alloc(&d, m->ops->name, n_counts, count_ops, n_sums, sum_ops));
    decl_install(m, &d);
    ct_metric_reset(m);
    return CT_OK;
}

/* Each field starts at its reduction's identity, so merging a fresh state changes nothing. */
void ct_metric_reset(ct_metric *m) {
    for (int64_t i = 0; i < m->n_counts; i++)
        m->counts[i] = m->count_ops[i] == CT_REDUCE_MIN ? INT64_MAX : m->count_ops[i] == CT_REDUCE_MAX ? INT64_MIN : 0;
    for (int64_t i = 0; i < m->n_sums; i++)
        m->sums[i] = m->sum_ops[i] == CT_REDUCE_MIN ? INFINITY : m->sum_ops[i] == CT_REDUCE_MAX ? -INFINITY : 0.0;
    m->samples.n = 0; /* the memory stays for the next evaluation */
}

void ct_metric_default_destroy(ct_metric *m) {
    if (!m) return;
    free(m->counts);
    free(m->sums);
    free(m->count_ops);
    free(m->sum_ops);
    free(m->samples.values);
    free(m);
}

void ct_metric_free(ct_metric *m) {
    if (!m) return;
    if (HAS_OP(m->ops, destroy))
        m->ops->destroy(m);
    else
        ct_metric_default_destroy(m);
}

/* --- per-sample records ------------------------------------------------------------------------- */

ct_status ct_metric_keep_samples(ct_metric *m, int width) {
    CT_ASSERT(m && width >= 1);
    ct_metric_samples *r = &m->samples;
    if (r->width == width) return CT_OK;
    if (r->n > 0)
        return ct_error(CT_ERR_STATE, "metric '%s': cannot change the record width from %d to %d while %lld records are held",
                        ct_metric_name(m), r->width, width, (long long)r->n);
    free(r->values);
    *r = (ct_metric_samples){.width = width};
    return CT_OK;
}

ct_status ct_metric_samples_reserve(ct_metric *m, int64_t more) {
    CT_ASSERT(m && more >= 0);
    ct_metric_samples *r = &m->samples;
    CT_ASSERT(r->width >= 1);
    if (more <= r->cap - r->n) return CT_OK;
    int64_t need = r->n + more, cap = r->cap ? r->cap : 64;
    while (cap < need) cap = cap > INT64_MAX / 2 ? need : 2 * cap; /* geometric: amortised O(1) per record */
    if ((uint64_t)cap > SIZE_MAX / sizeof(double) / (uint64_t)r->width)
        return ct_error(CT_ERR_NOMEM, "metric '%s': %lld records of %d values are too many", ct_metric_name(m),
                        (long long)need, r->width);
    double *v = realloc(r->values, (size_t)cap * (size_t)r->width * sizeof *v);
    if (!v)
        return ct_error(CT_ERR_NOMEM, "metric '%s': out of memory for %lld records of %d values", ct_metric_name(m),
                        (long long)cap, r->width);
    r->values = v;
    r->cap = cap;
    return CT_OK;
}

ct_status ct_metric_samples_append(ct_metric *m, const double *record) {
    CT_ASSERT(m && record);
    ct_metric_samples *r = &m->samples;
    if (r->n == r->cap) CT_TRY(ct_metric_samples_reserve(m, 1));
    memcpy(r->values + r->n * r->width, record, (size_t)r->width * sizeof *record);
    r->n++;
    return CT_OK;
}

/* --- merging ------------------------------------------------------------------------------------ */

/* No fields and no record width: a metric that declares its state at the first batch and saw none. */
static bool is_blank(const ct_metric *m) { return m->n_counts == 0 && m->n_sums == 0 && m->samples.width == 0; }

static bool same_shape(const ct_metric *a, const ct_metric *b) {
    if (is_blank(a) || is_blank(b)) return true;
    return a->n_counts == b->n_counts && a->n_sums == b->n_sums && a->samples.width == b->samples.width;
}

bool ct_metric_compatible(const ct_metric *a, const ct_metric *b) {
    if (a->ops != b->ops || !same_shape(a, b)) return false;
    return HAS_OP(a->ops, same_config) ? a->ops->same_config(a, b) : true;
}

/* NaN wins, as in torch.minimum/maximum: a NaN that reached a state must not vanish in a merge. */
static double reduce_real(ct_reduce_op op, double a, double b) {
    if (op == CT_REDUCE_SUM) return a + b;
    if (isnan(a) || isnan(b)) return NAN;
    return op == CT_REDUCE_MIN ? (b < a ? b : a) : (b > a ? b : a);
}

static int64_t reduce_int(ct_reduce_op op, int64_t a, int64_t b) {
    if (op == CT_REDUCE_SUM) return a + b;
    return op == CT_REDUCE_MIN ? (b < a ? b : a) : (b > a ? b : a);
}

/* Why a and b (same ops) cannot merge, for the message. */
static const char *mismatch(const ct_metric *a, const ct_metric *b) {
    if (a->ops != b->ops) return "another kind of metric";
    if (!same_shape(a, b)) {
        if (a->samples.width != b->samples.width) return "records of a different width";
        return "a state of another shape (e.g. another number of classes)";
    }
    return "different settings";
}

ct_status ct_metric_merge(ct_metric *dst, const ct_metric *src) {
    CT_ASSERT(dst && src);
    if (!ct_metric_compatible(dst, src))
        return ct_error(CT_ERR_INVALID_ARG, "metric '%s': cannot merge the state of metric '%s' (%s)",
                        ct_metric_name(dst), ct_metric_name(src), mismatch(dst, src));
    if (is_blank(src)) return CT_OK;
    /* Everything that can fail happens before dst changes: the adopted declaration, the record room. */
    decl d = {0};
    bool adopt = is_blank(dst);
    if (adopt) CT_TRY(decl_alloc(&d, dst->ops->name, src->n_counts, src->count_ops, src->n_sums, src->sum_ops));
    if (src->samples.n > 0) {
        int width = dst->samples.width;
        if (adopt) dst->samples.width = src->samples.width; /* a blank dst has no records and no memory */
        ct_status s = ct_metric_samples_reserve(dst, src->samples.n);
        if (s != CT_OK) {
            dst->samples.width = width;
            decl_free(&d);
            return s;
        }
    }
    if (adopt) {
        decl_install(dst, &d);
        dst->samples.width = src->samples.width;
        ct_metric_reset(dst);
    }
    for (int64_t i = 0; i < dst->n_counts; i++) {
        CT_ASSERT(dst->count_ops[i] == src->count_ops[i]);
        dst->counts[i] = reduce_int(dst->count_ops[i], dst->counts[i], src->counts[i]);
    }
    for (int64_t i = 0; i < dst->n_sums; i++) {
        CT_ASSERT(dst->sum_ops[i] == src->sum_ops[i]);
        dst->sums[i] = reduce_real(dst->sum_ops[i], dst->sums[i], src->sums[i]);
    }
    if (src->samples.n > 0) {
        ct_metric_samples *r = &dst->samples;
        memcpy(r->values + r->n * r->width, src->samples.values,
               (size_t)src->samples.n * (size_t)r->width * sizeof *r->values);
        r->n += src->samples.n;
    }
    return CT_OK;
}

/* --- wrappers ----------------------------------------------------------------------------------- */

/* Prefixes the metric's name unless the message already starts with it. */
static ct_status name_error(const ct_metric *m, ct_status s) {
    char head[160];
    snprintf(head, sizeof head, "metric '%s': ", ct_metric_name(m));
    if (strncmp(ct_last_error(), head, strlen(head)) == 0) return s;
    return ct_error_prefix(s, "%s", head);
}

/* What holds for every metric: consistent rows, CPU tensors, float outputs, a 0/1 mask. */
static ct_status check_batch(const ct_eval_batch *b) {
    char t[128];
    int64_t rows = -1;
    if (b->outputs) {
        const ct_tensor *o = b->outputs;
        if (o->dtype != CT_F32 && o->dtype != CT_F64)
            return ct_error(CT_ERR_DTYPE, "outputs %s: expected float32 or float64", ct_tensor_str(o, t, sizeof t));
        if (o->ndim < 1)
            return ct_error(CT_ERR_SHAPE, "outputs %s: expected [rows, ...]", ct_tensor_str(o, t, sizeof t));
        CT_TRY(ct_expect_device("outputs", o, CT_CPU));
        rows = o->shape[0];
    }
    if (b->labels) {
        const ct_tensor *l = b->labels;
        if (l->ndim < 1)
            return ct_error(CT_ERR_SHAPE, "labels %s: expected [rows, ...]", ct_tensor_str(l, t, sizeof t));
        CT_TRY(ct_expect_device("labels", l, CT_CPU));
        if (rows >= 0 && l->shape[0] != rows) {
            char u[128];
            return ct_error(CT_ERR_SHAPE, "outputs %s and labels %s have different numbers of rows",
                            ct_tensor_str(b->outputs, u, sizeof u), ct_tensor_str(l, t, sizeof t));
        }
        rows = l->shape[0];
    }
    if (b->mask) {
        const ct_tensor *k = b->mask;
        if (k->dtype != CT_U8 || k->ndim != 1 || (rows >= 0 && k->shape[0] != rows))
            return ct_error(CT_ERR_SHAPE, "mask %s: expected [%lld] u8 (one entry per row)",
                            ct_tensor_str(k, t, sizeof t), (long long)(rows >= 0 ? rows : k->shape[0]));
        CT_TRY(ct_expect_device("mask", k, CT_CPU));
        if (rows < 0) rows = k->shape[0];
        const uint8_t *v = k->data;
        for (int64_t i = 0; i < k->shape[0]; i++)
            if (v[i] > 1)
                return ct_error(CT_ERR_INVALID_ARG, "mask value %u at row %lld; expected 0 (padding) or 1",
                                (unsigned)v[i], (long long)i);
    }
    if (!b->sample_loss != !b->sample_weight)
        return ct_error(CT_ERR_INVALID_ARG, "sample_loss and sample_weight come together; got only %s",
                        b->sample_loss ? "sample_loss" : "sample_weight");
    for (int which = 0; b->sample_loss && which < 2; which++) {
        const ct_tensor *x = which ? b->sample_weight : b->sample_loss;
        const char *name = which ? "sample_weight" : "sample_loss";
        if (x->dtype != CT_F64 || x->ndim != 1 || (rows >= 0 && x->shape[0] != rows))
            return ct_error(CT_ERR_SHAPE, "%s %s: expected [%lld] float64 (one entry per row)", name,
                            ct_tensor_str(x, t, sizeof t), (long long)(rows >= 0 ? rows : x->shape[0]));
        CT_TRY(ct_expect_device(name, x, CT_CPU));
        rows = x->shape[0];
    }
    if (b->sample_weight) {
        const double *w = b->sample_weight->data;
        for (int64_t i = 0; i < rows; i++)
            if (ct_metric_row_real(b, i) && !(w[i] >= 0 && isfinite(w[i])))
                return ct_error(CT_ERR_INVALID_ARG, "sample_weight %g at row %lld; expected a finite number >= 0",
                                w[i], (long long)i);
    }
    if (!(b->loss.count >= 0) || !isfinite(b->loss.count))
        return ct_error(CT_ERR_INVALID_ARG, "loss count %g; expected a finite number >= 0", b->loss.count);
    return CT_OK;
}

ct_status ct_metric_update(ct_metric *m, const ct_eval_batch *b) {
    CT_ASSERT(m && b);
    ct_status s = check_batch(b);
    if (s == CT_OK) s = m->ops->update(m, b);
    return s == CT_OK ? s : name_error(m, s);
}

bool ct_metric_takes_token_values(const ct_metric *m) { return HAS_OP(m->ops, takes_token_values); }
bool ct_metric_takes_class_values(const ct_metric *m) { return HAS_OP(m->ops, takes_class_values); }

ct_status ct_metric_compute(const ct_metric *m, const char *prefix, json_t *out) {
    CT_ASSERT(m && json_is_object(out));
    ct_status s = m->ops->compute(m, prefix ? prefix : "", out);
    return s == CT_OK ? s : name_error(m, s);
}

ct_status ct_metric_uncertainty(const ct_metric *m, const ct_uncertainty_config *cfg, const char *prefix,
                                json_t *out) {
    CT_ASSERT(m && cfg && json_is_object(out));
    ct_status s = CT_OK;
    if (cfg->resamples < 0 || cfg->resamples > ((int64_t)1 << 32))
        s = ct_error(CT_ERR_INVALID_ARG, "uncertainty: resamples = %lld; expected 0 (no bootstrap) to 2^32",
                     (long long)cfg->resamples);
    else if (!(cfg->confidence > 0 && cfg->confidence < 1))
        s = ct_error(CT_ERR_INVALID_ARG, "uncertainty: confidence = %g; expected a number in (0, 1), e.g. 0.95",
                     cfg->confidence);
    else if (HAS_OP(m->ops, uncertainty))
        s = m->ops->uncertainty(m, cfg, prefix ? prefix : "", out);
    return s == CT_OK ? s : name_error(m, s);
}

/* --- helpers for implementations ---------------------------------------------------------------- */

ct_status ct_metric_key(const char *prefix, const char *name, char *buf, size_t cap) {
    int n = prefix && prefix[0] ? snprintf(buf, cap, "%s_%s", prefix, name) : snprintf(buf, cap, "%s", name);
    if (n < 0 || (size_t)n >= cap)
        return ct_error(CT_ERR_INVALID_ARG, "metric key '%s_%s' is longer than %zu characters", prefix ? prefix : "",
                        name, cap - 1);
    return CT_OK;
}

ct_status ct_metric_spec_error(ct_status s, const char *path) {
    if (s == CT_OK) return s;
    return ct_error_prefix(s == CT_ERR_INVALID_ARG ? CT_ERR_CONFIG : s, "%s: ", path);
}

ct_status ct_metric_kind_index(const char *name, const char *const *names, const char *family, const char *path,
                               int *kind) {
    for (int i = 0; names[i]; i++)
        if (strcmp(name, names[i]) == 0) {
            *kind = i;
            return CT_OK;
        }
    *kind = -1;
    const char *hint = ct_closest_word(name, names);
    if (hint) return ct_error(CT_ERR_CONFIG, "%s: unknown %s metric '%s', did you mean '%s'?", path, family, name, hint);
    char known[512] = "";
    size_t len = 0;
    for (int i = 0; names[i] && len < sizeof known; i++)
        len += (size_t)snprintf(known + len, sizeof known - len, "%s%s", i ? ", " : "", names[i]);
    return ct_error(CT_ERR_CONFIG, "%s: unknown %s metric '%s' (known: %s)", path, family, name, known);
}

ct_status ct_metric_put(json_t *out, const char *prefix, const char *name, double value) {
    char key[256];
    CT_TRY(ct_metric_key(prefix, name, key, sizeof key));
    json_t *v = isfinite(value) ? json_real(value) : json_null();
    if (!v || json_object_set_new(out, key, v) != 0) return ct_error(CT_ERR_NOMEM, "%s: out of memory", key);
    return CT_OK;
}

ct_status ct_metric_check_classification(const ct_eval_batch *b, int64_t *rows, int64_t *classes) {
    char t[128];
    const ct_tensor *o = b->outputs, *l = b->labels;
    const ct_class_values *cv = b->classes;
    if (!o && !cv) return ct_error(CT_ERR_INVALID_ARG, "needs the model's outputs [rows, classes]");
    if (!l) return ct_error(CT_ERR_INVALID_ARG, "needs labels, and the data has none");
    if (cv && (!cv->pred || !cv->above || cv->rows < 0 || cv->classes < 1))
        return ct_error(CT_ERR_INVALID_ARG, "class ranks without their predictions, ranks, rows or classes");
    if (!cv && (o->ndim != 2 || o->shape[1] < 1))
        return ct_error(CT_ERR_SHAPE, "outputs %s: expected class scores [rows, classes]",
                        ct_tensor_str(o, t, sizeof t));
    int64_t n = cv ? cv->rows : o->shape[0], c = cv ? cv->classes : o->shape[1];
    if ((l->dtype != CT_I64 && l->dtype != CT_I32) || l->ndim != 1 || l->shape[0] != n)
        return ct_error(CT_ERR_SHAPE, "labels %s: expected class ids [%lld] int64 or int32",
                        ct_tensor_str(l, t, sizeof t), (long long)n);
    for (int64_t i = 0; i < n; i++) {
        int64_t y = ct_metric_label(l, i);
        if (ct_metric_row_real(b, i) && (y < 0 || y >= c))
            return ct_error(CT_ERR_INVALID_ARG,
                            "label %lld at row %lld of the batch is outside [0, %lld) (outputs have %lld classes)",
                            (long long)y, (long long)i, (long long)c, (long long)c);
    }
    *rows = n;
    *classes = c;
    return CT_OK;
}

ct_status ct_metric_class_values(const ct_eval_batch *b, ct_class_values *cv, int64_t **own) {
    *own = NULL;
    if (b->classes) {
        *cv = *b->classes;
        return CT_OK;
    }
    const ct_tensor *o = b->outputs;
    int64_t n = o->shape[0];
    *own = malloc((size_t)(n > 0 ? 2 * n : 1) * sizeof **own);
    if (!*own) return ct_error(CT_ERR_NOMEM, "out of memory for the class ranks of %lld rows", (long long)n);
    if (n > 0) ct_op_class_ranks(o, b->labels, *own, *own + n);
    *cv = (ct_class_values){.pred = *own, .above = *own + n, .rows = n, .classes = o->shape[1]};
    return CT_OK;
}

int64_t ct_metric_argmax(const ct_tensor *o, int64_t i) {
    int64_t c = o->shape[1], best = 0;
    if (o->dtype == CT_F32) {
        const float *row = (const float *)o->data + i * c;
        for (int64_t j = 1; j < c; j++)
            if (isnan(row[j]) ? !isnan(row[best]) : (!isnan(row[best]) && row[j] > row[best])) best = j;
    } else {
        const double *row = (const double *)o->data + i * c;
        for (int64_t j = 1; j < c; j++)
            if (isnan(row[j]) ? !isnan(row[best]) : (!isnan(row[best]) && row[j] > row[best])) best = j;
    }
    return best;
}

/* --- sets --------------------------------------------------------------------------------------- */

ct_status ct_metric_set_add(ct_metric_set *s, ct_metric *m) {
    CT_ASSERT(s);
    CT_TRY(ct_metric_check(m)); /* a metric whose table fails the check stays the caller's */
    for (int i = 0; i < s->n; i++)
        if (ct_metric_compatible(s->items[i], m)) {
            ct_status st = ct_error(CT_ERR_INVALID_ARG,
                                    "metric '%s' is already in the set with the same settings (its keys would collide)",
                                    ct_metric_name(m));
            ct_metric_free(m);
            return st;
        }
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 4;
        ct_metric **items = realloc(s->items, (size_t)cap * sizeof *items);
        if (!items) {
            ct_metric_free(m);
            return ct_error(CT_ERR_NOMEM, "metric set: out of memory");
        }
        s->items = items;
        s->cap = cap;
    }
    s->items[s->n++] = m;
    return CT_OK;
}

void ct_metric_set_free(ct_metric_set *s) {
    if (!s) return;
    for (int i = 0; i < s->n; i++) ct_metric_free(s->items[i]);
    free(s->items);
    *s = (ct_metric_set){0};
}

void ct_metric_set_reset(ct_metric_set *s) {
    for (int i = 0; i < s->n; i++) ct_metric_reset(s->items[i]);
}

ct_status ct_metric_set_update(ct_metric_set *s, const ct_eval_batch *b) {
    for (int i = 0; i < s->n; i++) CT_TRY(ct_metric_update(s->items[i], b));
    return CT_OK;
}

ct_status ct_metric_set_merge(ct_metric_set *dst, const ct_metric_set *src) {
    if (dst->n != src->n)
        return ct_error(CT_ERR_INVALID_ARG, "metric sets: cannot merge a set of %d metrics into one of %d", src->n,
                        dst->n);
    /* Check every pair first, so a mismatch leaves dst untouched. */
    for (int i = 0; i < dst->n; i++)
        if (!ct_metric_compatible(dst->items[i], src->items[i]))
            return ct_error(CT_ERR_INVALID_ARG, "metric sets: metric %d is '%s' in one set and '%s'%s in the other", i,
                            ct_metric_name(dst->items[i]), ct_metric_name(src->items[i]),
                            dst->items[i]->ops == src->items[i]->ops ? " with other settings" : "");
    for (int i = 0; i < dst->n; i++) CT_TRY(ct_metric_merge(dst->items[i], src->items[i]));
    return CT_OK;
}

ct_status ct_metric_set_compute(const ct_metric_set *s, const char *prefix, json_t *out) {
    for (int i = 0; i < s->n; i++) CT_TRY(ct_metric_compute(s->items[i], prefix, out));
    return CT_OK;
}

ct_status ct_metric_set_uncertainty(const ct_metric_set *s, const ct_uncertainty_config *cfg, const char *prefix,
                                    json_t *out) {
    for (int i = 0; i < s->n; i++)
        if (HAS_OP(s->items[i]->ops, uncertainty)) CT_TRY(ct_metric_uncertainty(s->items[i], cfg, prefix, out));
    return CT_OK;
}
