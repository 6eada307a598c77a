/* The formulas of the built-in schedulers: Hugging Face's lr lambdas (transformers.optimization)
 * and torch's ReduceLROnPlateau step.
 *
 * Each lambda repeats its Python original operation for operation, in the same order and in
 * double precision, so that base_lr * lambda(step) matches LambdaLR to the last bit or two (the
 * oracle test demands 1e-9 relative at every step). Python's int / int is a correctly rounded true
 * division, which (double)a / (double)b also is for the step counts involved (< 2^53), and its
 * float % is floored, unlike fmod, hence py_mod. */
#include <math.h>

#include "core/util.h"
#include "optim/scheduler_impl.h"

static const ct_builtin_scheduler *builtin(const ct_scheduler *s) {
    return ct_container_of(s, const ct_builtin_scheduler, base);
}

/* Python's float %: the result takes the sign of the divisor. */
static double py_mod(double x, double m) {
    double r = fmod(x, m);
    if (r != 0.0) {
        if ((m < 0) != (r < 0)) r += m;
    } else {
        r = copysign(0.0, m);
    }
    return r;
}

/* Python's max(a, b) for floats: a unless b is strictly greater. */
static double py_max(double a, double b) { return b > a ? b : a; }

/* The linear warmup every schedule but warmup_stable_decay shares. */
static double warmup(int64_t step, int64_t w) { return (double)step / (double)CT_MAX(1, w); }

static double constant_lambda(const ct_scheduler *s, int64_t step) {
    (void)s;
    (void)step;
    return 1.0;
}

static double constant_with_warmup_lambda(const ct_scheduler *s, int64_t step) {
    int64_t w = s->num_warmup_steps;
    if (step < w) return warmup(step, w);
    return 1.0;
}

static double linear_lambda(const ct_scheduler *s, int64_t step) {
    int64_t w = s->num_warmup_steps, t = s->num_training_steps;
    if (step < w) return warmup(step, w);
    return py_max(0.0, (double)(t - step) / (double)CT_MAX(1, t - w));
}

/* cosine and cosine_with_min_lr (min_lr_rate 0 for cosine): Hugging Face runs both through the
 * same lambda. */
static double cosine_lambda(const ct_scheduler *s, int64_t step) {
    const ct_builtin_scheduler *b = builtin(s);
    int64_t w = s->num_warmup_steps, t = s->num_training_steps;
    if (step < w) return warmup(step, w);
    double progress = (double)(step - w) / (double)CT_MAX(1, t - w);
    double factor = 0.5 * (1.0 + cos(M_PI * b->num_cycles * 2.0 * progress));
    factor = factor * (1 - b->min_lr_rate) + b->min_lr_rate;
    return py_max(0, factor);
}

static double cosine_with_restarts_lambda(const ct_scheduler *s, int64_t step) {
    const ct_builtin_scheduler *b = builtin(s);
    int64_t w = s->num_warmup_steps, t = s->num_training_steps;
    if (step < w) return warmup(step, w);
    double progress = (double)(step - w) / (double)CT_MAX(1, t - w);
    if (progress >= 1.0) return 0.0;
    return py_max(0.0, 0.5 * (1.0 + cos(M_PI * py_mod(b->num_cycles * progress, 1.0))));
}

static double polynomial_lambda(const ct_scheduler *s, int64_t step) {
    const ct_builtin_scheduler *b = builtin(s);
    int64_t w = s->num_warmup_steps, t = s->num_training_steps;
    double lr_init = s->base_lr;
    if (step < w) return warmup(step, w);
    /* Hugging Face divides by zero at step == t == w; the limit is lr_end. */
    if (step > t || t == w) return b->lr_end / lr_init;
    double lr_range = lr_init - b->lr_end;
    int64_t decay_steps = t - w;
    double pct_remaining = 1 - (double)(step - w) / (double)decay_steps;
    double decay = lr_range * pow(pct_remaining, b->power) + b->lr_end;
    return decay / lr_init;
}

static double inverse_sqrt_lambda(const ct_scheduler *s, int64_t step) {
    const ct_builtin_scheduler *b = builtin(s);
    int64_t w = s->num_warmup_steps;
    if (step < w) return warmup(step, w);
    int64_t shift = b->timescale - w;
    return 1.0 / sqrt((double)(step + shift) / (double)b->timescale);
}

static double wsd_shape(ct_sched_shape shape, double progress, double num_cycles, bool rising) {
    switch (shape) {
    case CT_SHAPE_LINEAR: return rising ? progress : 1.0 - progress;
    case CT_SHAPE_COSINE:
        return rising ? 0.5 * (1.0 - cos(M_PI * progress)) : 0.5 * (1.0 + cos(M_PI * num_cycles * 2.0 * progress));
    case CT_SHAPE_1_SQRT: return rising ? 1.0 - sqrt(1.0 - progress) : 1.0 - sqrt(progress);
    }
    CT_ASSERT(!"unknown warmup_stable_decay shape");
    return 0.0;
}

static double wsd_lambda(const ct_scheduler *s, int64_t step) {
    const ct_builtin_scheduler *b = builtin(s);
    int64_t w = s->num_warmup_steps, stable = b->num_stable_steps, decay = b->num_decay_steps;
    double r = b->min_lr_ratio;
    if (step < w) {
        double progress = (double)step / (double)CT_MAX(1, w);
        double factor = wsd_shape(b->warmup_shape, progress, b->num_cycles, true);
        factor = factor * (1.0 - r) + r;
        return py_max(0.0, factor);
    }
    if (step < w + stable) return 1.0;
    if (step < w + stable + decay) {
        double progress = (double)(step - w - stable) / (double)CT_MAX(1, decay);
        double factor = wsd_shape(b->decay_shape, progress, b->num_cycles, false);
        factor = factor * (1.0 - r) + r;
        return py_max(0.0, factor);
    }
    return r;
}

/* torch.optim.lr_scheduler.ReduceLROnPlateau.step(metrics), for one parameter group. The
 * comparisons are false for a NaN metric, which therefore counts as a bad epoch, as in torch. */
static ct_status plateau_on_metric(ct_scheduler *s, double current) {
    const ct_builtin_scheduler *b = builtin(s);
    ct_scheduler_state *st = &s->state;
    st->step++;
    bool better;
    if (!b->mode_max)
        better = b->threshold_abs ? current < st->best - b->threshold : current < st->best * (1. - b->threshold);
    else
        better = b->threshold_abs ? current > st->best + b->threshold : current > st->best * (b->threshold + 1.);
    if (better) {
        st->best = current;
        st->num_bad_epochs = 0;
    } else {
        st->num_bad_epochs++;
    }
    if (st->cooldown_counter > 0) {
        st->cooldown_counter--;
        st->num_bad_epochs = 0; /* bad epochs during cooldown do not count */
    }
    if (st->num_bad_epochs > b->patience) {
        double old_lr = st->lr;
        double new_lr = py_max(old_lr * b->factor, b->min_lr);
        if (old_lr - new_lr > b->eps) st->lr = new_lr;
        st->cooldown_counter = b->cooldown;
        st->num_bad_epochs = 0;
    }
    return CT_OK;
}

#define OPS(type_name, lambda, metric)                                                             \
    { .size = sizeof(ct_scheduler_ops), .name = type_name, .lr_lambda = lambda, .on_metric = metric }

static const ct_scheduler_ops builtin_ops[CT_SCHED_COUNT] = {
    [CT_SCHED_LINEAR] = OPS("linear", linear_lambda, NULL),
    [CT_SCHED_COSINE] = OPS("cosine", cosine_lambda, NULL),
    [CT_SCHED_COSINE_WITH_RESTARTS] = OPS("cosine_with_restarts", cosine_with_restarts_lambda, NULL),
    [CT_SCHED_POLYNOMIAL] = OPS("polynomial", polynomial_lambda, NULL),
    [CT_SCHED_CONSTANT] = OPS("constant", constant_lambda, NULL),
    [CT_SCHED_CONSTANT_WITH_WARMUP] = OPS("constant_with_warmup", constant_with_warmup_lambda, NULL),
    [CT_SCHED_INVERSE_SQRT] = OPS("inverse_sqrt", inverse_sqrt_lambda, NULL),
    [CT_SCHED_REDUCE_LR_ON_PLATEAU] = OPS("reduce_lr_on_plateau", NULL, plateau_on_metric),
    [CT_SCHED_COSINE_WITH_MIN_LR] = OPS("cosine_with_min_lr", cosine_lambda, NULL),
    [CT_SCHED_WARMUP_STABLE_DECAY] = OPS("warmup_stable_decay", wsd_lambda, NULL),
};

const ct_scheduler_ops *ct_sched_builtin_ops(ct_sched_type type) {
    CT_ASSERT(type >= 0 && type < CT_SCHED_COUNT);
    return &builtin_ops[type];
}
