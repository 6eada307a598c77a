/* Softmax cross-entropy with PyTorch's class weights, label smoothing and ignore_index (see loss.h
 * for the count). The kernels are backends/cpu/loss.c; this file validates shapes and dtypes and turns
 * an out-of-range target into an error naming its value and position. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "core/ops/ops.h"
#include "core/util.h"
#include "model/loss_impl.h"

typedef struct xent_loss {
    ct_loss base;
    ct_tensor weight; /* [C] float64, data NULL when unweighted */
    ct_xent_opts opts;
} xent_loss;

static xent_loss *self(ct_loss *l) { return ct_container_of(l, xent_loss, base); }

/* Logits [..., C] and integer targets of shape [...]. The tensors are described only for a message:
 * the check runs for every batch, and for every row of an evaluation (its per-row losses). */
static ct_status check(const xent_loss *x, const ct_tensor *pred, const ct_tensor *target) {
    bool ids = target->dtype == CT_I64 || target->dtype == CT_I32, rank = pred->ndim >= 2;
    bool fits = rank && target->ndim == pred->ndim - 1;
    for (int i = 0; fits && i < target->ndim; i++) fits = target->shape[i] == pred->shape[i];
    int64_t c = rank ? pred->shape[pred->ndim - 1] : 0;
    bool weights = !x->opts.weight || x->weight.shape[0] == c;
    if (ids && fits && c >= 1 && weights) return CT_OK;
    char p[128], t[128];
    ct_tensor_str(pred, p, sizeof p);
    ct_tensor_str(target, t, sizeof t);
    if (!ids) return ct_error(CT_ERR_DTYPE, "targets %s must be class indices (i64 or i32) for logits %s", t, p);
    if (!rank) return ct_error(CT_ERR_SHAPE, "logits %s must be [N, C] or [N, T, C] (classes last)", p);
    if (!fits) {
        char want[96];
        return ct_error(CT_ERR_SHAPE, "targets %s do not fit logits %s: expected targets %s", t, p,
                        ct_shape_str(pred->ndim - 1, pred->shape, want, sizeof want));
    }
    if (c < 1) return ct_error(CT_ERR_SHAPE, "logits %s have no classes", p);
    return ct_error(CT_ERR_SHAPE, "%lld class weights, but the logits %s have %lld classes",
                    (long long)x->weight.shape[0], p, (long long)c);
}

/* "target 12 at [3, 1] of targets [8, 5] i64 cpu is outside [0, 10) ..." for the row the op reported. */
static ct_status bad_target(const xent_loss *x, const ct_tensor *pred, const ct_tensor *target, int64_t row) {
    int64_t idx[CT_MAX_DIMS], rest = row;
    for (int i = target->ndim - 1; i >= 0; i--) {
        idx[i] = target->shape[i] ? rest % target->shape[i] : 0;
        rest = target->shape[i] ? rest / target->shape[i] : 0;
    }
    char pos[96], t[128];
    ct_shape_str(target->ndim, idx, pos, sizeof pos);
    long long v = (long long)ct_tensor_item(target, row);
    return ct_error(CT_ERR_INVALID_ARG, "target %lld at %s of targets %s is outside [0, %lld) and is not "
                    "ignore_index %lld", v, pos, ct_tensor_str(target, t, sizeof t),
                    (long long)pred->shape[pred->ndim - 1], (long long)x->opts.ignore_index);
}

static ct_status forward(ct_loss *l, const ct_tensor *pred, const ct_tensor *target, ct_loss_value *out) {
    xent_loss *x = self(l);
    CT_TRY(check(x, pred, target));
    double sum = 0.0, count = 0.0;
    int64_t bad = ct_op_cross_entropy_forward(pred, target, &x->opts, &sum, &count);
    if (bad >= 0) return bad_target(x, pred, target, bad);
    *out = (ct_loss_value){sum, count};
    return CT_OK;
}

static ct_status backward(ct_loss *l, const ct_tensor *pred, const ct_tensor *target, double scale,
                          ct_tensor *dpred) {
    xent_loss *x = self(l);
    CT_TRY(check(x, pred, target));
    int64_t bad = ct_op_cross_entropy_backward(pred, target, &x->opts, scale, dpred);
    if (bad >= 0) return bad_target(x, pred, target, bad);
    return CT_OK;
}

/* One pass over the logits (ct_op_fused_classifier), which checks every target before it writes. */
static ct_status forward_backward(ct_loss *l, const ct_tensor *pred, const ct_tensor *target, double scale,
                                  ct_tensor *dpred, ct_loss_value *out) {
    xent_loss *x = self(l);
    CT_TRY(check(x, pred, target));
    double sum = 0.0, count = 0.0;
    int64_t bad = ct_op_fused_classifier(pred, target, &x->opts, scale, &sum, &count, dpred);
    if (bad >= 0) return bad_target(x, pred, target, bad);
    *out = (ct_loss_value){sum, count};
    return CT_OK;
}

/* forward_backward's pass, its sums and its first invalid target left in the step's block. */
static ct_status forward_backward_acc(ct_loss *l, const ct_tensor *pred, const ct_tensor *target, double scale,
                                      ct_tensor *dpred, ct_tensor *stats) {
    xent_loss *x = self(l);
    CT_TRY(check(x, pred, target));
    ct_op_fused_classifier_acc(pred, target, &x->opts, scale, dpred, stats);
    return CT_OK;
}

/* One pass of ct_op_cross_entropy_rows over every position, then each sample's positions added in
 * order on the host. */
static ct_status forward_rows(ct_loss *l, const ct_tensor *pred, const ct_tensor *target, ct_loss_value *rows) {
    xent_loss *x = self(l);
    CT_TRY(check(x, pred, target));
    int64_t n = pred->shape[0], positions = ct_tensor_numel(target), per = n ? positions / n : 0;
    double *loss = malloc((size_t)(positions ? 2 * positions : 1) * sizeof *loss), *count = loss + positions;
    if (!loss)
        return ct_error(CT_ERR_NOMEM, "per-sample losses of %lld positions: out of memory", (long long)positions);
    int64_t bad = positions ? ct_op_cross_entropy_rows(pred, target, &x->opts, loss, count) : -1;
    for (int64_t i = 0; bad < 0 && i < n; i++) {
        ct_loss_value v = {0.0, 0.0};
        for (int64_t p = i * per; p < (i + 1) * per; p++) v = ct_loss_value_add(v, (ct_loss_value){loss[p], count[p]});
        rows[i] = v;
    }
    free(loss);
    return bad >= 0 ? bad_target(x, pred, target, bad) : CT_OK;
}

static void destroy(ct_loss *l) {
    xent_loss *x = self(l);
    ct_tensor_free(&x->weight);
    free(x);
}

static const ct_loss_ops xent_ops = {sizeof(ct_loss_ops), "cross_entropy", forward, backward, destroy,
                                     forward_backward, forward_rows, forward_backward_acc};

bool ct_loss_class_targets(const ct_loss *l, int64_t *ignore_index) {
    if (!l || l->ops != &xent_ops) return false;
    *ignore_index = ((const xent_loss *)l)->opts.ignore_index; /* base is the first member */
    return true;
}

bool ct_loss_plain_nll(const ct_loss *l, int64_t *ignore_index) {
    if (!ct_loss_class_targets(l, ignore_index)) return false;
    const xent_loss *x = (const xent_loss *)l;
    return !x->opts.weight && x->opts.label_smoothing == 0.0;
}

ct_cross_entropy_opts ct_cross_entropy_defaults(void) {
    return (ct_cross_entropy_opts){.weight = NULL, .n_weight = 0, .label_smoothing = 0.0, .ignore_index = -100};
}

ct_status ct_cross_entropy_loss_create(const ct_cross_entropy_opts *o, ct_loss **out) {
    *out = NULL;
    ct_cross_entropy_opts d = o ? *o : ct_cross_entropy_defaults();
    if (!(d.label_smoothing >= 0.0 && d.label_smoothing <= 1.0))
        return ct_error(CT_ERR_INVALID_ARG, "cross_entropy loss: label_smoothing %g is outside [0, 1]",
                        d.label_smoothing);
    if (d.weight && d.n_weight < 1)
        return ct_error(CT_ERR_INVALID_ARG, "cross_entropy loss: %lld class weights", (long long)d.n_weight);
    for (int64_t i = 0; d.weight && i < d.n_weight; i++)
        if (!isfinite(d.weight[i]) || d.weight[i] < 0)
            return ct_error(CT_ERR_INVALID_ARG, "cross_entropy loss: weight[%lld] = %g is not a finite number >= 0",
                            (long long)i, d.weight[i]);
    xent_loss *x = calloc(1, sizeof *x);
    if (!x) return ct_error(CT_ERR_NOMEM, "cross_entropy loss: out of memory");
    ct_loss_base_init(&x->base, &xent_ops);
    if (d.weight) {
        ct_status s = ct_loss_copy_reals("cross_entropy loss", d.weight, d.n_weight, &x->weight);
        if (s != CT_OK) {
            free(x);
            return s;
        }
    }
    x->opts = (ct_xent_opts){.weight = d.weight ? &x->weight : NULL, .label_smoothing = d.label_smoothing,
                             .ignore_index = d.ignore_index};
    *out = &x->base;
    return CT_OK;
}

ct_status ct_cross_entropy_loss_from_json(const json_t *spec, const char *path, ct_loss **out) {
    *out = NULL;
    static const char *const keys[] = {"type", "weight", "label_smoothing", "ignore_index", NULL};
    CT_TRY(ct_json_check_keys(spec, path, keys));
    ct_cross_entropy_opts o = ct_cross_entropy_defaults();
    CT_TRY(ct_json_real(spec, path, "label_smoothing", false, 0.0, &o.label_smoothing));
    if (!(o.label_smoothing >= 0.0 && o.label_smoothing <= 1.0))
        return ct_error(CT_ERR_CONFIG, "%s.label_smoothing: %g is outside [0, 1]", path, o.label_smoothing);
    CT_TRY(ct_json_int(spec, path, "ignore_index", false, -100, &o.ignore_index));
    double *w;
    CT_TRY(ct_loss_json_reals(spec, path, "weight", false, 0.0, &w, &o.n_weight));
    o.weight = w;
    ct_status s = ct_cross_entropy_loss_create(&o, out);
    free(w);
    if (s != CT_OK) return ct_error_prefix(s == CT_ERR_INVALID_ARG ? CT_ERR_CONFIG : s, "%s: ", path);
    return CT_OK;
}
