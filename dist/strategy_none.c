/* The strategy table's dispatch (the defaults of NULL members), the choice of a run's strategy, and
 * "none": one process, local gradients and the plain optimizer, every member the default. See
 * dist/strategy.h. */
#include <math.h>
#include <string.h>

#include "core/ops/ops.h"
#include "dist/strategy.h"
#include "optim/clip.h"

/* A member is usable when the table is recent enough to have it and it is set. */
#define HAS(s, member) ((s)->size >= offsetof(ct_dist_strategy, member) + sizeof((s)->member) && (s)->member)

const ct_dist_strategy ct_dist_none = {.size = sizeof(ct_dist_strategy), .name = "none"};

const ct_dist_strategy *ct_dist_strategy_for(const char *optimizer_sharding, int world_size) {
    if (optimizer_sharding && strcmp(optimizer_sharding, "zero1") == 0) return &ct_dist_zero1;
    return world_size > 1 ? &ct_dist_ddp : &ct_dist_none;
}

ct_status ct_dist_init(ct_dist *d, const ct_dist_strategy *s, const ct_dist_setup *setup) {
    CT_ASSERT(d && s && setup && setup->comm && setup->model);
    *d = (ct_dist){.strategy = s, .setup = *setup};
    ct_status st = HAS(s, create) ? s->create(d) : CT_OK;
    if (st != CT_OK) *d = (ct_dist){0};
    return st;
}

void ct_dist_free(ct_dist *d) {
    if (!d || !d->strategy) return;
    if (HAS(d->strategy, destroy)) d->strategy->destroy(d);
    *d = (ct_dist){0};
}

ct_status ct_dist_create_optimizer(ct_dist *d, const ct_optim_config *cfg, ct_optimizer **out) {
    if (HAS(d->strategy, create_optimizer)) return d->strategy->create_optimizer(d, cfg, out);
    return ct_optimizer_create(cfg, &d->setup.model->params, out);
}

ct_status ct_dist_broadcast_params(ct_dist *d) {
    return HAS(d->strategy, broadcast_params) ? d->strategy->broadcast_params(d) : CT_OK;
}

void ct_dist_begin_step(ct_dist *d) {
    if (HAS(d->strategy, begin_step)) d->strategy->begin_step(d);
}

ct_status ct_dist_finish_grads(ct_dist *d, bool start_rest) {
    return HAS(d->strategy, finish_grads) ? d->strategy->finish_grads(d, start_rest) : CT_OK;
}

ct_status ct_dist_prepare_grads(ct_dist *d, double scale, double max_grad_norm, double *norm, bool *norm_known) {
    *norm = NAN;
    *norm_known = false;
    if (HAS(d->strategy, prepare_grads)) return d->strategy->prepare_grads(d, scale, max_grad_norm, norm, norm_known);
    ct_tensor *grads = &d->setup.model->params.grads;
    if (scale != 1.0) ct_op_scale(grads, scale);
    *norm_known = true;
    if (max_grad_norm <= 0) {
        *norm = ct_op_l2_norm(grads); /* no clipping: one pass only to see NaN or inf */
        return CT_OK;
    }
    /* a non-finite norm leaves the gradients as they are (CT_ERR_NUMERIC): the caller decides */
    ct_status s = ct_clip_grad_norm(grads, max_grad_norm, norm);
    return s == CT_ERR_NUMERIC ? CT_OK : s;
}

ct_status ct_dist_optimizer_step(ct_dist *d, ct_optimizer *opt, double lr, double scale, double max_grad_norm,
                                 double *norm) {
    if (HAS(d->strategy, optimizer_step)) return d->strategy->optimizer_step(d, opt, lr, scale, max_grad_norm, norm);
    return ct_optimizer_step(opt, lr);
}
