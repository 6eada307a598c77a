/* An evaluation batch's loss and its per-row losses (the loss metric's standard error) from one pass
 * over the outputs, where the hooks are the defaults.
 *
 * The default prediction_step computes the batch's loss (one pass over the logits) and the evaluator
 * then wanted each row's loss (a second pass), and the language-model metrics their token values (a
 * third). For GPT-2's 50257 logits a token each pass costs about what the LM head's matrix product
 * does on a CPU, and on a GPU it reads 200 MB a sample at 1024 positions. Here the model's forward
 * runs alone; each row's (sum, count) comes from the loss's forward_rows, and the batch's loss is their
 * sum: the same (sum, count) up to the order of float64 additions, because every built-in loss's rows
 * add up to its batch. For a plain cross-entropy (no class weights, no smoothing: ct_loss_plain_nll)
 * whose token values the evaluator computed anyway, the rows are added up from those on the host and
 * the logits are not read again; a label that is neither a class nor ignore_index sends the batch to
 * forward_rows, which names it as the loss always has.
 *
 * A prediction_step or compute_loss hook keeps the hooks' path (evaluate.c): an override may weigh
 * or compute its loss its own way. Errors read as the default hooks' would ("prediction_step:
 * compute_loss: ..."), since these are those hooks' steps. */
#include <math.h>

#include "trainer/trainer_impl.h"

static ct_status as_default_hooks(ct_status s) {
    return s == CT_OK ? s : ct_error_prefix(s, "prediction_step: compute_loss: ");
}

bool ct_eval_loss_from_rows(const ct_trainer *t, const ct_batch *db) {
    return !CT_TRAINER_HOOK(t, prediction_step) && !CT_TRAINER_HOOK(t, compute_loss) && db->labels.data &&
           db->labels.ndim > 0;
}

ct_status ct_eval_forward(ct_trainer *t, const ct_batch *db, ct_tensor *outputs) {
    return as_default_hooks(ct_model_forward(t->model, &db->features, outputs));
}

/* rows[0..n) from the token values of a plain cross-entropy: each row's non-ignored positions added in
 * order, as forward_rows adds them. False when the loss is not one, or a label of the real rows is
 * neither a class nor ignore_index (rows are then partly written; forward_rows writes them all). */
static bool rows_from_tokens(const ct_loss *loss, const ct_token_values *tv, const ct_tensor *labels, int64_t n,
                             ct_loss_value *rows) {
    int64_t ignore;
    if (!tv || !ct_loss_plain_nll(loss, &ignore) || labels->device.kind != CT_DEVICE_CPU) return false;
    int64_t classes = tv->shape[tv->ndim - 1], per = labels->shape[0] ? ct_tensor_numel(labels) / labels->shape[0] : 0;
    for (int64_t i = 0; i < n; i++) {
        ct_loss_value v = {0.0, 0.0};
        for (int64_t p = i * per; p < (i + 1) * per; p++) {
            int64_t y = (int64_t)ct_tensor_get(labels, p);
            if (y == ignore) continue;
            if (y < 0 || y >= classes) return false;
            v = ct_loss_value_add(v, (ct_loss_value){tv->nll[p], 1.0});
        }
        rows[i] = v;
    }
    return true;
}

ct_status ct_eval_row_losses(ct_trainer *t, const ct_batch *b, const ct_batch *db, const ct_tensor *outputs,
                             const ct_token_values *tokens, ct_loss_value *rows, ct_loss_value *loss) {
    int64_t n;
    *loss = (ct_loss_value){0.0, 0.0};
    CT_TRY(as_default_hooks(ct_trainer_real_rows(b, &n)));
    if (n == 0) return CT_OK;
    if (!rows_from_tokens(t->loss, tokens, &b->labels, n, rows)) {
        ct_tensor o = ct_tensor_rows(outputs, 0, n), y = ct_tensor_rows(&db->labels, 0, n);
        CT_TRY(as_default_hooks(ct_loss_forward_rows(t->loss, &o, &y, rows)));
    }
    for (int64_t i = 0; i < n; i++) *loss = ct_loss_value_add(*loss, rows[i]);
    return CT_OK;
}

bool ct_eval_rows_explain(const ct_loss_value *rows, int64_t n, ct_loss_value loss) {
    double sum = 0, size = 0, count = 0;
    for (int64_t i = 0; i < n; i++) {
        sum += rows[i].sum;
        size += fabs(rows[i].sum);
        count += rows[i].count;
    }
    return count == loss.count && fabs(sum - loss.sum) <= 1e-5 * fmax(1.0, size);
}
