/* Ops: loss family (declarations; CPU kernels in backends/cpu/loss.c). Included by core/ops/ops.h.
 *
 * Loss ops return the SUM of per-element (or per-row) losses, accumulated in float64, and the COUNT
 * that sum is over; model/loss.h turns them into ct_loss objects. Sums are reduced over a fixed number
 * of row chunks and the partial sums added in order, so the result does not depend on the number of
 * threads (the CPU determinism promise). Backward ops OVERWRITE dpred with scale * d(sum)/d(pred).
 *
 * Validation is the caller's job (model/loss.c names the loss and the shapes), with one exception:
 * class targets are data, so the cross-entropy ops report the first target outside [0, C) that is not
 * ignore_index instead of trusting it. */
#ifndef CT_OPS_LOSS_H
#define CT_OPS_LOSS_H

#include <stdint.h>

#include "core/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Options of softmax cross-entropy, with PyTorch's meaning. */
typedef struct ct_xent_opts {
    const ct_tensor *weight; /* [C] float64 class weights on the logits' device, or NULL */
    double label_smoothing;  /* epsilon in [0, 1] */
    int64_t ignore_index;    /* rows with this target contribute nothing (PyTorch default -100) */
} ct_xent_opts;

/* Softmax cross-entropy over logits viewed as [rows, C] (C = last dimension) with one integer target
 * per row (I64 or I32, `rows` elements). Per row, with p = softmax(z), w = weight (1 when NULL),
 * eps = label_smoothing:
 *   loss = (1 - eps) * w[y] * (-log p[y]) + eps / C * sum_c w[c] * (-log p[c]),
 * which is PyTorch's cross_entropy with reduction='sum'; *count = sum of w[y] over non-ignored rows,
 * the denominator of its reduction='mean'. Returns -1, or the row index of the first invalid target
 * (then *sum and *count are meaningless). */
int64_t ct_op_cross_entropy_forward(const ct_tensor *logits, const ct_tensor *target, const ct_xent_opts *o,
                                    double *sum, double *count);
/* The same per row, into host arrays of one entry per row: loss[r] and count[r] are what
 * ct_op_cross_entropy_forward gives for row r alone, bit for bit (0 and 0 for an ignored row), from
 * one pass and, on a GPU, one copy back (an evaluation's per-sample losses). Returns -1 or the first
 * invalid target's row (then the arrays are meaningless). */
int64_t ct_op_cross_entropy_rows(const ct_tensor *logits, const ct_tensor *target, const ct_xent_opts *o,
                                 double *loss, double *count);
/* A language model's token values (eval/metrics_lm.c's token_loss, perplexity and token_accuracy), per
 * row of logits [rows, C] and its label (I64 or I32, `rows` elements, on the logits' device), into host
 * arrays of one entry per row, from one pass over the logits and, on a GPU, one copy back of 16 bytes
 * per row instead of the row's C logits:
 *   nll[r]  -log softmax(z)[y] in float64 as (m - z[y]) + log1p(sum over j != a of exp(z_j - m)), a
 *           the first largest logit and m its value: a confidently right token keeps its tiny loss;
 *           NaN when a logit is NaN or the largest is infinite, as log_softmax gives;
 *   hit[r]  1 when a == y, else 0 (the first maximum wins and NaN ranks above every number, as
 *           torch.argmax).
 * A row whose label is outside [0, C) (ignore_index among them) gets 0 and 0: the caller, which knows
 * which labels it ignores, checks the others. Rows are independent: any thread count gives the same
 * values. */
void ct_op_token_values(const ct_tensor *logits, const ct_tensor *labels, double *nll, double *hit);
/* A classifier's class ranks (eval/: accuracy, top-k accuracy, the confusion-matrix family), per row
 * of scores [rows, C] (float32/float64) and its label (I64 or I32, `rows` elements, on the scores'
 * device), into host arrays of one entry per row, from one pass over the scores and, on a GPU, one
 * copy back of 8 bytes per row instead of the row's C scores:
 *   pred[r]   the first largest score's class (NaN ranks above every number: torch.argmax);
 *   above[r]  how many classes rank above the label y: j with s[j] > s[y], or s[j] == s[y] and
 *             j > y (NaN the largest and equal to itself), scikit-learn's top_k_accuracy_score order
 *             (a stable ascending argsort, reversed), so y is in the top k when above[r] < k;
 *             -1 when y is outside [0, C) (the caller checks the labels it counts).
 * C at most INT32_MAX. Rows are independent: any thread count gives the same values. */
void ct_op_class_ranks(const ct_tensor *scores, const ct_tensor *labels, int64_t *pred, int64_t *above);
/* dlogits = scale * d(sum)/d(logits); ignored rows get zeros. Recomputes the softmax row by row, so it
 * needs no scratch and no state from the forward. Returns -1 or the first invalid target's row. */
int64_t ct_op_cross_entropy_backward(const ct_tensor *logits, const ct_tensor *target, const ct_xent_opts *o,
                                     double scale, ct_tensor *dlogits);

/* Softmax cross-entropy and its gradient in one pass, llm.c's fused_classifier: *sum and *count as
 * ct_op_cross_entropy_forward and dlogits = scale * d(sum)/d(logits) as ct_op_cross_entropy_backward,
 * each row read for its max and log-sum-exp and then overwritten by its gradient, so the
 * probabilities are never stored and the logits are read three times instead of five. dlogits may
 * be logits itself: the gradient then replaces the logits in place, which saves the caller a second
 * [rows, C] buffer (50304 floats per token for GPT-2). Targets are checked before anything is
 * written: on an invalid one it returns its row and leaves dlogits (and so the logits) untouched. */
int64_t ct_op_fused_classifier(const ct_tensor *logits, const ct_tensor *target, const ct_xent_opts *o,
                               double scale, double *sum, double *count, ct_tensor *dlogits);

/* ct_op_fused_classifier without a wait: the sum and count are added to stats[CT_STEP_LOSS_SUM] and
 * stats[CT_STEP_LOSS_COUNT] on the device (core/ops/step_rule.h) and an invalid target's row r makes
 * stats[CT_STEP_BAD_LABEL] r + 1 unless it holds an earlier one (dlogits then left as it was). */
void ct_op_fused_classifier_acc(const ct_tensor *logits, const ct_tensor *target, const ct_xent_opts *o,
                                double scale, ct_tensor *dlogits, ct_tensor *stats);

/* Elementwise losses between a prediction and a float target of the same shape and dtype. */
typedef enum ct_pointwise_loss {
    CT_LOSS_MSE = 0,     /* (x - y)^2 */
    CT_LOSS_L1,          /* |x - y| (gradient 0 at x == y, as torch.sign) */
    CT_LOSS_HUBER,       /* 0.5 d^2 if |d| <= delta else delta * (|d| - 0.5 delta), d = x - y */
    CT_LOSS_BCE_LOGITS,  /* (1 - y) x + (1 + (pw - 1) y) * log(1 + exp(-x)), computed stably */
} ct_pointwise_loss;

typedef struct ct_pointwise_opts {
    double delta;                /* huber */
    const ct_tensor *pos_weight; /* bce: float64 [1] or [last dim of pred], or NULL (all ones) */
} ct_pointwise_opts;

/* Sum over all elements of the elementwise loss (the count is the number of elements). */
double ct_op_pointwise_loss_forward(ct_pointwise_loss kind, const ct_pointwise_opts *o, const ct_tensor *pred,
                                    const ct_tensor *target);
/* The same per row (pred's first dimension, of m = numel / rows elements each), into a host array of
 * one entry per row, from one pass and, on a GPU, one copy back (an evaluation's per-sample losses;
 * each row's count is m). loss[r] is the sum of row r's elements, pos_weight indexed by the element's
 * position in the whole tensor as the forward indexes it; on the CPU it is what
 * ct_op_pointwise_loss_forward gives for the row alone, bit for bit (on a GPU the order of the
 * row's additions may differ). */
void ct_op_pointwise_loss_rows(ct_pointwise_loss kind, const ct_pointwise_opts *o, const ct_tensor *pred,
                               const ct_tensor *target, double *loss);
/* ct_op_pointwise_loss_forward without a wait: the sum is added to stats[CT_STEP_LOSS_SUM] and the
 * element count to stats[CT_STEP_LOSS_COUNT] on the device. */
void ct_op_pointwise_loss_acc(ct_pointwise_loss kind, const ct_pointwise_opts *o, const ct_tensor *pred,
                              const ct_tensor *target, ct_tensor *stats);
/* dpred = scale * d(sum)/d(pred). */
void ct_op_pointwise_loss_backward(ct_pointwise_loss kind, const ct_pointwise_opts *o, const ct_tensor *pred,
                                   const ct_tensor *target, double scale, ct_tensor *dpred);

#ifdef __cplusplus
}
#endif

#endif
