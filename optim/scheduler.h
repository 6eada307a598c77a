/* Learning-rate schedulers with Hugging Face's names, settings and formulas.
 *
 * The built-ins are those of transformers.optimization.get_scheduler (checked against
 * transformers 4.51.3 by tests/oracle/test_schedulers.py): linear, cosine, cosine_with_restarts,
 * polynomial, constant, constant_with_warmup, inverse_sqrt, reduce_lr_on_plateau, cosine_with_min_lr
 * and warmup_stable_decay. Their settings are TrainingArguments' lr_scheduler_type, warmup_steps,
 * warmup_ratio and lr_scheduler_kwargs (num_cycles, power, lr_end, min_lr, ...).
 *
 * Step-driven schedulers are LambdaLR's: the rate of optimizer step k (counted from 0) is
 * base_lr * lambda(k). The Trainer reads ct_scheduler_lr() before each optimizer step and calls
 * ct_scheduler_step() after it, which is the order Hugging Face's Trainer keeps (optimizer.step(),
 * then lr_scheduler.step(); the rate it logs is the one the step used). Metric-driven schedulers
 * (reduce_lr_on_plateau, torch's ReduceLROnPlateau) ignore ct_scheduler_step() and change the rate
 * only in ct_scheduler_step_metric(), which the Trainer calls after each evaluation with the metric
 * for best model, as Hugging Face's does. Calling both on every scheduler is always right.
 *
 * Everything a checkpoint needs is a ct_scheduler_state (a handful of numbers): save it with
 * ct_scheduler_get_state, restore it into a scheduler created from the same configuration with
 * ct_scheduler_set_state, and the run continues exactly as if it had never stopped.
 *
 * Deliberate differences from Hugging Face, all where it would silently ignore or crash:
 *  - a kwarg the chosen scheduler does not take is an error (get_scheduler raises TypeError for most
 *    types but drops the kwargs of constant, constant_with_warmup and inverse_sqrt silently);
 *  - inverse_sqrt takes "timescale" (get_inverse_sqrt_schedule's parameter, which get_scheduler
 *    never passes on);
 *  - values no formula can use are errors up front: warmup_stable_decay with warmup + decay steps
 *    beyond num_training_steps (a negative stable phase), num_cycles <= 0, factor >= 1, ...;
 *  - polynomial with warmup_steps == num_training_steps gives lr_end at the last step instead of
 *    dividing by zero.
 *
 * Subclassing: embed ct_scheduler as the FIRST member of your struct, give it a const
 * ct_scheduler_ops table and initialise the base with ct_scheduler_base_init. `size` and `name` are
 * required; a NULL lr_lambda makes a metric-driven scheduler (its rate lives in state.lr and changes
 * only through on_metric); a NULL destroy means free(). Members are only ever appended. */
#ifndef CT_SCHEDULER_H
#define CT_SCHEDULER_H

#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

typedef struct ct_scheduler ct_scheduler;

/* --- configuration ------------------------------------------------------------------------------ */

/* "Not given" for a kwarg, so each scheduler can apply its own default (num_cycles is 0.5 for
 * cosine but 1 for cosine_with_restarts) and reject kwargs it does not take. */
#define CT_SCHED_UNSET_INT INT64_MIN
#define CT_SCHED_UNSET_REAL NAN /* test with isnan() */

/* lr_scheduler_kwargs. Strings are stored by value ("" = not given) so a config outlives its JSON. */
typedef struct ct_scheduler_kwargs {
    double num_cycles;       /* cosine, cosine_with_min_lr (default 0.5); cosine_with_restarts (1);
                              * warmup_stable_decay (0.5, for decay_type cosine) */
    double power;            /* polynomial (default 1) */
    double lr_end;           /* polynomial (default 1e-7; must be below the base lr) */
    int64_t timescale;       /* inverse_sqrt (default warmup steps, or 10000 without warmup) */
    double min_lr;           /* cosine_with_min_lr (this or min_lr_rate); reduce_lr_on_plateau (0) */
    double min_lr_rate;      /* cosine_with_min_lr: min_lr as a fraction of the base lr */
    int64_t num_stable_steps; /* warmup_stable_decay (default: the steps warmup and decay leave) */
    int64_t num_decay_steps;  /* warmup_stable_decay (required) */
    double min_lr_ratio;     /* warmup_stable_decay (default 0) */
    char warmup_type[16];    /* warmup_stable_decay: linear (default), cosine, 1-sqrt */
    char decay_type[16];     /* warmup_stable_decay: cosine (default), linear, 1-sqrt */
    /* reduce_lr_on_plateau, with torch.optim.lr_scheduler.ReduceLROnPlateau's defaults */
    char mode[8];            /* min (default), max */
    double factor;           /* 0.1; must be < 1 */
    int64_t patience;        /* 10 */
    double threshold;        /* 1e-4 */
    char threshold_mode[8];  /* rel (default), abs */
    int64_t cooldown;        /* 0 */
    double eps;              /* 1e-8: a reduction smaller than eps is skipped */
} ct_scheduler_kwargs;

typedef struct ct_scheduler_config {
    char lr_scheduler_type[32]; /* "linear" (Hugging Face's default), "cosine", ... */
    int64_t warmup_steps;       /* >= 0; when > 0 it wins over warmup_ratio */
    double warmup_ratio;        /* [0, 1]: warmup = ceil(num_training_steps * ratio) */
    ct_scheduler_kwargs kwargs;
} ct_scheduler_config;

/* The built-in names, NULL-terminated (for schemas, docs and "did you mean"). */
extern const char *const ct_scheduler_names[];

/* lr_scheduler_type "linear", no warmup, every kwarg unset. */
ct_scheduler_config ct_scheduler_config_default(void);
/* Every kwarg unset. */
ct_scheduler_kwargs ct_scheduler_kwargs_unset(void);

/* Fills cfg from the keys lr_scheduler_type, warmup_steps, warmup_ratio and lr_scheduler_kwargs of
 * obj (others are ignored: the training-arguments schema checks them), starting from
 * ct_scheduler_config_default(). Wrong types, an unknown scheduler name (with a "did you mean") and
 * a kwarg the scheduler does not take are CT_ERR_CONFIG naming path.key. */
ct_status ct_scheduler_config_from_json(const json_t *obj, const char *path, ct_scheduler_config *cfg);
/* Fills kwargs from a JSON object (an lr_scheduler_kwargs), checking its keys against what the
 * scheduler `type` takes; errors name path.key. */
ct_status ct_scheduler_kwargs_from_json(const json_t *obj, const char *path, const char *type,
                                        ct_scheduler_kwargs *kwargs);

/* Hugging Face's TrainingArguments.get_warmup_steps: warmup_steps when > 0, otherwise
 * ceil(num_training_steps * warmup_ratio). */
int64_t ct_scheduler_warmup_steps(int64_t num_training_steps, int64_t warmup_steps, double warmup_ratio);

/* Builds the scheduler cfg names for a run of num_training_steps optimizer steps, starting from
 * base_lr (finite, >= 0). num_training_steps 0 means unknown, which only constant,
 * constant_with_warmup, inverse_sqrt, reduce_lr_on_plateau and warmup_stable_decay with
 * num_stable_steps accept, and none with a warmup_ratio. Bad values are CT_ERR_CONFIG naming the key
 * (warmup_ratio, lr_scheduler_kwargs.factor, ...); *out is NULL then. */
ct_status ct_scheduler_create(const ct_scheduler_config *cfg, double base_lr, int64_t num_training_steps,
                              ct_scheduler **out);
/* The checks of ct_scheduler_create before the run's length is known, with errors naming path.key
 * (path may be NULL or ""): num_training_steps > 0 checks everything, 0 (unknown) all but what
 * depends on it (a warmup_stable_decay that does not fit). Nothing is kept. */
ct_status ct_scheduler_config_check(const ct_scheduler_config *cfg, const char *path, double base_lr,
                                    int64_t num_training_steps);
/* ct_scheduler_config_from_json + ct_scheduler_create, with errors naming path.key. */
ct_status ct_scheduler_from_json(const json_t *obj, const char *path, double base_lr, int64_t num_training_steps,
                                 ct_scheduler **out);

/* --- the vtable --------------------------------------------------------------------------------- */

/* Everything that changes while a scheduler runs; what a checkpoint stores. */
typedef struct ct_scheduler_state {
    int64_t step;             /* optimizer steps taken (LambdaLR's last_epoch); for a metric-driven
                               * scheduler, metrics seen (ReduceLROnPlateau's last_epoch) */
    double lr;                /* the rate of the next optimizer step */
    /* metric-driven only (ReduceLROnPlateau's fields; 0 for the others) */
    double best;              /* best metric so far; +inf (mode min) or -inf (max) before any */
    int64_t num_bad_epochs;
    int64_t cooldown_counter;
} ct_scheduler_state;

typedef struct ct_scheduler_ops {
    size_t size;      /* sizeof(ct_scheduler_ops) when the table was written */
    const char *name;
    /* The multiplier of the base rate for optimizer step `step` (>= 0). NULL: metric-driven. */
    double (*lr_lambda)(const ct_scheduler *s, int64_t step);
    /* Takes one metric value: updates state (step, lr, best, ...). NULL: metrics are ignored. */
    ct_status (*on_metric)(ct_scheduler *s, double metric);
    /* Releases everything. NULL: free(s). */
    void (*destroy)(ct_scheduler *s);
} ct_scheduler_ops;

struct ct_scheduler {
    const ct_scheduler_ops *ops;
    double base_lr;
    int64_t num_training_steps; /* 0 = unknown */
    int64_t num_warmup_steps;   /* resolved from warmup_steps / warmup_ratio */
    ct_scheduler_state state;
};

/* Initialises the base of a new scheduler at step 0 (state.lr = base_lr * lambda(0), or base_lr
 * for a metric-driven one) after checking its table (core/vtable.h): CT_ERR_INVALID_ARG naming the
 * table and the fix when ops is NULL, its size is 0 or too small, or name is NULL. */
ct_status ct_scheduler_base_init(ct_scheduler *s, const ct_scheduler_ops *ops, double base_lr,
                                 int64_t num_training_steps, int64_t num_warmup_steps);

/* --- the wrappers: the only way the core calls a scheduler ------------------------------------- */

const char *ct_scheduler_name(const ct_scheduler *s);
/* True for reduce_lr_on_plateau-like schedulers: the Trainer must evaluate to feed them. */
bool ct_scheduler_needs_metric(const ct_scheduler *s);
/* The rate of the next optimizer step (state.lr). */
double ct_scheduler_lr(const ct_scheduler *s);
/* The rate of optimizer step `step` without changing anything: base_lr * lambda(step), or the
 * current rate for a metric-driven scheduler. */
double ct_scheduler_lr_at(const ct_scheduler *s, int64_t step);
/* After an optimizer step: advances a step-driven scheduler; a no-op for a metric-driven one. */
void ct_scheduler_step(ct_scheduler *s);
/* After an evaluation: feeds the metric to a metric-driven scheduler; a no-op for the others.
 * Like torch, a NaN metric counts as "not better". */
ct_status ct_scheduler_step_metric(ct_scheduler *s, double metric);

ct_scheduler_state ct_scheduler_get_state(const ct_scheduler *s);
/* Restores a checkpoint's state. A step-driven scheduler recomputes lr from step; CT_ERR_INVALID_ARG
 * (nothing changed) for a negative step or counter, or a non-finite or negative lr. */
ct_status ct_scheduler_set_state(ct_scheduler *s, const ct_scheduler_state *st);
/* The state as a JSON object ({"step", "lr", "best", "num_bad_epochs", "cooldown_counter"}; infinite
 * values as the strings "inf" and "-inf", reals printed so they read back exactly), and back. */
json_t *ct_scheduler_state_to_json(const ct_scheduler_state *st);
ct_status ct_scheduler_state_from_json(const json_t *obj, const char *path, ct_scheduler_state *st);

/* NULL is a no-op. */
void ct_scheduler_destroy(ct_scheduler *s);

#endif
