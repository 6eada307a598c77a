/* Private to optim/scheduler*.c: the built-in scheduler struct shared by the configuration code
 * (scheduler.c) and the formulas (schedules.c). */
#ifndef CT_SCHEDULER_IMPL_H
#define CT_SCHEDULER_IMPL_H

#include "optim/scheduler.h"

/* In the order of ct_scheduler_names. */
typedef enum ct_sched_type {
    CT_SCHED_LINEAR,
    CT_SCHED_COSINE,
    CT_SCHED_COSINE_WITH_RESTARTS,
    CT_SCHED_POLYNOMIAL,
    CT_SCHED_CONSTANT,
    CT_SCHED_CONSTANT_WITH_WARMUP,
    CT_SCHED_INVERSE_SQRT,
    CT_SCHED_REDUCE_LR_ON_PLATEAU,
    CT_SCHED_COSINE_WITH_MIN_LR,
    CT_SCHED_WARMUP_STABLE_DECAY,
    CT_SCHED_COUNT
} ct_sched_type;

/* warmup_type / decay_type of warmup_stable_decay. */
typedef enum ct_sched_shape { CT_SHAPE_LINEAR, CT_SHAPE_COSINE, CT_SHAPE_1_SQRT } ct_sched_shape;

/* Every built-in is this struct, with the settings its formula reads resolved to values. */
typedef struct ct_builtin_scheduler {
    ct_scheduler base;
    ct_sched_type type;
    double num_cycles;
    double power, lr_end;        /* polynomial */
    int64_t timescale;           /* inverse_sqrt */
    double min_lr_rate;          /* cosine_with_min_lr */
    int64_t num_stable_steps, num_decay_steps;
    double min_lr_ratio;
    ct_sched_shape warmup_shape, decay_shape;
    /* reduce_lr_on_plateau */
    bool mode_max, threshold_abs;
    double factor, threshold, min_lr, eps;
    int64_t patience, cooldown;
} ct_builtin_scheduler;

/* The ops table of a built-in type. */
const ct_scheduler_ops *ct_sched_builtin_ops(ct_sched_type type);

#endif
