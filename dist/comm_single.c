/* The single-process communicator: rank 0 of 1. Every reduction over one rank is the identity, so
 * all-reduce, broadcast and barrier do nothing, and the gathers and reduce-scatter are copies. It
 * never touches MPI, so a plain `ctrainer train` (and every unit test) runs without mpirun. */
#include <stdlib.h>
#include <string.h>

#include "dist/comm.h"

/* Non-blocking all-reduces finish at once: every request is this one handle, so starting one
 * allocates nothing. */
static char single_done;

static ct_status single_all_reduce(ct_comm *c, ct_tensor *t, ct_reduce op) { return CT_OK; }

static ct_status single_all_reduce_start(ct_comm *c, ct_tensor *t, ct_reduce op, ct_comm_request **req) {
    *req = (ct_comm_request *)&single_done;
    return CT_OK;
}

static ct_status single_wait(ct_comm *c, ct_comm_request *req) {
    CT_ASSERT(req == (ct_comm_request *)&single_done); /* a request of another communicator */
    return CT_OK;
}

static ct_status single_broadcast(ct_comm *c, ct_tensor *t, int root) { return CT_OK; }

/* The copies go through the device functions, so tensors on any device (and in == out, the in-place
 * all-gather) are served. */
static ct_status copy(const ct_tensor *in, ct_tensor *out, size_t bytes) {
    if (bytes == 0 || in->data == out->data) return CT_OK;
    return ct_device_copy(out->data, out->device, in->data, in->device, bytes);
}

static ct_status single_all_gather(ct_comm *c, const ct_tensor *in, ct_tensor *out) {
    return copy(in, out, ct_tensor_nbytes(in));
}

static ct_status single_gather_v(ct_comm *c, const ct_tensor *in, int root, ct_tensor *out) {
    int64_t n = ct_tensor_numel(in);
    if (n == 0) return CT_OK; /* the wrapper left *out empty, which is the whole result */
    CT_TRY(ct_tensor_alloc(out, in->dtype, in->device, 1, &n));
    return copy(in, out, ct_tensor_nbytes(in));
}

static ct_status single_reduce_scatter(ct_comm *c, const ct_tensor *in, ct_tensor *out, ct_reduce op) {
    return copy(in, out, ct_tensor_nbytes(out));
}

static ct_status single_barrier(ct_comm *c) { return CT_OK; }

static void single_abort(ct_comm *c, int code) { exit(code); }

static void single_destroy(ct_comm *c) { free(c); }

static const ct_comm_ops single_ops = {
    .size = sizeof(ct_comm_ops),
    .name = "single",
    .all_reduce = single_all_reduce,
    .all_reduce_start = single_all_reduce_start,
    .wait = single_wait,
    .broadcast = single_broadcast,
    .all_gather = single_all_gather,
    .gather_v = single_gather_v,
    .reduce_scatter = single_reduce_scatter,
    .barrier = single_barrier,
    .abort = single_abort,
    .destroy = single_destroy,
    .device_kinds = ~0u, /* every device: nothing travels */
};

ct_status ct_comm_single_create(ct_comm **out) {
    CT_ASSERT(out);
    *out = NULL;
    ct_comm *c = calloc(1, sizeof *c);
    if (!c) return ct_error(CT_ERR_NOMEM, "single communicator: cannot allocate");
    *c = (ct_comm){.ops = &single_ops, .rank = 0, .world_size = 1, .local_rank = 0, .local_world_size = 1,
                   .timeout_s = 1800.0};
    *out = c;
    return CT_OK;
}
