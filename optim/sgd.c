/* SGD with momentum, dampening, Nesterov momentum and L2 weight decay: torch.optim.SGD exactly (the
 * momentum buffer starts as a copy of the first step's decayed gradient). One fused pass per range
 * (ct_op_sgd_step); state "momentum_buffer" exists only when momentum != 0, as in PyTorch. */
#include <stdlib.h>

#include "core/ops/ops.h"
#include "core/util.h"
#include "optim/optimizer.h"

typedef struct ct_sgd {
    ct_optimizer base;
    ct_tensor *momentum_buffer; /* NULL when momentum == 0 */
} ct_sgd;

static void sgd_update(ct_optimizer *opt, const ct_param_group *group, int64_t offset, int64_t count, double lr) {
    ct_sgd *sgd = ct_container_of(opt, ct_sgd, base);
    ct_tensor p = ct_optimizer_range(&opt->params, offset, count);
    ct_tensor g = ct_optimizer_range(&opt->grads, offset, count);
    ct_tensor buf;
    if (sgd->momentum_buffer) buf = ct_optimizer_range(sgd->momentum_buffer, offset, count);
    ct_sgd_args a = {.lr = lr,
                     .weight_decay = group->weight_decay,
                     .momentum = opt->config.momentum,
                     .dampening = opt->config.dampening,
                     .nesterov = opt->config.nesterov,
                     .first_step = opt->step == 1,
                     .clear_grad = opt->clear_grads,
                     .gate = opt->gate};
    ct_op_sgd_step(&p, &g, sgd->momentum_buffer ? &buf : NULL, &a);
}

static const ct_optimizer_ops sgd_ops = {
    .size = sizeof(ct_optimizer_ops),
    .name = "sgd",
    .update = sgd_update,
    .update_clears_grads = true,
    .honours_gate = true,
};

ct_status ct_sgd_create(const ct_optim_config *cfg, ct_param_store *ps, ct_optimizer **out) {
    *out = NULL;
    if (cfg->optim != CT_OPTIM_SGD)
        return ct_error(CT_ERR_CONFIG, "ct_sgd_create: the config names another optimizer");
    CT_TRY(ct_optim_config_validate(cfg));
    ct_sgd *sgd = calloc(1, sizeof *sgd);
    if (!sgd) return ct_error(CT_ERR_NOMEM, "optimizer 'sgd': out of memory");
    ct_status s = ct_optimizer_base_init(&sgd->base, &sgd_ops, cfg, ps);
    if (s != CT_OK) {
        free(sgd);
        return s;
    }
    if (cfg->momentum != 0) s = ct_optimizer_add_state(&sgd->base, "momentum_buffer", &sgd->momentum_buffer);
    if (s != CT_OK) {
        ct_optimizer_default_destroy(&sgd->base);
        return s;
    }
    *out = &sgd->base;
    return CT_OK;
}
