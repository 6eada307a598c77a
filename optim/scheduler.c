/* Scheduler configuration (Hugging Face's lr_scheduler_type, warmup_steps, warmup_ratio and
 * lr_scheduler_kwargs), its validation, the constructor of the built-ins, the wrappers every caller
 * goes through, and checkpoint state. The formulas live in schedules.c.
 *
 * One table (kwarg_defs) declares every kwarg: its JSON name and type, where it lives in
 * ct_scheduler_kwargs and which schedulers take it. JSON parsing, the "takes no such setting" checks
 * of the C API and the error hints all read it, so a new kwarg is one line here plus its use. */
#include "optim/scheduler.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "core/util.h"
#include "core/vtable.h"
#include "optim/scheduler_impl.h"

const char *const ct_scheduler_names[] = {
    [CT_SCHED_LINEAR] = "linear",
    [CT_SCHED_COSINE] = "cosine",
    [CT_SCHED_COSINE_WITH_RESTARTS] = "cosine_with_restarts",
    [CT_SCHED_POLYNOMIAL] = "polynomial",
    [CT_SCHED_CONSTANT] = "constant",
    [CT_SCHED_CONSTANT_WITH_WARMUP] = "constant_with_warmup",
    [CT_SCHED_INVERSE_SQRT] = "inverse_sqrt",
    [CT_SCHED_REDUCE_LR_ON_PLATEAU] = "reduce_lr_on_plateau",
    [CT_SCHED_COSINE_WITH_MIN_LR] = "cosine_with_min_lr",
    [CT_SCHED_WARMUP_STABLE_DECAY] = "warmup_stable_decay",
    [CT_SCHED_COUNT] = NULL,
};

/* --- the kwarg table ---------------------------------------------------------------------------- */

typedef enum { K_REAL, K_INT, K_STR } kwarg_kind;

typedef struct kwarg_def {
    const char *name;
    kwarg_kind kind;
    size_t offset, cap; /* cap: size of a string field */
    unsigned types;     /* bit t set: scheduler type t takes it */
} kwarg_def;

#define T(x) (1u << CT_SCHED_##x)
#define KW(field, kind, types)                                                                     \
    { #field, kind, offsetof(ct_scheduler_kwargs, field), sizeof(((ct_scheduler_kwargs *)0)->field), types }

static const kwarg_def kwarg_defs[] = {
    KW(num_cycles, K_REAL, T(COSINE) | T(COSINE_WITH_RESTARTS) | T(COSINE_WITH_MIN_LR) | T(WARMUP_STABLE_DECAY)),
    KW(power, K_REAL, T(POLYNOMIAL)),
    KW(lr_end, K_REAL, T(POLYNOMIAL)),
    KW(timescale, K_INT, T(INVERSE_SQRT)),
    KW(min_lr, K_REAL, T(COSINE_WITH_MIN_LR) | T(REDUCE_LR_ON_PLATEAU)),
    KW(min_lr_rate, K_REAL, T(COSINE_WITH_MIN_LR)),
    KW(num_stable_steps, K_INT, T(WARMUP_STABLE_DECAY)),
    KW(num_decay_steps, K_INT, T(WARMUP_STABLE_DECAY)),
    KW(min_lr_ratio, K_REAL, T(WARMUP_STABLE_DECAY)),
    KW(warmup_type, K_STR, T(WARMUP_STABLE_DECAY)),
    KW(decay_type, K_STR, T(WARMUP_STABLE_DECAY)),
    KW(mode, K_STR, T(REDUCE_LR_ON_PLATEAU)),
    KW(factor, K_REAL, T(REDUCE_LR_ON_PLATEAU)),
    KW(patience, K_INT, T(REDUCE_LR_ON_PLATEAU)),
    KW(threshold, K_REAL, T(REDUCE_LR_ON_PLATEAU)),
    KW(threshold_mode, K_STR, T(REDUCE_LR_ON_PLATEAU)),
    KW(cooldown, K_INT, T(REDUCE_LR_ON_PLATEAU)),
    KW(eps, K_REAL, T(REDUCE_LR_ON_PLATEAU)),
};

static bool kwarg_is_set(const ct_scheduler_kwargs *kw, const kwarg_def *d) {
    const char *p = (const char *)kw + d->offset;
    switch (d->kind) {
    case K_REAL: return !isnan(*(const double *)p);
    case K_INT: return *(const int64_t *)p != CT_SCHED_UNSET_INT;
    case K_STR: return p[0] != '\0';
    }
    return false;
}

static const kwarg_def *kwarg_find(const char *name) {
    for (size_t i = 0; i < CT_ARRAY_LEN(kwarg_defs); i++)
        if (strcmp(kwarg_defs[i].name, name) == 0) return &kwarg_defs[i];
    return NULL;
}

/* The kwargs `type` takes, NULL-terminated, into names (capacity CT_ARRAY_LEN(kwarg_defs) + 1). */
static void kwargs_of(ct_sched_type type, const char **names) {
    int n = 0;
    for (size_t i = 0; i < CT_ARRAY_LEN(kwarg_defs); i++)
        if (kwarg_defs[i].types & (1u << type)) names[n++] = kwarg_defs[i].name;
    names[n] = NULL;
}

/* "num_cycles, power" or "none". */
static const char *list_str(const char *const *names, char *buf, size_t cap) {
    size_t len = 0;
    buf[0] = '\0';
    for (const char *const *w = names; *w && len < cap; w++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%s", w == names ? "" : ", ", *w);
    if (!names[0]) snprintf(buf, cap, "none");
    return buf;
}

/* --- errors naming the key ---------------------------------------------------------------------- */

/* "path.key: message", or "key: message" without a path. */
static ct_status bad(const char *path, const char *key, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static ct_status bad(const char *path, const char *key, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (path && path[0]) return ct_error(CT_ERR_CONFIG, "%s.%s: %s", path, key, msg);
    return ct_error(CT_ERR_CONFIG, "%s: %s", key, msg);
}

/* The type called name, or an error with a "did you mean". */
static ct_status find_type(const char *name, const char *path, ct_sched_type *out) {
    for (int t = 0; t < CT_SCHED_COUNT; t++)
        if (strcmp(ct_scheduler_names[t], name) == 0) {
            *out = (ct_sched_type)t;
            return CT_OK;
        }
    const char *hint = ct_closest_word(name, ct_scheduler_names);
    char known[400];
    if (hint) return bad(path, "lr_scheduler_type", "unknown scheduler '%s', did you mean '%s'?", name, hint);
    return bad(path, "lr_scheduler_type", "unknown scheduler '%s' (known: %s)", name,
               list_str(ct_scheduler_names, known, sizeof known));
}

/* A string kwarg that must be one of `allowed`. */
static ct_status pick(const char *value, const char *const *allowed, const char *path, const char *key, int *out) {
    for (int i = 0; allowed[i]; i++)
        if (strcmp(allowed[i], value) == 0) {
            *out = i;
            return CT_OK;
        }
    const char *hint = ct_closest_word(value, allowed);
    char known[100];
    if (hint) return bad(path, key, "unknown value '%s', did you mean '%s'?", value, hint);
    return bad(path, key, "unknown value '%s' (expected one of: %s)", value, list_str(allowed, known, sizeof known));
}

/* --- configuration ------------------------------------------------------------------------------ */

ct_scheduler_kwargs ct_scheduler_kwargs_unset(void) {
    ct_scheduler_kwargs kw;
    memset(&kw, 0, sizeof kw); /* strings "" */
    for (size_t i = 0; i < CT_ARRAY_LEN(kwarg_defs); i++) {
        char *p = (char *)&kw + kwarg_defs[i].offset;
        if (kwarg_defs[i].kind == K_REAL) *(double *)p = CT_SCHED_UNSET_REAL;
        if (kwarg_defs[i].kind == K_INT) *(int64_t *)p = CT_SCHED_UNSET_INT;
    }
    return kw;
}

ct_scheduler_config ct_scheduler_config_default(void) {
    ct_scheduler_config cfg = {.warmup_steps = 0, .warmup_ratio = 0.0, .kwargs = ct_scheduler_kwargs_unset()};
    snprintf(cfg.lr_scheduler_type, sizeof cfg.lr_scheduler_type, "linear");
    return cfg;
}

int64_t ct_scheduler_warmup_steps(int64_t num_training_steps, int64_t warmup_steps, double warmup_ratio) {
    if (warmup_steps > 0) return warmup_steps;
    return (int64_t)ceil((double)num_training_steps * warmup_ratio);
}

ct_status ct_scheduler_kwargs_from_json(const json_t *obj, const char *path, const char *type_name,
                                        ct_scheduler_kwargs *kw) {
    ct_sched_type type = CT_SCHED_LINEAR;
    CT_TRY(find_type(type_name, "", &type));
    if (!obj || json_is_null(obj)) return CT_OK;
    if (!json_is_object(obj)) return ct_error(CT_ERR_CONFIG, "%s: expected an object of scheduler settings", path);
    const char *takes[CT_ARRAY_LEN(kwarg_defs) + 1];
    kwargs_of(type, takes);
    char list[400];
    const char *key;
    json_t *value;
    json_object_foreach((json_t *)obj, key, value) {
        const kwarg_def *d = kwarg_find(key);
        if (!d || !(d->types & (1u << type))) {
            const char *hint = ct_closest_word(key, takes);
            if (hint && !d)
                return ct_error(CT_ERR_CONFIG, "%s: unknown key '%s', did you mean '%s'?", path, key, hint);
            return ct_error(CT_ERR_CONFIG, "%s: %s key '%s' for scheduler '%s' (it takes: %s)", path,
                            d ? "unexpected" : "unknown", key, type_name, list_str(takes, list, sizeof list));
        }
        if (json_is_null(value)) continue; /* Python's None: the default */
        char *field = (char *)kw + d->offset;
        if (d->kind == K_REAL) {
            CT_TRY(ct_json_real(obj, path, key, true, 0, (double *)field));
        } else if (d->kind == K_INT) {
            CT_TRY(ct_json_int(obj, path, key, true, 0, (int64_t *)field));
            if (*(int64_t *)field == CT_SCHED_UNSET_INT) return bad(path, key, "value out of range");
        } else {
            const char *s;
            CT_TRY(ct_json_string(obj, path, key, true, NULL, &s));
            if (strlen(s) == 0 || strlen(s) >= d->cap) return bad(path, key, "unknown value '%s'", s);
            snprintf(field, d->cap, "%s", s);
        }
    }
    return CT_OK;
}

ct_status ct_scheduler_config_from_json(const json_t *obj, const char *path, ct_scheduler_config *cfg) {
    *cfg = ct_scheduler_config_default();
    if (!json_is_object(obj)) return ct_error(CT_ERR_CONFIG, "%s: expected an object", path);
    const char *name;
    CT_TRY(ct_json_string(obj, path, "lr_scheduler_type", false, "linear", &name));
    ct_sched_type type = CT_SCHED_LINEAR;
    CT_TRY(find_type(name, path, &type));
    snprintf(cfg->lr_scheduler_type, sizeof cfg->lr_scheduler_type, "%s", name);
    CT_TRY(ct_json_int(obj, path, "warmup_steps", false, 0, &cfg->warmup_steps));
    CT_TRY(ct_json_real(obj, path, "warmup_ratio", false, 0.0, &cfg->warmup_ratio));
    char kpath[300];
    snprintf(kpath, sizeof kpath, "%s.lr_scheduler_kwargs", path);
    return ct_scheduler_kwargs_from_json(json_object_get(obj, "lr_scheduler_kwargs"), kpath, name, &cfg->kwargs);
}

/* --- validation and construction ---------------------------------------------------------------- */

/* Resolved kwargs default to these where unset. */
static double real_or(double v, double def) { return isnan(v) ? def : v; }
static int64_t int_or(int64_t v, int64_t def) { return v == CT_SCHED_UNSET_INT ? def : v; }

/* Builds the built-in described by cfg. `path` prefixes error keys ("" for the C API). Keys in
 * messages are the configuration's: warmup_ratio, lr_scheduler_kwargs.factor, ... */
static ct_status create(const ct_scheduler_config *cfg, double base_lr, int64_t total, const char *path,
                        ct_scheduler **out) {
    *out = NULL;
    ct_sched_type type = CT_SCHED_LINEAR;
    char name[sizeof cfg->lr_scheduler_type + 1];
    snprintf(name, sizeof name, "%s", cfg->lr_scheduler_type);
    CT_TRY(find_type(name, path, &type));
    const ct_scheduler_kwargs *kw = &cfg->kwargs;
    char kpath[300];
    snprintf(kpath, sizeof kpath, "%s%slr_scheduler_kwargs", path, path[0] ? "." : "");

    if (!isfinite(base_lr) || base_lr < 0)
        return bad(path, "learning_rate", "must be finite and >= 0 (got %g)", base_lr);
    if (total < 0) return bad(path, "num_training_steps", "must be >= 0 (got %lld)", (long long)total);
    if (cfg->warmup_steps < 0)
        return bad(path, "warmup_steps", "must be >= 0 (got %lld)", (long long)cfg->warmup_steps);
    if (!(cfg->warmup_ratio >= 0 && cfg->warmup_ratio <= 1))
        return bad(path, "warmup_ratio", "must lie in [0, 1] (got %g)", cfg->warmup_ratio);
    if (cfg->warmup_steps == 0 && cfg->warmup_ratio > 0 && total == 0)
        return bad(path, "warmup_ratio", "needs the number of training steps, which is unknown here");

    /* Kwargs the scheduler does not take. */
    const char *takes[CT_ARRAY_LEN(kwarg_defs) + 1];
    kwargs_of(type, takes);
    char list[400];
    for (size_t i = 0; i < CT_ARRAY_LEN(kwarg_defs); i++) {
        const kwarg_def *d = &kwarg_defs[i];
        if (kwarg_is_set(kw, d) && !(d->types & (1u << type)))
            return bad(kpath, d->name, "scheduler '%s' takes no such setting (it takes: %s)", name,
                       list_str(takes, list, sizeof list));
    }

    ct_builtin_scheduler *b = calloc(1, sizeof *b);
    if (!b) return ct_error(CT_ERR_NOMEM, "scheduler '%s': out of memory", name);
    b->type = type;
    int64_t warmup = ct_scheduler_warmup_steps(total, cfg->warmup_steps, cfg->warmup_ratio);
    ct_status s = CT_OK;
#define FAIL(...)                                                                                  \
    do {                                                                                           \
        s = bad(__VA_ARGS__);                                                                      \
        goto done;                                                                                 \
    } while (0)

    bool needs_total = type == CT_SCHED_LINEAR || type == CT_SCHED_COSINE || type == CT_SCHED_COSINE_WITH_RESTARTS ||
                       type == CT_SCHED_POLYNOMIAL || type == CT_SCHED_COSINE_WITH_MIN_LR ||
                       (type == CT_SCHED_WARMUP_STABLE_DECAY && !kwarg_is_set(kw, kwarg_find("num_stable_steps")));
    if (needs_total && total == 0)
        FAIL(path, "num_training_steps", "scheduler '%s' needs the number of training steps, which is unknown here",
             name);

    b->num_cycles = real_or(kw->num_cycles, type == CT_SCHED_COSINE_WITH_RESTARTS ? 1.0 : 0.5);
    if (!(isfinite(b->num_cycles) && b->num_cycles > 0))
        FAIL(kpath, "num_cycles", "must be finite and > 0 (got %g)", b->num_cycles);

    switch (type) {
    case CT_SCHED_POLYNOMIAL:
        b->power = real_or(kw->power, 1.0);
        b->lr_end = real_or(kw->lr_end, 1e-7);
        if (!(isfinite(b->power) && b->power >= 0)) FAIL(kpath, "power", "must be finite and >= 0 (got %g)", b->power);
        if (!(isfinite(b->lr_end) && b->lr_end >= 0))
            FAIL(kpath, "lr_end", "must be finite and >= 0 (got %g)", b->lr_end);
        if (!(base_lr > b->lr_end))
            FAIL(kpath, "lr_end", "(%g) must be smaller than the initial learning rate (%g)", b->lr_end, base_lr);
        break;
    case CT_SCHED_INVERSE_SQRT:
        b->timescale = int_or(kw->timescale, warmup ? warmup : 10000);
        if (b->timescale < 1) FAIL(kpath, "timescale", "must be >= 1 (got %lld)", (long long)b->timescale);
        break;
    case CT_SCHED_COSINE_WITH_MIN_LR: {
        bool has_lr = !isnan(kw->min_lr), has_rate = !isnan(kw->min_lr_rate);
        if (has_lr && has_rate) FAIL(kpath, "min_lr", "give only one of min_lr and min_lr_rate");
        if (!has_lr && !has_rate) FAIL(kpath, "min_lr", "scheduler '%s' needs min_lr or min_lr_rate", name);
        if (has_lr) {
            if (!(isfinite(kw->min_lr) && kw->min_lr >= 0 && kw->min_lr <= base_lr && base_lr > 0))
                FAIL(kpath, "min_lr", "must lie in [0, learning_rate = %g] with learning_rate > 0 (got %g)", base_lr,
                     kw->min_lr);
            b->min_lr_rate = kw->min_lr / base_lr;
        } else {
            if (!(kw->min_lr_rate >= 0 && kw->min_lr_rate <= 1))
                FAIL(kpath, "min_lr_rate", "must lie in [0, 1] (got %g)", kw->min_lr_rate);
            b->min_lr_rate = kw->min_lr_rate;
        }
        break;
    }
    case CT_SCHED_WARMUP_STABLE_DECAY: {
        if (!kwarg_is_set(kw, kwarg_find("num_decay_steps")))
            FAIL(kpath, "num_decay_steps", "scheduler '%s' needs num_decay_steps", name);
        b->num_decay_steps = kw->num_decay_steps;
        if (b->num_decay_steps < 0)
            FAIL(kpath, "num_decay_steps", "must be >= 0 (got %lld)", (long long)b->num_decay_steps);
        if (kwarg_is_set(kw, kwarg_find("num_stable_steps"))) {
            b->num_stable_steps = kw->num_stable_steps;
            if (b->num_stable_steps < 0)
                FAIL(kpath, "num_stable_steps", "must be >= 0 (got %lld)", (long long)b->num_stable_steps);
        } else {
            b->num_stable_steps = total - warmup - b->num_decay_steps;
            if (b->num_stable_steps < 0)
                FAIL(kpath, "num_decay_steps",
                     "warmup (%lld steps) and decay (%lld steps) do not fit in the %lld training steps",
                     (long long)warmup, (long long)b->num_decay_steps, (long long)total);
        }
        b->min_lr_ratio = real_or(kw->min_lr_ratio, 0.0);
        if (!(b->min_lr_ratio >= 0 && b->min_lr_ratio <= 1))
            FAIL(kpath, "min_lr_ratio", "must lie in [0, 1] (got %g)", b->min_lr_ratio);
        static const char *const shapes[] = {"linear", "cosine", "1-sqrt", NULL};
        int w = CT_SHAPE_LINEAR, d = CT_SHAPE_COSINE;
        if (kw->warmup_type[0] && (s = pick(kw->warmup_type, shapes, kpath, "warmup_type", &w)) != CT_OK) goto done;
        if (kw->decay_type[0] && (s = pick(kw->decay_type, shapes, kpath, "decay_type", &d)) != CT_OK) goto done;
        b->warmup_shape = (ct_sched_shape)w;
        b->decay_shape = (ct_sched_shape)d;
        break;
    }
    case CT_SCHED_REDUCE_LR_ON_PLATEAU: {
        static const char *const modes[] = {"min", "max", NULL}, *const tmodes[] = {"rel", "abs", NULL};
        int m = 0, tm = 0;
        if (kw->mode[0] && (s = pick(kw->mode, modes, kpath, "mode", &m)) != CT_OK) goto done;
        if (kw->threshold_mode[0] && (s = pick(kw->threshold_mode, tmodes, kpath, "threshold_mode", &tm)) != CT_OK)
            goto done;
        b->mode_max = m == 1;
        b->threshold_abs = tm == 1;
        b->factor = real_or(kw->factor, 0.1);
        b->patience = int_or(kw->patience, 10);
        b->threshold = real_or(kw->threshold, 1e-4);
        b->cooldown = int_or(kw->cooldown, 0);
        b->min_lr = real_or(kw->min_lr, 0.0);
        b->eps = real_or(kw->eps, 1e-8);
        if (!(b->factor >= 0 && b->factor < 1)) FAIL(kpath, "factor", "must lie in [0, 1) (got %g)", b->factor);
        if (b->patience < 0) FAIL(kpath, "patience", "must be >= 0 (got %lld)", (long long)b->patience);
        if (!(isfinite(b->threshold) && b->threshold >= 0))
            FAIL(kpath, "threshold", "must be finite and >= 0 (got %g)", b->threshold);
        if (b->cooldown < 0) FAIL(kpath, "cooldown", "must be >= 0 (got %lld)", (long long)b->cooldown);
        if (!(isfinite(b->min_lr) && b->min_lr >= 0))
            FAIL(kpath, "min_lr", "must be finite and >= 0 (got %g)", b->min_lr);
        if (!(isfinite(b->eps) && b->eps >= 0)) FAIL(kpath, "eps", "must be finite and >= 0 (got %g)", b->eps);
        break;
    }
    default: break;
    }
#undef FAIL
    CT_ASSERT(ct_scheduler_base_init(&b->base, ct_sched_builtin_ops(type), base_lr, total, warmup) == CT_OK);
done:
    if (s != CT_OK) {
        free(b);
        return s;
    }
    *out = &b->base;
    return CT_OK;
}

ct_status ct_scheduler_create(const ct_scheduler_config *cfg, double base_lr, int64_t num_training_steps,
                              ct_scheduler **out) {
    return create(cfg, base_lr, num_training_steps, "", out);
}

ct_status ct_scheduler_config_check(const ct_scheduler_config *cfg, const char *path, double base_lr,
                                    int64_t num_training_steps) {
    /* An unknown length stands in as one too long for any warmup or decay to overflow it. */
    const int64_t unknown = INT64_C(1) << 40;
    ct_scheduler *s = NULL;
    CT_TRY(create(cfg, base_lr, num_training_steps > 0 ? num_training_steps : unknown, path ? path : "", &s));
    ct_scheduler_destroy(s);
    return CT_OK;
}

ct_status ct_scheduler_from_json(const json_t *obj, const char *path, double base_lr, int64_t num_training_steps,
                                 ct_scheduler **out) {
    *out = NULL;
    ct_scheduler_config cfg;
    CT_TRY(ct_scheduler_config_from_json(obj, path, &cfg));
    return create(&cfg, base_lr, num_training_steps, path, out);
}

/* --- the base and the wrappers ------------------------------------------------------------------ */

ct_status ct_scheduler_base_init(ct_scheduler *s, const ct_scheduler_ops *ops, double base_lr,
                                 int64_t num_training_steps, int64_t num_warmup_steps) {
    CT_ASSERT(s);
    s->ops = ops;
    CT_TRY(CT_OPS_CHECK_SIZE(ct_scheduler_ops, ops, name));
    CT_TRY(CT_OPS_CHECK_MEMBER(ct_scheduler_ops, ops, name, "names the scheduler in errors and checkpoints"));
    s->base_lr = base_lr;
    s->num_training_steps = num_training_steps;
    s->num_warmup_steps = num_warmup_steps;
    s->state = (ct_scheduler_state){.step = 0};
    if (CT_OPS_HAS(ops, ct_scheduler_ops, lr_lambda)) {
        s->state.lr = base_lr * ops->lr_lambda(s, 0);
    } else {
        s->state.lr = base_lr;
        /* ReduceLROnPlateau's mode_worse; the built-ins are the only metric-driven ones that
         * know their mode, a custom one sets best itself. */
        s->state.best = INFINITY;
        if (ops == ct_sched_builtin_ops(CT_SCHED_REDUCE_LR_ON_PLATEAU) &&
            ct_container_of(s, ct_builtin_scheduler, base)->mode_max)
            s->state.best = -INFINITY;
    }
    return CT_OK;
}

/* Members past the end of an older, shorter table read as NULL. */
#define OP(s, member) ((s)->ops->size > offsetof(ct_scheduler_ops, member) ? (s)->ops->member : NULL)

const char *ct_scheduler_name(const ct_scheduler *s) { return s->ops->name; }

bool ct_scheduler_needs_metric(const ct_scheduler *s) { return OP(s, lr_lambda) == NULL; }

double ct_scheduler_lr(const ct_scheduler *s) { return s->state.lr; }

double ct_scheduler_lr_at(const ct_scheduler *s, int64_t step) {
    CT_ASSERT(step >= 0);
    double (*lambda)(const ct_scheduler *, int64_t) = OP(s, lr_lambda);
    return lambda ? s->base_lr * lambda(s, step) : s->state.lr;
}

void ct_scheduler_step(ct_scheduler *s) {
    double (*lambda)(const ct_scheduler *, int64_t) = OP(s, lr_lambda);
    if (!lambda) return;
    s->state.step++;
    s->state.lr = s->base_lr * lambda(s, s->state.step);
}

ct_status ct_scheduler_step_metric(ct_scheduler *s, double metric) {
    ct_status (*on_metric)(ct_scheduler *, double) = OP(s, on_metric);
    if (!on_metric) return CT_OK;
    ct_status st = on_metric(s, metric);
    if (st != CT_OK) return ct_error_prefix(st, "scheduler '%s': ", s->ops->name);
    return CT_OK;
}

ct_scheduler_state ct_scheduler_get_state(const ct_scheduler *s) { return s->state; }

ct_status ct_scheduler_set_state(ct_scheduler *s, const ct_scheduler_state *st) {
    const char *who = s->ops->name;
    if (st->step < 0 || st->num_bad_epochs < 0 || st->cooldown_counter < 0)
        return ct_error(CT_ERR_INVALID_ARG,
                        "scheduler '%s': bad state (step %lld, num_bad_epochs %lld, cooldown_counter %lld)", who,
                        (long long)st->step, (long long)st->num_bad_epochs, (long long)st->cooldown_counter);
    double (*lambda)(const ct_scheduler *, int64_t) = OP(s, lr_lambda);
    if (lambda) {
        s->state = (ct_scheduler_state){.step = st->step, .lr = s->base_lr * lambda(s, st->step)};
        return CT_OK;
    }
    if (!isfinite(st->lr) || st->lr < 0)
        return ct_error(CT_ERR_INVALID_ARG, "scheduler '%s': bad state: lr %g", who, st->lr);
    if (isnan(st->best)) return ct_error(CT_ERR_INVALID_ARG, "scheduler '%s': bad state: best is NaN", who);
    s->state = *st;
    return CT_OK;
}

static json_t *real_json(double v) {
    if (isinf(v)) return json_string(v > 0 ? "inf" : "-inf");
    return json_real(v);
}

json_t *ct_scheduler_state_to_json(const ct_scheduler_state *st) {
    return json_pack("{sIsososIsI}", "step", (json_int_t)st->step, "lr", real_json(st->lr), "best", real_json(st->best),
                     "num_bad_epochs", (json_int_t)st->num_bad_epochs, "cooldown_counter",
                     (json_int_t)st->cooldown_counter);
}

static ct_status real_from_json(const json_t *obj, const char *path, const char *key, double *out) {
    const char *s = json_string_value(json_object_get(obj, key));
    if (s && (strcmp(s, "inf") == 0 || strcmp(s, "-inf") == 0)) {
        *out = s[0] == '-' ? -INFINITY : INFINITY;
        return CT_OK;
    }
    return ct_json_real(obj, path, key, true, 0, out);
}

ct_status ct_scheduler_state_from_json(const json_t *obj, const char *path, ct_scheduler_state *st) {
    if (!json_is_object(obj)) return ct_error(CT_ERR_CONFIG, "%s: expected an object", path);
    static const char *const keys[] = {"step", "lr", "best", "num_bad_epochs", "cooldown_counter", NULL};
    CT_TRY(ct_json_check_keys(obj, path, keys));
    ct_scheduler_state s;
    CT_TRY(ct_json_int(obj, path, "step", true, 0, &s.step));
    CT_TRY(real_from_json(obj, path, "lr", &s.lr));
    CT_TRY(real_from_json(obj, path, "best", &s.best));
    CT_TRY(ct_json_int(obj, path, "num_bad_epochs", true, 0, &s.num_bad_epochs));
    CT_TRY(ct_json_int(obj, path, "cooldown_counter", true, 0, &s.cooldown_counter));
    *st = s;
    return CT_OK;
}

void ct_scheduler_destroy(ct_scheduler *s) {
    if (!s) return;
    void (*destroy)(ct_scheduler *) = OP(s, destroy);
    if (destroy)
        destroy(s);
    else
        free(s);
}
