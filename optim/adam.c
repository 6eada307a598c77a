/* Adam (L2 weight decay added to the gradient) and AdamW (decoupled decay p *= 1 - lr * wd), with
 * bias correction and AMSGrad: torch.optim.Adam and AdamW of PyTorch 1.13, single-tensor path. One
 * fused pass per range (ct_op_adam_step); state "exp_avg", "exp_avg_sq" and, with amsgrad,
 * "max_exp_avg_sq". One step count serves every parameter: all are stepped together. */
#include <stdlib.h>

#include "core/ops/ops.h"
#include "core/util.h"
#include "optim/optimizer.h"

typedef struct ct_adam {
    ct_optimizer base;
    ct_tensor *exp_avg, *exp_avg_sq;
    ct_tensor *max_exp_avg_sq; /* NULL unless amsgrad */
} ct_adam;

static void adam_update(ct_optimizer *opt, const ct_param_group *group, int64_t offset, int64_t count, double lr) {
    ct_adam *adam = ct_container_of(opt, ct_adam, base);
    ct_tensor p = ct_optimizer_range(&opt->params, offset, count);
    ct_tensor g = ct_optimizer_range(&opt->grads, offset, count);
    ct_tensor m = ct_optimizer_range(adam->exp_avg, offset, count);
    ct_tensor v = ct_optimizer_range(adam->exp_avg_sq, offset, count);
    ct_tensor vmax;
    if (adam->max_exp_avg_sq) vmax = ct_optimizer_range(adam->max_exp_avg_sq, offset, count);
    ct_adam_args a = {.lr = lr,
                      .weight_decay = group->weight_decay,
                      .beta1 = opt->config.adam_beta1,
                      .beta2 = opt->config.adam_beta2,
                      .eps = opt->config.adam_epsilon,
                      .decoupled_decay = opt->config.optim == CT_OPTIM_ADAMW,
                      .amsgrad = opt->config.amsgrad,
                      .step = opt->step,
                      .clear_grad = opt->clear_grads,
                      .gate = opt->gate};
    ct_op_adam_step(&p, &g, &m, &v, adam->max_exp_avg_sq ? &vmax : NULL, &a);
}

static const ct_optimizer_ops adam_ops = {
    .size = sizeof(ct_optimizer_ops),
    .name = "adam",
    .update = adam_update,
    .update_clears_grads = true,
    .honours_gate = true,
};

static const ct_optimizer_ops adamw_ops = {
    .size = sizeof(ct_optimizer_ops),
    .name = "adamw",
    .update = adam_update,
    .update_clears_grads = true,
    .honours_gate = true,
};

ct_status ct_adam_create(const ct_optim_config *cfg, ct_param_store *ps, ct_optimizer **out) {
    *out = NULL;
    if (cfg->optim != CT_OPTIM_ADAM && cfg->optim != CT_OPTIM_ADAMW)
        return ct_error(CT_ERR_CONFIG, "ct_adam_create: the config names another optimizer");
    CT_TRY(ct_optim_config_validate(cfg));
    ct_adam *adam = calloc(1, sizeof *adam);
    if (!adam) return ct_error(CT_ERR_NOMEM, "optimizer 'adam': out of memory");
    ct_status s = ct_optimizer_base_init(&adam->base, cfg->optim == CT_OPTIM_ADAMW ? &adamw_ops : &adam_ops, cfg, ps);
    if (s != CT_OK) {
        free(adam);
        return s;
    }
    s = ct_optimizer_add_state(&adam->base, "exp_avg", &adam->exp_avg);
    if (s == CT_OK) s = ct_optimizer_add_state(&adam->base, "exp_avg_sq", &adam->exp_avg_sq);
    if (s == CT_OK && cfg->amsgrad) s = ct_optimizer_add_state(&adam->base, "max_exp_avg_sq", &adam->max_exp_avg_sq);
    if (s != CT_OK) {
        ct_optimizer_default_destroy(&adam->base);
        return s;
    }
    *out = &adam->base;
    return CT_OK;
}
