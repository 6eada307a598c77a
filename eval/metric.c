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

/* Members appended to ct_metric_ops later are absent from tables written earlier. */
#define HAS_OP(ops, member) ((ops)->size >= offsetof(ct_metric_ops, member) + sizeof((ops)->member) && (ops)->member)

const char *ct_metric_name(const ct_metric *m) { return m->ops->name; }

/* --- state -------------------------------------------------------------------------------------- */

ct_status ct_metric_base_init(ct_metric *m, const ct_metric_ops *ops, int n_counts, const ct_reduce_op *count_ops,
                              int n_sums, const ct_reduce_op *sum_ops) {
    CT_ASSERT(m && ops);
    CT_ASSERT(ops->size >= offsetof(ct_metric_ops, compute) + sizeof(ops->compute));
    CT_ASSERT(ops->name && ops->update && ops->compute);
    CT_ASSERT(n_counts >= 0 && n_counts <= CT_METRIC_MAX_FIELDS && n_sums >= 0 && n_sums <= CT_METRIC_MAX_FIELDS);
    m->ops = ops;
    m->n_counts = n_counts;
    m->n_sums = n_sums;
    m->counts = n_counts ? calloc((size_t)n_counts, sizeof *m->counts) : NULL;
    m->sums = n_sums ? calloc((size_t)n_sums, sizeof *m->sums) : NULL;
    if ((n_counts && !m->counts) || (n_sums && !m->sums)) {
        free(m->counts);
        free(m->sums);
        m->counts = NULL;
        m->sums = NULL;
        return ct_error(CT_ERR_NOMEM, "metric '%s': out of memory", ops->name);
    }
    for (int i = 0; i < n_counts; i++) m->count_ops[i] = count_ops ? count_ops[i] : CT_REDUCE_SUM;
    for (int i = 0; i < n_sums; i++) m->sum_ops[i] = sum_ops ? sum_ops[i] : CT_REDUCE_SUM;
    ct_metric_reset(m);
    return CT_OK;
}

/* Each field starts at its reduction's identity, so merging a fresh state changes nothing. */
void ct_metric_reset(ct_metric *m) {
    for (int i = 0; i < m->n_counts; i++)
        m->counts[i] = m->count_ops[i] == CT_REDUCE_MIN ? INT64_MAX : m->count_ops[i] == CT_REDUCE_MAX ? INT64_MIN : 0;
    for (int i = 0; i < m->n_sums; i++)
        m->sums[i] = m->sum_ops[i] == CT_REDUCE_MIN ? INFINITY : m->sum_ops[i] == CT_REDUCE_MAX ? -INFINITY : 0.0;
}

void ct_metric_default_destroy(ct_metric *m) {
    if (!m) return;
    free(m->counts);
    free(m->sums);
    free(m);
}

void ct_metric_free(ct_metric *m) {
    if (!m) return;
    if (HAS_OP(m->ops, destroy))
        m->ops->destroy(m);
    else
        ct_metric_default_destroy(m);
}

bool ct_metric_compatible(const ct_metric *a, const ct_metric *b) {
    if (a->ops != b->ops || a->n_counts != b->n_counts || a->n_sums != b->n_sums) return false;
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

ct_status ct_metric_merge(ct_metric *dst, const ct_metric *src) {
    CT_ASSERT(dst && src);
    if (!ct_metric_compatible(dst, src))
        return ct_error(CT_ERR_INVALID_ARG, "metric '%s': cannot merge the state of metric '%s' (%s)",
                        ct_metric_name(dst), ct_metric_name(src),
                        dst->ops != src->ops ? "another kind of metric" : "different settings");
    for (int i = 0; i < dst->n_counts; i++) {
        CT_ASSERT(dst->count_ops[i] == src->count_ops[i]);
        dst->counts[i] = reduce_int(dst->count_ops[i], dst->counts[i], src->counts[i]);
    }
    for (int i = 0; i < dst->n_sums; i++) {
        CT_ASSERT(dst->sum_ops[i] == src->sum_ops[i]);
        dst->sums[i] = reduce_real(dst->sum_ops[i], dst->sums[i], src->sums[i]);
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
        const uint8_t *v = k->data;
        for (int64_t i = 0; i < k->shape[0]; i++)
            if (v[i] > 1)
                return ct_error(CT_ERR_INVALID_ARG, "mask value %u at row %lld; expected 0 (padding) or 1",
                                (unsigned)v[i], (long long)i);
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

ct_status ct_metric_compute(const ct_metric *m, const char *prefix, json_t *out) {
    CT_ASSERT(m && json_is_object(out));
    ct_status s = m->ops->compute(m, prefix ? prefix : "", out);
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
    if (!o) return ct_error(CT_ERR_INVALID_ARG, "needs the model's outputs [rows, classes]");
    if (!l) return ct_error(CT_ERR_INVALID_ARG, "needs labels, and the data has none");
    if (o->ndim != 2 || o->shape[1] < 1)
        return ct_error(CT_ERR_SHAPE, "outputs %s: expected class scores [rows, classes]",
                        ct_tensor_str(o, t, sizeof t));
    if ((l->dtype != CT_I64 && l->dtype != CT_I32) || l->ndim != 1 || l->shape[0] != o->shape[0])
        return ct_error(CT_ERR_SHAPE, "labels %s: expected class ids [%lld] int64 or int32",
                        ct_tensor_str(l, t, sizeof t), (long long)o->shape[0]);
    int64_t n = o->shape[0], c = o->shape[1];
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

/* --- sets --------------------------------------------------------------------------------------- */

ct_status ct_metric_set_add(ct_metric_set *s, ct_metric *m) {
    CT_ASSERT(s && m);
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
