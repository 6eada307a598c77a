/* Losses: a small vtable, the built-in losses (PyTorch semantics) and their JSON readers.
 *
 * A loss returns the SUM of its per-sample (or per-element) losses and the COUNT they are over, never
 * a mean: the Trainer adds (sum, count) over all micro-batches and ranks of an optimizer step and
 * divides once by the global count, so N ranks x B == 1 rank x N*B == B x N accumulation steps (see
 * DESIGN.md, "Weighting is exact by construction"). For every built-in loss sum / count equals
 * PyTorch's reduction='mean' and sum equals reduction='sum':
 *   cross_entropy   logits [N, C] or [N, T, C] (classes last: per-position token losses), integer
 *                   targets [N] or [N, T] (int64 or int32). Class weights, label_smoothing and
 *                   ignore_index (default -100) as torch.nn.functional.cross_entropy; count = sum of
 *                   the weights of the non-ignored targets (their number when unweighted), which is
 *                   PyTorch's denominator for 'mean' with weights, with and without smoothing.
 *   mse, l1, huber (delta, default 1), bce_with_logits (optional pos_weight, one value or one per
 *                   entry of the last dimension): float targets of the prediction's shape and dtype;
 *                   count = number of elements.
 * Predictions are float32 or float64; sums are accumulated in float64.
 *
 * NaN: a NaN in a prediction or a float target propagates into the sum (and the gradient) as it
 * does in PyTorch; it is not an error here, because the Trainer's non-finite-loss check is the one
 * place that decides what to do with it. An all-ignored batch gives (0, 0).
 *
 * The vtable follows model/module.h: a loss is a struct whose first member is a ct_loss; its const
 * ops table starts with its size, members are only appended, and NULL means the default
 * (ct_loss_default_*). Calls go through the ct_loss_* wrappers, which validate the tensors both
 * calls share and prefix errors with "<name> loss: ". Neither call allocates (forward_rows may, for
 * its per-position scratch). */
#ifndef CT_LOSS_H
#define CT_LOSS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/tensor.h"

typedef struct ct_loss ct_loss;

/* What a forward returns: divide sums by counts only after adding them up. */
typedef struct ct_loss_value {
    double sum;
    double count;
} ct_loss_value;

static inline ct_loss_value ct_loss_value_add(ct_loss_value a, ct_loss_value b) {
    return (ct_loss_value){a.sum + b.sum, a.count + b.count};
}
/* sum / count (NaN for an empty count, as PyTorch's mean of nothing). */
static inline double ct_loss_value_mean(ct_loss_value v) { return v.sum / v.count; }

typedef struct ct_loss_ops {
    size_t size;      /* sizeof(ct_loss_ops) when the table was written */
    const char *name; /* "cross_entropy"; NULL: "custom" */
    /* Required. *out = (sum, count) of the losses of pred against target. */
    ct_status (*forward)(ct_loss *l, const ct_tensor *pred, const ct_tensor *target, ct_loss_value *out);
    /* Required for training. dpred = scale * d(sum)/d(pred), overwritten (dpred may alias pred,
     * but not a model's output buffer: the model's backward still reads it, see model.h).
     * Must not depend on a previous forward: callers may evaluate and differentiate separately.
     * The wrapper rejects a non-finite scale: a step whose global count is 0 (every target
     * ignored) has nothing to differentiate, and 1/0 would silently fill dpred with NaN. */
    ct_status (*backward)(ct_loss *l, const ct_tensor *pred, const ct_tensor *target, double scale,
                          ct_tensor *dpred);
    /* Releases the loss. NULL: ct_loss_default_destroy (free of the enclosing allocation). */
    void (*destroy)(ct_loss *l);
    /* Optional: forward and backward in one call, *out as forward's and dpred as backward's, with
     * dpred allowed to be pred itself (the gradient replacing the predictions in place). On an error
     * pred is left as it was. NULL: the wrapper runs forward, then backward. Cross-entropy fuses them
     * (ct_op_fused_classifier: one pass over the logits, no stored probabilities). */
    ct_status (*forward_backward)(ct_loss *l, const ct_tensor *pred, const ct_tensor *target, double scale,
                                  ct_tensor *dpred, ct_loss_value *out);
    /* Optional: for each of pred's rows (its first dimension: the samples) the (sum, count) that
     * forward gives for that row alone, into rows[] (host memory), from one pass over the batch (an
     * evaluation's per-sample losses: one copy back from a GPU rather than one per row). NULL: the
     * wrapper calls forward on each row. Every built-in loss has it. */
    ct_status (*forward_rows)(ct_loss *l, const ct_tensor *pred, const ct_tensor *target, ct_loss_value *rows);
    /* Optional: forward_backward without waiting for the device. The (sum, count) is added to the
     * step's block `stats` on pred's device (core/ops/step_rule.h: CT_STEP_LOSS_SUM, _COUNT) instead
     * of coming back to the host, and a target the loss cannot take marks CT_STEP_BAD_LABEL there
     * (the step is then not applied; the Trainer reports it when it reads the block). NULL: the
     * Trainer's step on a GPU reads every loss back. Every built-in loss has it. */
    ct_status (*forward_backward_acc)(ct_loss *l, const ct_tensor *pred, const ct_tensor *target, double scale,
                                      ct_tensor *dpred, ct_tensor *stats);
} ct_loss_ops;

struct ct_loss {
    const ct_loss_ops *ops;
};

/* Initialises the base of a new loss (call from a loss's constructor) and checks its table
 * (core/vtable.h): CT_ERR_INVALID_ARG naming the table and the fix when `size` is 0 or smaller than
 * a table with `forward`, or forward is NULL. */
ct_status ct_loss_base_init(ct_loss *l, const ct_loss_ops *ops);
/* The same check of an existing loss; with `training`, backward is required too. ct_trainer_init
 * runs it (training when there is a training set). */
ct_status ct_loss_check(const ct_loss *l, bool training);
const char *ct_loss_name(const ct_loss *l);

/* The wrappers. Both check that pred is a float32/float64 tensor with target on its device (and, for
 * backward, that dpred has pred's shape, dtype and device); the loss checks the rest. */
ct_status ct_loss_forward(ct_loss *l, const ct_tensor *pred, const ct_tensor *target, ct_loss_value *out);
ct_status ct_loss_backward(ct_loss *l, const ct_tensor *pred, const ct_tensor *target, double scale,
                           ct_tensor *dpred);
/* Both at once, through the loss's forward_backward when it has one (the Trainer's step calls this):
 * the checks of both wrappers, then *out and dpred as ct_loss_forward and ct_loss_backward give them.
 * dpred may be pred itself; a loss without forward_backward then runs forward before backward
 * overwrites pred, which its backward must allow (every built-in loss's does). */
ct_status ct_loss_forward_backward(ct_loss *l, const ct_tensor *pred, const ct_tensor *target, double scale,
                                   ct_tensor *dpred, ct_loss_value *out);
/* Through the loss's forward_backward_acc, with the checks of ct_loss_forward_backward; whether l has
 * one is ct_loss_accumulates(l). */
ct_status ct_loss_forward_backward_acc(ct_loss *l, const ct_tensor *pred, const ct_tensor *target, double scale,
                                       ct_tensor *dpred, ct_tensor *stats);
bool ct_loss_accumulates(const ct_loss *l);
/* rows[i] = (sum, count) of pred's row i alone, for every row (pred's first dimension), through the
 * loss's forward_rows when it has one, else forward on each row; the checks of ct_loss_forward. */
ct_status ct_loss_forward_rows(ct_loss *l, const ct_tensor *pred, const ct_tensor *target, ct_loss_value *rows);
/* Destroys l (NULL is fine). */
void ct_loss_free(ct_loss *l);
/* The default destroy: free(l). */
void ct_loss_default_destroy(ct_loss *l);

/* --- built-in losses ------------------------------------------------------------------------------ */

typedef struct ct_cross_entropy_opts {
    const double *weight; /* n_weight class weights (copied; finite, >= 0), NULL for none */
    int64_t n_weight;
    double label_smoothing; /* in [0, 1] */
    int64_t ignore_index;
} ct_cross_entropy_opts;

/* No weights, no smoothing, ignore_index -100: PyTorch's defaults. */
ct_cross_entropy_opts ct_cross_entropy_defaults(void);
ct_status ct_cross_entropy_loss_create(const ct_cross_entropy_opts *o, ct_loss **out);
/* Whether l is the built-in cross_entropy, whose targets are class ids of the outputs' last
 * dimension, and then its ignore_index: what ct_trainer_init checks every dataset's labels against. */
bool ct_loss_class_targets(const ct_loss *l, int64_t *ignore_index);
/* Whether l is the built-in cross_entropy without class weights and label smoothing, whose loss of a
 * target that is not ignore_index is the token's -log softmax(z)[y] with a count of 1 (what
 * ct_op_token_values gives as nll), and then its ignore_index. */
bool ct_loss_plain_nll(const ct_loss *l, int64_t *ignore_index);
ct_status ct_mse_loss_create(ct_loss **out);
ct_status ct_l1_loss_create(ct_loss **out);
/* delta > 0 (PyTorch's HuberLoss; default 1). */
ct_status ct_huber_loss_create(double delta, ct_loss **out);
/* pos_weight: n values (copied; 1 = broadcast, or one per entry of pred's last dimension), or NULL. */
ct_status ct_bce_with_logits_loss_create(const double *pos_weight, int64_t n, ct_loss **out);

/* A loss from its JSON spec: {"type": "cross_entropy", "label_smoothing": 0.1, "ignore_index": -100,
 * "weight": [...]}, {"type": "mse"}, {"type": "l1"}, {"type": "huber", "delta": 1.0},
 * {"type": "bce_with_logits", "pos_weight": 2.0 or [...]}; a bare string "mse" names a loss with its
 * defaults. Errors name the JSON path ("loss.label_smoothing: ..."). */
ct_status ct_loss_from_json(const json_t *spec, const char *path, ct_loss **out);
/* An application's loss type: builds *out from spec, an object whose "type" is the registered name
 * (a bare string "my_loss" arrives as {"type": "my_loss"}). Errors should start with `path`; any
 * that does not is prefixed with it. */
typedef ct_status (*ct_loss_from_json_fn)(const json_t *spec, const char *path, ct_loss **out);
/* Registers a loss type for ct_loss_from_json (and so for run configs' "loss"), under a name that is
 * not a built-in one (core/registry.h lists what is refused). The loss it returns is checked with
 * ct_loss_check (its table; whether it can train is checked by ct_trainer_init). */
ct_status ct_register_loss_type(const char *type, ct_loss_from_json_fn fn);
/* The per-family readers ct_loss_from_json dispatches to (spec is an object with "type"). */
ct_status ct_cross_entropy_loss_from_json(const json_t *spec, const char *path, ct_loss **out);
ct_status ct_pointwise_loss_from_json(const json_t *spec, const char *path, ct_loss **out);

#endif
