/* optimizer.h5 for ZeRO-1 shard optimizers (dist/zero.h), in the very format of
 * ct_optimizer_save_h5 (checkpoint/checkpoint_io.h): full state tensors laid out like the flat
 * parameter buffer, so the file does not depend on the world size. A checkpoint written by plain
 * DDP, a single process or ZeRO-1 on any number of ranks resumes under any of them.
 *
 * Both calls are collectives (every rank calls them with the same root and file name); only root
 * touches the file, so the path need only exist there. The full state passes through root's memory
 * (the state of the unsharded optimizer, for the duration of the call). A failure on root is
 * returned on every rank (root with its message, the others naming root), so all ranks stop
 * together. */
#ifndef CT_CHECKPOINT_ZERO_H
#define CT_CHECKPOINT_ZERO_H

#include "core/status.h"
#include "dist/comm.h"
#include "optim/optimizer.h"

/* Gathers the shards' state on root (ct_zero1_gather_state), which writes it with
 * ct_optimizer_save_h5. */
ct_status ct_zero1_save_h5(ct_optimizer *shard_opt, ct_comm *c, int root, const char *file);

/* Root reads the file with ct_optimizer_load_h5 (every check of that function: optimizer, settings,
 * sizes) into a state-only optimizer, then every rank takes its slice and the step count
 * (ct_zero1_scatter_state). On failure no rank's optimizer changes. */
ct_status ct_zero1_load_h5(ct_optimizer *shard_opt, ct_comm *c, int root, const char *file);

#endif
