/* The optimizer base: configuration (JSON, defaults, torch-like validation), parameter groups built
 * from the flat parameter store, named state, the wrappers through which the core calls every
 * optimizer hook, and the exported defaults (see optimizer.h). */
#include "optim/optimizer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "core/ops/ops.h"
#include "core/vtable.h"

/* --- configuration ------------------------------------------------------------------------------ */

static const char *const optim_names[] = {"sgd", "adam", "adamw", "adamw_torch", NULL};
static const ct_optim_kind optim_kinds[] = {CT_OPTIM_SGD, CT_OPTIM_ADAM, CT_OPTIM_ADAMW, CT_OPTIM_ADAMW};

const char *ct_optim_kind_name(ct_optim_kind k) {
    switch (k) {
    case CT_OPTIM_SGD: return "sgd";
    case CT_OPTIM_ADAM: return "adam";
    case CT_OPTIM_ADAMW: return "adamw";
    }
    return "?";
}

ct_optim_config ct_optim_config_default(void) {
    return (ct_optim_config){.optim = CT_OPTIM_ADAMW,
                             .learning_rate = 5e-5,
                             .weight_decay = 0.0,
                             .adam_beta1 = 0.9,
                             .adam_beta2 = 0.999,
                             .adam_epsilon = 1e-8,
                             .amsgrad = false,
                             .momentum = 0.0,
                             .dampening = 0.0,
                             .nesterov = false};
}

ct_status ct_optim_config_from_json(const json_t *obj, const char *path, ct_optim_config *cfg) {
    *cfg = ct_optim_config_default();
    if (!json_is_object(obj)) return ct_error(CT_ERR_CONFIG, "%s: expected an object", path);
    const char *name;
    CT_TRY(ct_json_string(obj, path, "optim", false, "adamw", &name));
    bool found = false;
    for (int i = 0; optim_names[i]; i++)
        if (strcmp(optim_names[i], name) == 0) {
            cfg->optim = optim_kinds[i];
            found = true;
        }
    if (!found) {
        const char *hint = ct_closest_word(name, optim_names);
        if (hint)
            return ct_error(CT_ERR_CONFIG, "%s.optim: unknown optimizer '%s', did you mean '%s'?", path, name, hint);
        return ct_error(CT_ERR_CONFIG, "%s.optim: unknown optimizer '%s' (sgd, adam or adamw)", path, name);
    }
    CT_TRY(ct_json_real(obj, path, "learning_rate", false, cfg->learning_rate, &cfg->learning_rate));
    CT_TRY(ct_json_real(obj, path, "weight_decay", false, cfg->weight_decay, &cfg->weight_decay));
    CT_TRY(ct_json_real(obj, path, "adam_beta1", false, cfg->adam_beta1, &cfg->adam_beta1));
    CT_TRY(ct_json_real(obj, path, "adam_beta2", false, cfg->adam_beta2, &cfg->adam_beta2));
    CT_TRY(ct_json_real(obj, path, "adam_epsilon", false, cfg->adam_epsilon, &cfg->adam_epsilon));
    CT_TRY(ct_json_bool(obj, path, "amsgrad", false, cfg->amsgrad, &cfg->amsgrad));
    CT_TRY(ct_json_real(obj, path, "momentum", false, cfg->momentum, &cfg->momentum));
    CT_TRY(ct_json_real(obj, path, "dampening", false, cfg->dampening, &cfg->dampening));
    CT_TRY(ct_json_bool(obj, path, "nesterov", false, cfg->nesterov, &cfg->nesterov));
    ct_status s = ct_optim_config_validate(cfg);
    if (s != CT_OK) return ct_error_prefix(s, "%s: ", path);
    return CT_OK;
}

static ct_status bad(const ct_optim_config *cfg, const char *key, double v, const char *want) {
    return ct_error(CT_ERR_CONFIG, "optimizer '%s': invalid %s = %g (%s)", ct_optim_kind_name(cfg->optim), key, v,
                    want);
}

/* Conditions are written as !(ok) so that NaN, which fails every comparison, is rejected too. */
ct_status ct_optim_config_validate(const ct_optim_config *cfg) {
    if (cfg->optim != CT_OPTIM_SGD && cfg->optim != CT_OPTIM_ADAM && cfg->optim != CT_OPTIM_ADAMW)
        return ct_error(CT_ERR_CONFIG, "optimizer: invalid optim %d", (int)cfg->optim);
    if (!(cfg->learning_rate >= 0 && isfinite(cfg->learning_rate)))
        return bad(cfg, "learning_rate", cfg->learning_rate, "must be finite and >= 0");
    if (!(cfg->weight_decay >= 0 && isfinite(cfg->weight_decay)))
        return bad(cfg, "weight_decay", cfg->weight_decay, "must be finite and >= 0");
    if (cfg->optim == CT_OPTIM_SGD) {
        if (!(cfg->momentum >= 0 && isfinite(cfg->momentum)))
            return bad(cfg, "momentum", cfg->momentum, "must be finite and >= 0");
        if (!(cfg->dampening >= 0 && cfg->dampening <= 1))
            return bad(cfg, "dampening", cfg->dampening, "must be in [0, 1]");
        if (cfg->nesterov && (cfg->momentum <= 0 || cfg->dampening != 0))
            return ct_error(CT_ERR_CONFIG,
                            "optimizer 'sgd': nesterov = true requires momentum > 0 and dampening = 0 (got "
                            "momentum = %g, dampening = %g)",
                            cfg->momentum, cfg->dampening);
        return CT_OK;
    }
    if (!(cfg->adam_beta1 >= 0 && cfg->adam_beta1 < 1))
        return bad(cfg, "adam_beta1", cfg->adam_beta1, "must be in [0, 1)");
    if (!(cfg->adam_beta2 >= 0 && cfg->adam_beta2 < 1))
        return bad(cfg, "adam_beta2", cfg->adam_beta2, "must be in [0, 1)");
    if (!(cfg->adam_epsilon >= 0 && isfinite(cfg->adam_epsilon)))
        return bad(cfg, "adam_epsilon", cfg->adam_epsilon, "must be finite and >= 0");
    return CT_OK;
}

ct_status ct_optimizer_create(const ct_optim_config *cfg, ct_param_store *ps, ct_optimizer **out) {
    *out = NULL;
    CT_TRY(ct_optim_config_validate(cfg));
    if (cfg->optim == CT_OPTIM_SGD) return ct_sgd_create(cfg, ps, out);
    return ct_adam_create(cfg, ps, out);
}

ct_status ct_optimizer_from_json(const json_t *obj, const char *path, ct_param_store *ps, ct_optimizer **out) {
    *out = NULL;
    ct_optim_config cfg;
    CT_TRY(ct_optim_config_from_json(obj, path, &cfg));
    return ct_optimizer_create(&cfg, ps, out);
}

/* --- base: groups and state ------------------------------------------------------------------- */

/* Appends [offset, offset + count) to g, merging it into the previous range when they touch (no
 * padding between the two parameters). ranges has room for every parameter. */
static void group_append(ct_param_group *g, int64_t offset, int64_t count) {
    g->numel += count;
    if (g->n_ranges > 0) {
        ct_optim_range *last = &g->ranges[g->n_ranges - 1];
        if (last->offset + last->count == offset) {
            last->count += count;
            return;
        }
    }
    g->ranges[g->n_ranges++] = (ct_optim_range){offset, count};
}

static void free_base(ct_optimizer *opt) {
    for (int i = 0; i < opt->n_groups; i++) free(opt->groups[i].ranges);
    for (int i = 0; i < opt->n_state; i++) ct_tensor_free(&opt->state[i].tensor);
    ct_tensor_free(&opt->scratch);
    opt->n_groups = opt->n_state = 0;
}

ct_status ct_optimizer_base_init(ct_optimizer *opt, const ct_optimizer_ops *ops, const ct_optim_config *cfg,
                                 ct_param_store *ps) {
    CT_ASSERT(opt && cfg && ps);
    memset(opt, 0, sizeof *opt);
    CT_TRY(CT_OPS_CHECK_SIZE(ct_optimizer_ops, ops, name));
    CT_TRY(CT_OPS_CHECK_MEMBER(ct_optimizer_ops, ops, name, "names the optimizer in errors and checkpoints"));
    if (!CT_OPS_HAS(ops, ct_optimizer_ops, step) && !CT_OPS_HAS(ops, ct_optimizer_ops, update))
        return ct_error(CT_ERR_INVALID_ARG, "ct_optimizer_ops.step and .update are both NULL: one is required (the "
                        "default step calls update per range); set .update");
    opt->ops = ops;
    opt->config = *cfg;
    if (!ps->finalized)
        return ct_error(CT_ERR_STATE, "optimizer '%s': the parameter store is not finalized (build the model first)",
                        ops->name);
    if (ps->dtype != CT_F32 && ps->dtype != CT_F64)
        return ct_error(CT_ERR_DTYPE, "optimizer '%s': parameters are %s; f32 or f64 expected", ops->name,
                        ct_dtype_name(ps->dtype));
    opt->params = ps->values;
    opt->grads = ps->grads;
    opt->shard_offset = 0;
    opt->full_numel = ct_tensor_numel(&ps->values);
    opt->n_groups = 2;
    opt->groups[0] = (ct_param_group){.name = "decay", .weight_decay = cfg->weight_decay};
    opt->groups[1] = (ct_param_group){.name = "no_decay", .weight_decay = 0.0};
    for (int g = 0; g < 2; g++) {
        opt->groups[g].ranges = malloc((size_t)(ps->count > 0 ? ps->count : 1) * sizeof(ct_optim_range));
        if (!opt->groups[g].ranges) {
            free_base(opt);
            return ct_error(CT_ERR_NOMEM, "optimizer '%s': out of memory", ops->name);
        }
    }
    for (int i = 0; i < ps->count; i++) {
        const ct_param *p = &ps->items[i];
        if ((p->flags & CT_PARAM_BUFFER) || p->numel == 0) continue;
        group_append(&opt->groups[(p->flags & CT_PARAM_NO_DECAY) ? 1 : 0], p->offset, p->numel);
    }
    return CT_OK;
}

/* --- shards ------------------------------------------------------------------------------------- */

/* A store describing only the elements [offset, offset + count) of ps: flat views of that range and
 * the trainable parameters intersected with it, their offsets counted from `offset`. The builtin
 * constructors read nothing else from a store and keep none of it (see ct_optimizer_base_init), so
 * handing them this view builds an optimizer of the shard. view->items is malloc'd (free it). */
static ct_status shard_store(const ct_param_store *ps, int64_t offset, int64_t count, ct_param_store *view) {
    *view = *ps;
    view->items = NULL;
    view->count = view->cap = 0;
    view->values = ct_optimizer_range(&ps->values, offset, count);
    view->grads = ct_optimizer_range(&ps->grads, offset, count);
    view->items = malloc((size_t)(ps->count > 0 ? ps->count : 1) * sizeof *view->items);
    if (!view->items) return ct_error(CT_ERR_NOMEM, "optimizer shard: out of memory");
    view->cap = ps->count;
    for (int i = 0; i < ps->count; i++) {
        const ct_param *p = &ps->items[i];
        if (p->flags & CT_PARAM_BUFFER) continue;
        int64_t lo = p->offset > offset ? p->offset : offset;
        int64_t hi = p->offset + p->numel < offset + count ? p->offset + p->numel : offset + count;
        if (hi <= lo) continue;
        ct_param *q = &view->items[view->count++];
        *q = *p;
        q->offset = lo - offset;
        q->numel = hi - lo;
        q->ndim = 1;
        q->shape[0] = q->numel;
        q->value = q->grad = NULL;
    }
    return CT_OK;
}

ct_status ct_optimizer_create_shard(const ct_optim_config *cfg, ct_param_store *ps, int64_t offset, int64_t count,
                                    ct_optimizer **out) {
    *out = NULL;
    if (!ps->finalized)
        return ct_error(CT_ERR_STATE, "optimizer shard: the parameter store is not finalized (build the model first)");
    int64_t n = ct_tensor_numel(&ps->values);
    if (offset < 0 || count < 0 || offset > n || count > n - offset)
        return ct_error(CT_ERR_INVALID_ARG,
                        "optimizer shard: elements [%lld, %lld) outside the %lld parameter elements",
                        (long long)offset, (long long)offset + (long long)count, (long long)n);
    ct_param_store view;
    CT_TRY(shard_store(ps, offset, count, &view));
    ct_status s = ct_optimizer_create(cfg, &view, out);
    free(view.items);
    CT_TRY(s);
    (*out)->shard_offset = offset;
    (*out)->full_numel = n;
    return CT_OK;
}

ct_status ct_optimizer_add_state(ct_optimizer *opt, const char *name, ct_tensor **out) {
    CT_ASSERT(opt->n_state < CT_OPTIM_MAX_STATE && strlen(name) < sizeof opt->state[0].name);
    ct_optim_state *st = &opt->state[opt->n_state];
    int64_t n = ct_tensor_numel(&opt->params);
    ct_status s = ct_tensor_alloc(&st->tensor, opt->params.dtype, opt->params.device, 1, &n);
    if (s != CT_OK) return ct_error_prefix(s, "optimizer '%s': state '%s': ", opt->ops->name, name);
    strcpy(st->name, name);
    opt->n_state++;
    if (out) *out = &st->tensor;
    return CT_OK;
}

ct_tensor ct_optimizer_range(const ct_tensor *flat, int64_t offset, int64_t count) {
    CT_ASSERT(offset >= 0 && count >= 0 && offset + count <= ct_tensor_numel(flat));
    return ct_tensor_view((char *)flat->data + (size_t)offset * ct_dtype_size(flat->dtype), flat->dtype, flat->device,
                          1, &count);
}

/* --- defaults ------------------------------------------------------------------------------------ */

/* A hook exists when the table was written with room for it and sets it. */
#define HOOK(opt, member)                                                                                            \
    ((opt)->ops->size >= offsetof(ct_optimizer_ops, member) + sizeof((opt)->ops->member) ? (opt)->ops->member : NULL)

ct_status ct_optimizer_default_step(ct_optimizer *opt, double lr) {
    void (*update)(ct_optimizer *, const ct_param_group *, int64_t, int64_t, double) = HOOK(opt, update);
    CT_ASSERT(update != NULL); /* an optimizer without its own step must update ranges */
    for (int g = 0; g < opt->n_groups; g++) {
        const ct_param_group *grp = &opt->groups[g];
        for (int r = 0; r < grp->n_ranges; r++) update(opt, grp, grp->ranges[r].offset, grp->ranges[r].count, lr);
    }
    return CT_OK;
}

int ct_optimizer_default_state_count(const ct_optimizer *opt) { return opt->n_state; }

ct_status ct_optimizer_default_state_get(ct_optimizer *opt, int i, const char **name, ct_tensor **tensor) {
    if (i < 0 || i >= opt->n_state)
        return ct_error(CT_ERR_INVALID_ARG, "optimizer '%s': state index %d outside [0, %d)", opt->ops->name, i,
                        opt->n_state);
    *name = opt->state[i].name;
    *tensor = &opt->state[i].tensor;
    return CT_OK;
}

void ct_optimizer_default_destroy(ct_optimizer *opt) {
    free_base(opt);
    free(opt);
}

/* --- wrappers ------------------------------------------------------------------------------------- */

ct_status ct_optimizer_step(ct_optimizer *opt, double lr) {
    if (!(lr >= 0 && isfinite(lr)))
        return ct_error(CT_ERR_INVALID_ARG, "optimizer '%s': learning rate %g (must be finite and >= 0)",
                        opt->ops->name, lr);
    ct_status (*step)(ct_optimizer *, double) = HOOK(opt, step);
    opt->step++;
    ct_status s = step ? step(opt, lr) : ct_optimizer_default_step(opt, lr);
    if (s != CT_OK) {
        opt->step--;
        return ct_error_prefix(s, "optimizer '%s' step %lld: ", opt->ops->name, (long long)opt->step + 1);
    }
    opt->last_lr = lr;
    return CT_OK;
}

/* The default step's ranges are every parameter; what lies between them in the flat gradient buffer
 * is alignment padding, which nothing writes (it stays zero from the allocation), so clearing the
 * ranges clears the buffer. */
ct_status ct_optimizer_step_zero_grad(ct_optimizer *opt, double lr) {
    /* the default step fails only on lr, before it reads anything */
    const bool fused = !HOOK(opt, step) && CT_OPS_HAS(opt->ops, ct_optimizer_ops, update_clears_grads) && lr >= 0 &&
                       isfinite(lr);
    opt->clear_grads = fused;
    ct_status s = ct_optimizer_step(opt, lr);
    opt->clear_grads = false;
    if (s == CT_OK && !fused) ct_op_fill(&opt->grads, 0.0);
    return s;
}

bool ct_optimizer_honours_gate(const ct_optimizer *opt) {
    return !HOOK(opt, step) && CT_OPS_HAS(opt->ops, ct_optimizer_ops, honours_gate);
}

const char *ct_optimizer_name(const ct_optimizer *opt) { return opt->ops->name; }

int ct_optimizer_state_count(const ct_optimizer *opt) {
    int (*count)(const ct_optimizer *) = HOOK(opt, state_count);
    return count ? count(opt) : ct_optimizer_default_state_count(opt);
}

ct_status ct_optimizer_state_get(ct_optimizer *opt, int i, const char **name, ct_tensor **tensor) {
    ct_status (*get)(ct_optimizer *, int, const char **, ct_tensor **) = HOOK(opt, state_get);
    return get ? get(opt, i, name, tensor) : ct_optimizer_default_state_get(opt, i, name, tensor);
}

ct_tensor *ct_optimizer_state_find(ct_optimizer *opt, const char *name) {
    int n = ct_optimizer_state_count(opt);
    for (int i = 0; i < n; i++) {
        const char *nm;
        ct_tensor *t;
        if (ct_optimizer_state_get(opt, i, &nm, &t) == CT_OK && strcmp(nm, name) == 0) return t;
    }
    return NULL;
}

int64_t ct_optimizer_step_count(const ct_optimizer *opt) { return opt->step; }

ct_status ct_optimizer_set_step_count(ct_optimizer *opt, int64_t step) {
    if (step < 0)
        return ct_error(CT_ERR_INVALID_ARG, "optimizer '%s': step count %lld (must be >= 0)", opt->ops->name,
                        (long long)step);
    opt->step = step;
    return CT_OK;
}

void ct_optimizer_destroy(ct_optimizer *opt) {
    if (!opt) return;
    void (*destroy)(ct_optimizer *) = HOOK(opt, destroy);
    if (destroy)
        destroy(opt);
    else
        ct_optimizer_default_destroy(opt);
}
