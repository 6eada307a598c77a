/* The "ddp" distribution strategy (PyTorch's DDP, over ct_comm): every process starts from rank
 * 0's parameters and buffers, and after the micro-batches of an optimizer step the gradient SUMS of
 * every process are added up, so each process steps with the same gradients.
 *
 * Buckets: the flat gradient buffer is cut at parameter boundaries into buckets of about
 * ddp_bucket_cap_mb (25 MiB, PyTorch's default), numbered from the END of the buffer, because
 * parameters are laid out in forward order and backward produces the last ones first; the first
 * bucket is capped at 1 MiB (as PyTorch does) so communication starts early. During the backward
 * pass of the step's last micro-batch the model reports each module whose gradients are done; once
 * every gradient from a bucket's start to the end of the buffer is done, that bucket's non-blocking
 * all-reduce starts, and travels while backward goes on through the earlier layers. Buckets always
 * start in the same order on every process (collectives must pair up), also on a process that had
 * no samples and ran no backward: finish_grads starts what is left, then waits for all. Every bucket's
 * collective is labelled ("gradient all-reduce (bucket b of n)") so a timeout says which one. */
#include <stdlib.h>

#include "dist/strategy.h"

#define DEFAULT_BUCKET_MB 25
#define FIRST_BUCKET_BYTES ((int64_t)1 << 20)

typedef struct ct_ddp {
    ct_model *model;
    ct_comm *comm;
    ct_tensor *grads;
    int n_buckets;
    int64_t *lo;               /* bucket b covers [lo[b], b ? lo[b - 1] : numel), b = 0 the last */
    ct_tensor *views;
    ct_comm_request **reqs;
    int started;               /* buckets [0, started) are in flight */
    int64_t frontier;          /* every gradient at or above it is final for this step */
    bool listening;
    bool pass_done;            /* the root module reported: the backward pass is over */
} ct_ddp;

/* Shared with zero1, whose processes must start from the same parameters too. */
ct_status ct_dist_broadcast_from_rank0(ct_dist *d) {
    ct_comm *c = d->setup.comm;
    if (c->world_size <= 1) return CT_OK;
    ct_param_store *ps = &d->setup.model->params;
    ct_comm_set_label(c, "parameter broadcast from rank 0");
    CT_TRY(ct_comm_broadcast(c, &ps->values, 0));
    if (ps->buffers.data && ct_tensor_numel(&ps->buffers) > 0) {
        ct_comm_set_label(c, "buffer broadcast from rank 0");
        CT_TRY(ct_comm_broadcast(c, &ps->buffers, 0));
    }
    return CT_OK;
}

static int64_t bucket_hi(const ct_ddp *d, int b) { return b ? d->lo[b - 1] : ct_tensor_numel(d->grads); }

static void ddp_free(ct_ddp *d) {
    if (!d) return;
    free(d->lo);
    free(d->views);
    free(d->reqs);
    free(d);
}

static ct_status ddp_create(ct_dist *dist) {
    const ct_param_store *ps = &dist->setup.model->params;
    int64_t es = (int64_t)ct_dtype_size(ps->grads.dtype);
    int64_t mb = dist->setup.bucket_cap_mb, cap = (mb > 0 ? mb : DEFAULT_BUCKET_MB) << 20;
    ct_ddp *d = calloc(1, sizeof *d);
    /* At most one bucket per parameter, and one for what lies below the first. */
    int n_max = ps->count + 1;
    if (d) {
        d->lo = calloc((size_t)n_max, sizeof *d->lo);
        d->views = calloc((size_t)n_max, sizeof *d->views);
        d->reqs = calloc((size_t)n_max, sizeof *d->reqs);
    }
    if (!d || !d->lo || !d->views || !d->reqs) {
        ddp_free(d);
        return ct_error(CT_ERR_NOMEM, "DDP: out of memory for %d gradient buckets", n_max);
    }
    d->model = dist->setup.model;
    d->comm = dist->setup.comm;
    d->grads = &d->model->params.grads;
    /* Walk the parameters from the end of the buffer down; close a bucket at the parameter that fills it. */
    int64_t hi = ct_tensor_numel(d->grads), limit = FIRST_BUCKET_BYTES < cap ? FIRST_BUCKET_BYTES : cap;
    for (int i = ps->count - 1; i >= 0; i--) {
        const ct_param *p = &ps->items[i];
        if (p->flags & CT_PARAM_BUFFER) continue;
        if ((hi - p->offset) * es >= limit || p->offset == 0) {
            d->lo[d->n_buckets++] = p->offset;
            hi = p->offset;
            limit = cap;
        }
    }
    /* Whatever lies below the last closed bucket (leading parameters that did not fill one). */
    if (hi > 0) d->lo[d->n_buckets++] = 0;
    dist->state = d;
    return CT_OK;
}

static void ddp_destroy(ct_dist *dist) {
    ddp_free(dist->state);
    dist->state = NULL;
}

static void label_bucket(const ct_ddp *d, int b) {
    ct_comm_set_label(d->comm, "gradient all-reduce (bucket %d of %d)", b + 1, d->n_buckets);
}

static ct_status start_ready(ct_ddp *d) {
    while (d->started < d->n_buckets && d->lo[d->started] >= d->frontier) {
        int b = d->started;
        d->views[b] = ct_tensor_rows(d->grads, d->lo[b], bucket_hi(d, b) - d->lo[b]);
        label_bucket(d, b);
        CT_TRY(ct_comm_all_reduce_start(d->comm, &d->views[b], CT_SUM, &d->reqs[b]));
        d->started++;
    }
    return CT_OK;
}

/* The model's report: module m's gradients are done. */
static ct_status on_grads_ready(void *ctx, const ct_module *m) {
    ct_ddp *d = ctx;
    if (d->pass_done)
        return ct_error(CT_ERR_STATE, "DDP: %s '%s' changed gradients after the backward pass had ended and their "
                        "all-reduce had begun: backward ran twice in the last micro-batch of a step; add the losses "
                        "and run backward once", m->ops->type, m->name[0] ? m->name : "(root)");
    d->pass_done = m == d->model->root;
    /* A module finishing out of order (its range not reaching the done part) waits for its parent. */
    if (m->grad_hi >= d->frontier && m->grad_lo < d->frontier) d->frontier = m->grad_lo;
    return start_ready(d);
}

static void ddp_begin_step(ct_dist *dist) {
    ct_ddp *d = dist->state;
    d->started = 0;
    d->frontier = ct_tensor_numel(d->grads);
    d->listening = true;
    d->pass_done = false;
    ct_model_set_grads_ready(d->model, on_grads_ready, d);
}

static ct_status ddp_finish_grads(ct_dist *dist, bool start_rest) {
    ct_ddp *d = dist->state;
    if (d->listening) ct_model_set_grads_ready(d->model, NULL, NULL);
    d->listening = false;
    d->frontier = 0;
    ct_status s = start_rest ? start_ready(d) : CT_OK;
    /* Every started request is waited for, even after a failure, so none is left in flight. */
    for (int b = 0; b < d->started; b++) {
        label_bucket(d, b);
        ct_status w = ct_comm_wait(d->comm, d->reqs[b]);
        if (s == CT_OK) s = w;
    }
    d->started = 0;
    return s;
}

const ct_dist_strategy ct_dist_ddp = {
    .size = sizeof(ct_dist_strategy),
    .name = "ddp",
    .create = ddp_create,
    .destroy = ddp_destroy,
    .broadcast_params = ct_dist_broadcast_from_rank0,
    .begin_step = ddp_begin_step,
    .finish_grads = ddp_finish_grads,
};
