/* Mode "sched": builds a scheduler from spec["scheduler"] (Hugging Face's keys lr_scheduler_type,
 * warmup_steps, warmup_ratio, lr_scheduler_kwargs) with spec["learning_rate"] and
 * spec["num_training_steps"], then runs spec["steps"] steps the way the Trainer does: read the rate,
 * then step (or, for a metric-driven scheduler, feed metrics[k]). Writes, all float64:
 *   lr[k]     the rate of step k as the running scheduler gave it;
 *   lr_at[k]  ct_scheduler_lr_at(k) from a fresh scheduler (step-driven only);
 *   state     [step, lr, best, num_bad_epochs, cooldown_counter] after the last step;
 *   warmup    [resolved warmup steps].
 * spec["resume_at"], a list of steps: before each, the scheduler is checkpointed (its state through
 * JSON text), destroyed, rebuilt from the spec and restored, so lr and state check resumption
 * against the uninterrupted reference. */
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "optim/scheduler.h"
#include "oracle.h"

static ct_status build(const json_t *spec, ct_scheduler **out) {
    double lr;
    int64_t total;
    CT_TRY(ct_json_real(spec, "spec", "learning_rate", true, 0, &lr));
    CT_TRY(ct_json_int(spec, "spec", "num_training_steps", true, 0, &total));
    return ct_scheduler_from_json(json_object_get(spec, "scheduler"), "scheduler", lr, total, out);
}

/* Checkpoint and restore through JSON text, as a trainer_state file would. */
static ct_status checkpoint_roundtrip(const json_t *spec, ct_scheduler **s) {
    ct_scheduler_state st = ct_scheduler_get_state(*s);
    json_t *j = ct_scheduler_state_to_json(&st);
    char *text = j ? json_dumps(j, 0) : NULL;
    json_decref(j);
    if (!text) return ct_error(CT_ERR_NOMEM, "scheduler state to JSON failed");
    json_error_t err;
    json_t *back = json_loads(text, 0, &err);
    free(text);
    ct_scheduler_state restored;
    ct_status s_ = back ? ct_scheduler_state_from_json(back, "state", &restored)
                        : ct_error(CT_ERR_FORMAT, "state JSON: %s", err.text);
    json_decref(back);
    CT_TRY(s_);
    ct_scheduler_destroy(*s);
    *s = NULL;
    CT_TRY(build(spec, s));
    return ct_scheduler_set_state(*s, &restored);
}

static ct_status write_f64(hid_t out, const char *name, double *data, int64_t n) {
    ct_tensor t = ct_tensor_view(data, CT_F64, CT_CPU, 1, &n);
    return ct_h5_write_tensor(out, name, &t);
}

ct_status oracle_sched(const oracle_io *io) {
    const json_t *spec = io->spec;
    int64_t steps;
    CT_TRY(ct_json_int(spec, "spec", "steps", true, 0, &steps));
    const json_t *resume_at = json_object_get(spec, "resume_at");
    size_t next_resume = 0; /* index into resume_at, which is ascending */
    if (steps < 1) return ct_error(CT_ERR_INVALID_ARG, "spec.steps: must be >= 1");
    ct_scheduler *s = NULL, *fresh = NULL;
    CT_TRY(build(spec, &s));
    bool metric = ct_scheduler_needs_metric(s);
    double *lr = calloc((size_t)steps, sizeof *lr), *lr_at = calloc((size_t)steps, sizeof *lr_at);
    ct_tensor metrics = {0};
    ct_status st = lr && lr_at ? CT_OK : ct_error(CT_ERR_NOMEM, "sched: out of memory");
    if (st == CT_OK && metric) {
        st = ct_h5_read_tensor_alloc(io->in, "metrics", CT_F64, &metrics);
        if (st == CT_OK && ct_tensor_numel(&metrics) < steps)
            st = ct_error(CT_ERR_SHAPE, "sched: %lld metrics for %lld steps", (long long)ct_tensor_numel(&metrics),
                          (long long)steps);
    }
    if (st == CT_OK) st = build(spec, &fresh);
    for (int64_t k = 0; st == CT_OK && k < steps; k++) {
        if (next_resume < json_array_size(resume_at) &&
            json_integer_value(json_array_get(resume_at, next_resume)) == k) {
            next_resume++;
            st = checkpoint_roundtrip(spec, &s);
        }
        if (st != CT_OK) break;
        lr[k] = ct_scheduler_lr(s);
        lr_at[k] = ct_scheduler_lr_at(fresh, k);
        if (metric)
            st = ct_scheduler_step_metric(s, ((const double *)metrics.data)[k]);
        else
            ct_scheduler_step(s);
    }
    if (st == CT_OK) st = write_f64(io->out, "lr", lr, steps);
    if (st == CT_OK && !metric) st = write_f64(io->out, "lr_at", lr_at, steps);
    if (st == CT_OK) {
        ct_scheduler_state fin = ct_scheduler_get_state(s);
        double state[5] = {(double)fin.step, fin.lr, fin.best, (double)fin.num_bad_epochs,
                           (double)fin.cooldown_counter};
        st = write_f64(io->out, "state", state, 5);
        double warmup = (double)s->num_warmup_steps;
        if (st == CT_OK) st = write_f64(io->out, "warmup", &warmup, 1);
    }
    ct_tensor_free(&metrics);
    free(lr);
    free(lr_at);
    ct_scheduler_destroy(s);
    ct_scheduler_destroy(fresh);
    return st;
}
