/* ZeRO-1 optimizer checkpoints (see checkpoint_zero.h): the collectives of dist/zero.h around the
 * ordinary optimizer.h5 reader and writer, so there is one file format and one set of checks. */
#include "checkpoint/checkpoint_zero.h"

#include <stdio.h>

#include "checkpoint/checkpoint_io.h"
#include "dist/zero.h"

ct_status ct_zero1_save_h5(ct_optimizer *shard_opt, ct_comm *c, int root, const char *file) {
    CT_ASSERT(shard_opt && c && file);
    ct_optimizer *full = NULL;
    CT_TRY(ct_zero1_gather_state(shard_opt, c, root, &full));
    ct_status s = c->rank == root ? ct_optimizer_save_h5(full, file) : CT_OK;
    ct_optimizer_destroy(full);
    char what[512];
    snprintf(what, sizeof what, "save optimizer '%s'", file);
    return ct_zero1_agree(c, root, s, what);
}

ct_status ct_zero1_load_h5(ct_optimizer *shard_opt, ct_comm *c, int root, const char *file) {
    CT_ASSERT(shard_opt && c && file);
    ct_optimizer *full = NULL;
    ct_status s = CT_OK;
    if (c->rank == root) {
        s = ct_zero1_full_state_create(shard_opt, &full);
        if (s == CT_OK) s = ct_optimizer_load_h5(full, file);
    }
    char what[512];
    snprintf(what, sizeof what, "load optimizer '%s'", file);
    s = ct_zero1_agree(c, root, s, what);
    if (s == CT_OK) s = ct_zero1_scatter_state(shard_opt, c, root, full);
    ct_optimizer_destroy(full);
    return s;
}
