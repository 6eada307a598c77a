/* Distribution strategies: how one optimizer step of data-parallel training handles its gradients
 * and its optimizer, behind one const table per strategy.
 *
 *   none   one process: gradients stay local, the optimizer is the plain one;
 *   ddp    several processes (PyTorch's DDP): rank 0's parameters to every process at the start,
 *          then each step's gradient sums all-reduced in buckets while the last backward runs
 *          (dist/strategy_ddp.c), and every process steps its own full optimizer;
 *   zero1  ZeRO stage 1 (dist/zero.h): the optimizer state is sharded; a step reduce-scatters the
 *          gradients, updates this rank's shard and all-gathers the parameters (any world size).
 *
 * The training loop chooses the strategy once (ct_dist_strategy_for), then calls, per optimizer
 * step: ct_dist_begin_step before the backward of the step's last micro-batch, ct_dist_finish_grads
 * after it, ct_dist_prepare_grads (scale, clip, the gradient norm where it is local) and
 * ct_dist_optimizer_step. A strategy sees the model's parameter store and the communicator, never
 * the trainer (dist is below trainer).
 *
 * The table follows the project's rule: size first, members only appended, NULL = the default
 * (named at each member). */
#ifndef CT_DIST_STRATEGY_H
#define CT_DIST_STRATEGY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "dist/comm.h"
#include "model/model.h"
#include "optim/optimizer.h"

/* What a strategy works on (borrowed; it must outlive the ct_dist). */
typedef struct ct_dist_setup {
    ct_comm *comm;         /* the processes of the run (rank and world size) */
    ct_model *model;       /* its flat parameter store (values, grads, buffers) and its backward's
                            * reports of finished gradients */
    int64_t bucket_cap_mb; /* ddp: the gradient bucket size (<= 0: 25 MiB, PyTorch's default) */
} ct_dist_setup;

typedef struct ct_dist ct_dist;

typedef struct ct_dist_strategy {
    size_t size;           /* sizeof(ct_dist_strategy) when the table was written */
    const char *name;      /* "none", "ddp", "zero1" */
    bool shards_optimizer; /* the optimizer holds only this rank's shard of the state (zero1) */
    /* The strategy's own state into d->state (NULL: none). */
    ct_status (*create)(ct_dist *d);
    void (*destroy)(ct_dist *d);
    /* The optimizer of cfg over the model's parameters (NULL: ct_optimizer_create). */
    ct_status (*create_optimizer)(ct_dist *d, const ct_optim_config *cfg, ct_optimizer **out);
    /* Collective: rank 0's parameters and buffers to every process (NULL: nothing to do). */
    ct_status (*broadcast_params)(ct_dist *d);
    /* Before the backward of the step's last micro-batch (NULL: nothing). */
    void (*begin_step)(ct_dist *d);
    /* After it: the gradient sums of every process are in the gradient buffer when this returns
     * (start_rest false after a failed backward: only what already started is waited for; NULL:
     * nothing, the gradients are local). */
    ct_status (*finish_grads)(ct_dist *d, bool start_rest);
    /* Scales the gradients by `scale` and clips them to max_grad_norm (> 0), or only measures their
     * norm; *norm_known is false when the norm is known only inside optimizer_step. A non-finite
     * norm leaves the gradients unclipped and is not an error here (the caller's nan_inf_policy
     * decides). NULL: the local scale and clip (optim/clip.h). */
    ct_status (*prepare_grads)(ct_dist *d, double scale, double max_grad_norm, double *norm, bool *norm_known);
    /* The optimizer's update with learning rate lr (scale and max_grad_norm: as given to
     * prepare_grads, for a strategy that scales and clips inside the step; *norm: the norm it
     * found, when it finds one; CT_ERR_NUMERIC with nothing updated when it is not finite). NULL:
     * ct_optimizer_step. */
    ct_status (*optimizer_step)(ct_dist *d, ct_optimizer *opt, double lr, double scale, double max_grad_norm,
                                double *norm);
} ct_dist_strategy;

struct ct_dist {
    const ct_dist_strategy *strategy;
    ct_dist_setup setup;
    void *state; /* the strategy's */
};

extern const ct_dist_strategy ct_dist_none, ct_dist_ddp, ct_dist_zero1;

/* The strategy of a run: zero1 when optimizer_sharding is "zero1" (at any world size), ddp with
 * several processes, none otherwise. */
const ct_dist_strategy *ct_dist_strategy_for(const char *optimizer_sharding, int world_size);

/* d over setup with strategy s (its create runs here); on failure nothing is left to free. */
ct_status ct_dist_init(ct_dist *d, const ct_dist_strategy *s, const ct_dist_setup *setup);
void ct_dist_free(ct_dist *d);

/* Collective: rank 0's parameters and buffers to every process (ddp's and zero1's broadcast_params;
 * nothing with one process). */
ct_status ct_dist_broadcast_from_rank0(ct_dist *d);

/* The calls of one optimizer step, each applying the table's default for a NULL member. */
ct_status ct_dist_create_optimizer(ct_dist *d, const ct_optim_config *cfg, ct_optimizer **out);
ct_status ct_dist_broadcast_params(ct_dist *d);
void ct_dist_begin_step(ct_dist *d);
ct_status ct_dist_finish_grads(ct_dist *d, bool start_rest);
ct_status ct_dist_prepare_grads(ct_dist *d, double scale, double max_grad_norm, double *norm, bool *norm_known);
ct_status ct_dist_optimizer_step(ct_dist *d, ct_optimizer *opt, double lr, double scale, double max_grad_norm,
                                 double *norm);

#endif
