/* The "zero1" distribution strategy over dist/zero.h: a shard optimizer per rank, and one step that
 * reduce-scatters the gradient sums, scales and clips them by the global norm, updates this rank's
 * shard and all-gathers the parameters. The gradients stay local until that step (no buckets), and
 * the norm is known only inside it (prepare_grads measures nothing). See dist/strategy.h. */
#include "dist/strategy.h"
#include "dist/zero.h"

static ct_status zero1_create_optimizer(ct_dist *d, const ct_optim_config *cfg, ct_optimizer **out) {
    /* this process keeps the optimizer state of its shard of the parameters only */
    return ct_zero1_create(cfg, &d->setup.model->params, d->setup.comm, out);
}

static ct_status zero1_prepare_grads(ct_dist *d, double scale, double max_grad_norm, double *norm,
                                     bool *norm_known) {
    (void)d, (void)scale, (void)max_grad_norm, (void)norm;
    *norm_known = false; /* the gradients are reduced, scaled and clipped inside the step */
    return CT_OK;
}

static ct_status zero1_optimizer_step(ct_dist *d, ct_optimizer *opt, double lr, double scale, double max_grad_norm,
                                      double *norm) {
    ct_param_store *ps = &d->setup.model->params;
    /* the norm is computed even without clipping: a NaN gradient must not reach the weights */
    return ct_zero1_step(opt, d->setup.comm, &ps->grads, &ps->values, lr, scale, max_grad_norm, norm);
}

const ct_dist_strategy ct_dist_zero1 = {
    .size = sizeof(ct_dist_strategy),
    .name = "zero1",
    .shards_optimizer = true,
    .create_optimizer = zero1_create_optimizer,
    .broadcast_params = ct_dist_broadcast_from_rank0,
    .prepare_grads = zero1_prepare_grads,
    .optimizer_step = zero1_optimizer_step,
};
