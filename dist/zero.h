/* ZeRO stage 1: the optimizer state sharded over the ranks of a data-parallel job.
 *
 * The partition. The flat parameter buffer of P elements (model/params.h: ps->values, INCLUDING the
 * alignment padding between and after parameters, which is zero and stays zero) is cut into world
 * contiguous shards of S = ceil(P / world) elements, in rank order:
 *
 *     shard r = [min(r*S, P), min((r+1)*S, P))
 *
 * so every shard but the last non-empty one has exactly S elements; the last is shorter when world
 * does not divide P, and the ranks r with r * S >= P own nothing (P = 16, world = 7: S = 3, rank 5
 * owns [15, 16), rank 6 nothing). Shards cut through parameters freely:
 * the optimizer groups (decay / no_decay) are intersected with the shard (ct_optimizer_create_shard).
 * For the collectives each shard is padded to S elements with zeros; that padding never reaches a
 * buffer.
 *
 * Each rank holds a shard optimizer: a normal optimizer (SGD, Adam, AdamW) whose params, grads and
 * state tensors are views of / sized for its shard only (optim/optimizer.h: shard_offset,
 * full_numel). Every rank still holds the full parameters and gradients. One step
 * (ct_zero1_step):
 *
 *   1. reduce-scatter the gradient SUMS: rank r receives the sum over ranks of shard r, written into
 *      shard r of its own gradient buffer (the rest of that buffer keeps this rank's local sums);
 *   2. scale the shard by grad_scale (1 / the step's global sample or token count);
 *   3. the global gradient norm: the float64 sum of squares of each shard, all-reduced, so every rank
 *      gets the same norm and clips (ct_clip_grad_norm_apply's rule) by the same coefficient;
 *   4. the shard optimizer updates the shard of the parameters;
 *   5. all-gather the parameter shards into every rank's full parameter buffer.
 *
 * The result equals plain DDP (all-reduce, scale, clip, full optimizer step) up to float summation
 * order (the reduction order of the collectives and the split of the norm's sum), i.e. to rounding.
 *
 * The reduce-scatter goes through a staging buffer (the shard optimizer's scratch, allocated once by
 * ct_zero1_create) in chunks of at most CT_ZERO1_STAGING_BYTES in all, so ZeRO-1 never holds a
 * second full-size copy of the gradients; so does the all-gather unless world divides P, when it
 * gathers in place into the parameter buffer. A step allocates nothing.
 *
 * Checkpoints do not depend on the world size: ct_zero1_gather_state assembles the full state
 * tensors (laid out like the flat parameter buffer, exactly what a plain optimizer holds) on one
 * rank, in a state-only optimizer that checkpoint/checkpoint_io.h's ct_optimizer_save_h5 writes as the
 * ordinary optimizer.h5; ct_zero1_scatter_state hands each rank its slice of full state tensors read
 * by ct_optimizer_load_h5 into such a state-only optimizer. checkpoint/checkpoint_zero.h wraps both
 * into whole-file collectives. A checkpoint saved by plain DDP or any world size resumes with any
 * other.
 *
 * Every function taking a communicator is a collective: every rank calls it, in the same order, with
 * the same arguments (lr, grad_scale, max_grad_norm, root). Errors every rank can see (a non-finite
 * norm, a bad learning rate) are returned on every rank alike. */
#ifndef CT_ZERO_H
#define CT_ZERO_H

#include <stdint.h>

#include "core/status.h"
#include "core/tensor.h"
#include "dist/comm.h"
#include "model/params.h"
#include "optim/optimizer.h"

/* The most staging memory a shard optimizer holds for its collectives (for world + 1 chunks). */
#define CT_ZERO1_STAGING_BYTES ((int64_t)16 << 20)

typedef struct ct_zero1_shard {
    int64_t offset, count; /* this rank's elements [offset, offset + count) */
    int64_t shard_size;    /* S = ceil(numel / world): every shard's length in the collectives */
} ct_zero1_shard;

/* The shard of `rank` of a flat buffer of numel elements (numel >= 0, 0 <= rank < world). */
ct_zero1_shard ct_zero1_partition(int64_t numel, int world_size, int rank);

/* The shard optimizer of rank c->rank over the finalized store ps: ct_optimizer_create_shard with
 * the partition above, plus the staging memory ct_zero1_step needs for c's world size. Destroy it
 * with ct_optimizer_destroy. */
ct_status ct_zero1_create(const ct_optim_config *cfg, ct_param_store *ps, const ct_comm *c, ct_optimizer **out);
/* The same with at most staging_bytes of staging (>= 1; rounded up to world + 1 elements): smaller
 * means more, smaller collectives per step. Every rank must pass the same value. */
ct_status ct_zero1_create_staged(const ct_optim_config *cfg, ct_param_store *ps, const ct_comm *c,
                                 int64_t staging_bytes, ct_optimizer **out);

/* One ZeRO-1 optimizer step (steps 1-5 above). grads and params are the store's full flat buffers
 * (ps->grads, ps->values) the shard optimizer was created over; grads holds this rank's gradient
 * SUMS. grad_scale multiplies the reduced gradients (> 0, finite). max_grad_norm > 0 clips like
 * ct_clip_grad_norm; <= 0 does not clip. *grad_norm (may be NULL) receives the global norm of the
 * scaled gradients; it is computed when max_grad_norm > 0 or grad_norm is not NULL, and then a
 * non-finite norm is CT_ERR_NUMERIC on every rank with the parameters unchanged everywhere (as
 * ct_clip_grad_norm leaves the gradients). A negative or non-finite lr is CT_ERR_INVALID_ARG before
 * anything is communicated. Afterwards only this rank's shard of grads holds the reduced gradient. */
ct_status ct_zero1_step(ct_optimizer *shard_opt, ct_comm *c, ct_tensor *grads, ct_tensor *params, double lr,
                        double grad_scale, double max_grad_norm, double *grad_norm);

/* A state-only optimizer shaped like the unsharded optimizer of shard_opt: its name, config and step
 * count, and one zeroed state tensor of full_numel elements per state tensor of the shard, with the
 * same names in the same order. It is what ct_optimizer_save_h5 / ct_optimizer_load_h5 work on;
 * stepping it is CT_ERR_UNSUPPORTED. Destroy with ct_optimizer_destroy. */
ct_status ct_zero1_full_state_create(ct_optimizer *shard_opt, ct_optimizer **out);

/* Collective. Assembles every rank's state slices in rank order on root: there *full receives a new
 * state-only optimizer (as above, filled, with shard_opt's step count); elsewhere *full is NULL. */
ct_status ct_zero1_gather_state(ct_optimizer *shard_opt, ct_comm *c, int root, ct_optimizer **full);

/* Collective. The inverse: every rank copies its slice of root's full state tensors (matched by name)
 * into shard_opt's state and takes root's step count. `full` is only read on root (pass NULL
 * elsewhere); on root it must have every state tensor of shard_opt with full_numel elements, else
 * every rank returns CT_ERR_CONFIG (naming what differs on root) with nothing changed. */
ct_status ct_zero1_scatter_state(ct_optimizer *shard_opt, ct_comm *c, int root, ct_optimizer *full);

/* Collective. Every rank returns CT_OK when `s` on root is CT_OK; otherwise root returns s with its
 * message and the others the same status with "<what> failed on rank <root>: see its log". For
 * steps only root performs (writing a file), so that every rank fails together. */
ct_status ct_zero1_agree(ct_comm *c, int root, ct_status s, const char *what);

#endif
