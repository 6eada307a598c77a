/* Data parallelism inside the Trainer (PyTorch's DDP, over ct_comm): every process starts from rank
 * 0's parameters and buffers, and after the micro-batches of an optimizer step the gradient SUMS of
 * every process are added up in buckets, so each process steps with the same gradients.
 *
 * Buckets: the flat gradient buffer is cut into pieces of about 25 MiB (PyTorch's default bucket
 * size); all are started as non-blocking all-reduces, then waited for, so large models keep several
 * transfers in flight instead of one long blocking call. */
#include "trainer/trainer_impl.h"

#define BUCKET_BYTES ((int64_t)25 << 20)

ct_status ct_trainer_broadcast_params(ct_trainer *t) {
    if (t->world_size <= 1) return CT_OK;
    ct_param_store *ps = &t->model->params;
    CT_TRY(ct_comm_broadcast(t->comm, &ps->values, 0));
    if (ps->buffers.data && ct_tensor_numel(&ps->buffers) > 0) CT_TRY(ct_comm_broadcast(t->comm, &ps->buffers, 0));
    return CT_OK;
}

ct_status ct_trainer_all_reduce_grads(ct_trainer *t) {
    if (t->world_size <= 1) return CT_OK;
    ct_tensor *g = &t->model->params.grads;
    int64_t n = ct_tensor_numel(g), per = BUCKET_BYTES / (int64_t)ct_dtype_size(g->dtype);
    enum { MAX_BUCKETS = 256 };
    if (per * MAX_BUCKETS < n) per = (n + MAX_BUCKETS - 1) / MAX_BUCKETS;
    ct_tensor views[MAX_BUCKETS];
    ct_comm_request *reqs[MAX_BUCKETS];
    int started = 0;
    ct_status s = CT_OK;
    for (int64_t off = 0; off < n && s == CT_OK; off += per, started++) {
        views[started] = ct_tensor_rows(g, off, off + per < n ? per : n - off);
        s = ct_comm_all_reduce_start(t->comm, &views[started], CT_SUM, &reqs[started]);
        if (s != CT_OK) break;
    }
    /* Every started request is waited for, even after a failure, so none is left in flight. */
    for (int i = 0; i < started; i++) {
        ct_status w = ct_comm_wait(t->comm, reqs[i]);
        if (s == CT_OK) s = w;
    }
    return s;
}
