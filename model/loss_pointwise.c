/* Elementwise losses: mse, l1, huber and bce_with_logits, with PyTorch's formulas (backends/cpu/loss.c).
 * The target is a float tensor of the prediction's shape and dtype, trailing dimensions of size 1
 * aside: [rows] targets for [rows, 1] predictions are compared value by value, as Hugging Face's
 * regression head squeezes both (PyTorch's MSELoss would broadcast them to [rows, rows]); count =
 * number of elements. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "core/ops/ops.h"
#include "core/util.h"
#include "model/loss_impl.h"

typedef struct pointwise_loss {
    ct_loss base;
    ct_pointwise_loss kind;
    ct_tensor pos_weight; /* [1] or [C] float64; data NULL when absent */
    ct_pointwise_opts opts;
} pointwise_loss;

static pointwise_loss *self(ct_loss *l) { return ct_container_of(l, pointwise_loss, base); }

/* Whether a and b have the same shape once trailing dimensions of size 1 are dropped (the batch
 * dimension kept): [rows] and [rows, 1] hold the same single value a row, and lie alike in memory. */
static bool same_values_shape(const ct_tensor *a, const ct_tensor *b) {
    int na = a->ndim, nb = b->ndim;
    while (na > 1 && a->shape[na - 1] == 1) na--;
    while (nb > 1 && b->shape[nb - 1] == 1) nb--;
    if (na != nb) return false;
    for (int i = 0; i < na; i++)
        if (a->shape[i] != b->shape[i]) return false;
    return true;
}

/* The tensors are described only for a message: the check runs for every batch, and for every row
 * of an evaluation (its per-row losses). */
static ct_status check(const pointwise_loss *p, const ct_tensor *pred, const ct_tensor *target) {
    bool dtype = target->dtype == pred->dtype, shape = same_values_shape(pred, target);
    int64_t n = p->opts.pos_weight ? p->pos_weight.shape[0] : 1, last = pred->ndim ? pred->shape[pred->ndim - 1] : 1;
    bool broadcast = n == 1 || n == last;
    if (dtype && shape && broadcast) return CT_OK;
    char a[128], b[128];
    ct_tensor_str(pred, a, sizeof a);
    ct_tensor_str(target, b, sizeof b);
    if (!dtype) return ct_error(CT_ERR_DTYPE, "target %s must have the dtype of the predictions %s", b, a);
    if (!shape) return ct_error(CT_ERR_SHAPE, "target %s does not have the shape of the predictions %s", b, a);
    return ct_error(CT_ERR_SHAPE, "%lld pos_weight values do not broadcast over the last dimension (%lld) "
                    "of the predictions %s", (long long)n, (long long)last, a);
}

static ct_status forward(ct_loss *l, const ct_tensor *pred, const ct_tensor *target, ct_loss_value *out) {
    pointwise_loss *p = self(l);
    CT_TRY(check(p, pred, target));
    out->sum = ct_op_pointwise_loss_forward(p->kind, &p->opts, pred, target);
    out->count = (double)ct_tensor_numel(pred);
    return CT_OK;
}

static ct_status backward(ct_loss *l, const ct_tensor *pred, const ct_tensor *target, double scale,
                          ct_tensor *dpred) {
    pointwise_loss *p = self(l);
    CT_TRY(check(p, pred, target));
    ct_op_pointwise_loss_backward(p->kind, &p->opts, pred, target, scale, dpred);
    return CT_OK;
}

/* Every row's sum from one pass (ct_op_pointwise_loss_rows); each row's count is its elements. */
static ct_status forward_rows(ct_loss *l, const ct_tensor *pred, const ct_tensor *target, ct_loss_value *rows) {
    pointwise_loss *p = self(l);
    CT_TRY(check(p, pred, target));
    int64_t n = pred->shape[0];
    if (n == 0) return CT_OK;
    double *sums = malloc((size_t)n * sizeof *sums);
    if (!sums) return ct_error(CT_ERR_NOMEM, "out of memory for %lld rows' losses", (long long)n);
    ct_op_pointwise_loss_rows(p->kind, &p->opts, pred, target, sums);
    double m = (double)(ct_tensor_numel(pred) / n);
    for (int64_t i = 0; i < n; i++) rows[i] = (ct_loss_value){sums[i], m};
    free(sums);
    return CT_OK;
}

/* The forward's sum into the step's block, then the backward: no value comes back to the host. */
static ct_status forward_backward_acc(ct_loss *l, const ct_tensor *pred, const ct_tensor *target, double scale,
                                      ct_tensor *dpred, ct_tensor *stats) {
    pointwise_loss *p = self(l);
    CT_TRY(check(p, pred, target));
    ct_op_pointwise_loss_acc(p->kind, &p->opts, pred, target, stats);
    ct_op_pointwise_loss_backward(p->kind, &p->opts, pred, target, scale, dpred);
    return CT_OK;
}

static void destroy(ct_loss *l) {
    pointwise_loss *p = self(l);
    ct_tensor_free(&p->pos_weight);
    free(p);
}

/* No forward_backward: the wrapper's forward, then backward, is already one pass each. */
#define POINTWISE_OPS(name)                                                                                    \
    {sizeof(ct_loss_ops), name, forward, backward, destroy, NULL, forward_rows, forward_backward_acc}
static const ct_loss_ops ops[] = {
    [CT_LOSS_MSE] = POINTWISE_OPS("mse"),
    [CT_LOSS_L1] = POINTWISE_OPS("l1"),
    [CT_LOSS_HUBER] = POINTWISE_OPS("huber"),
    [CT_LOSS_BCE_LOGITS] = POINTWISE_OPS("bce_with_logits"),
};

static ct_status create(ct_pointwise_loss kind, double delta, const double *pw, int64_t npw, ct_loss **out) {
    *out = NULL;
    pointwise_loss *p = calloc(1, sizeof *p);
    if (!p) return ct_error(CT_ERR_NOMEM, "%s loss: out of memory", ops[kind].name);
    ct_loss_base_init(&p->base, &ops[kind]);
    p->kind = kind;
    p->opts.delta = delta;
    if (pw) {
        char who[64];
        snprintf(who, sizeof who, "%s loss", ops[kind].name);
        ct_status s = ct_loss_copy_reals(who, pw, npw, &p->pos_weight);
        if (s != CT_OK) {
            free(p);
            return s;
        }
        p->opts.pos_weight = &p->pos_weight;
    }
    *out = &p->base;
    return CT_OK;
}

ct_status ct_mse_loss_create(ct_loss **out) { return create(CT_LOSS_MSE, 1.0, NULL, 0, out); }
ct_status ct_l1_loss_create(ct_loss **out) { return create(CT_LOSS_L1, 1.0, NULL, 0, out); }

ct_status ct_huber_loss_create(double delta, ct_loss **out) {
    *out = NULL;
    if (!(delta > 0.0) || !isfinite(delta))
        return ct_error(CT_ERR_INVALID_ARG, "huber loss: delta %g must be a finite number > 0", delta);
    return create(CT_LOSS_HUBER, delta, NULL, 0, out);
}

ct_status ct_bce_with_logits_loss_create(const double *pos_weight, int64_t n, ct_loss **out) {
    *out = NULL;
    if (pos_weight && n < 1)
        return ct_error(CT_ERR_INVALID_ARG, "bce_with_logits loss: %lld pos_weight values", (long long)n);
    for (int64_t i = 0; pos_weight && i < n; i++)
        if (!isfinite(pos_weight[i]) || pos_weight[i] < 0)
            return ct_error(CT_ERR_INVALID_ARG, "bce_with_logits loss: pos_weight[%lld] = %g is not a finite "
                            "number >= 0", (long long)i, pos_weight[i]);
    return create(CT_LOSS_BCE_LOGITS, 1.0, pos_weight, n, out);
}

ct_status ct_pointwise_loss_from_json(const json_t *spec, const char *path, ct_loss **out) {
    *out = NULL;
    const char *type;
    CT_TRY(ct_json_string(spec, path, "type", true, NULL, &type));
    if (strcmp(type, "huber") == 0) {
        static const char *const keys[] = {"type", "delta", NULL};
        CT_TRY(ct_json_check_keys(spec, path, keys));
        double delta;
        CT_TRY(ct_json_real(spec, path, "delta", false, 1.0, &delta));
        if (!(delta > 0.0) || !isfinite(delta))
            return ct_error(CT_ERR_CONFIG, "%s.delta: %g must be a finite number > 0", path, delta);
        return ct_huber_loss_create(delta, out);
    }
    if (strcmp(type, "bce_with_logits") == 0) {
        static const char *const keys[] = {"type", "pos_weight", NULL};
        CT_TRY(ct_json_check_keys(spec, path, keys));
        double *pw;
        int64_t n;
        CT_TRY(ct_loss_json_reals(spec, path, "pos_weight", true, 0.0, &pw, &n));
        ct_status s = ct_bce_with_logits_loss_create(pw, n, out);
        free(pw);
        return s;
    }
    static const char *const keys[] = {"type", NULL};
    CT_TRY(ct_json_check_keys(spec, path, keys));
    if (strcmp(type, "mse") == 0) return ct_mse_loss_create(out);
    if (strcmp(type, "l1") == 0) return ct_l1_loss_create(out);
    return ct_error(CT_ERR_CONFIG, "%s.type: '%s' is not an elementwise loss", path, type);
}
