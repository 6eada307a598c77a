/* ZeRO-1 (see zero.h): the partition of the flat buffers, the shard optimizer's staging memory, the
 * sharded step (reduce-scatter, scale, global norm and clipping, shard update, all-gather) and the
 * state gather / scatter that keep checkpoints independent of the world size.
 *
 * The collectives of the contract (dist/comm.h) take equal blocks per rank, while the flat buffer
 * has P elements that world need not divide; so blocks are staged: for each chunk of a shard, the
 * chunk of every rank's block is packed into the staging buffer (zero past P), reduce-scattered, and
 * the part inside this rank's shard copied back. The copies cost one pass over the gradients, small
 * beside the communication, and keep the staging memory bounded. */
#include "dist/zero.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ops/ops.h"
#include "optim/clip.h"

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static char *copy_text(const char *t) {
    size_t n = strlen(t) + 1;
    char *c = malloc(n);
    if (c) memcpy(c, t, n);
    return c;
}
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

ct_zero1_shard ct_zero1_partition(int64_t numel, int world_size, int rank) {
    CT_ASSERT(numel >= 0 && world_size >= 1 && rank >= 0 && rank < world_size);
    int64_t S = numel / world_size + (numel % world_size != 0);
    int64_t lo = min64((int64_t)rank * S, numel), hi = min64((int64_t)(rank + 1) * S, numel);
    return (ct_zero1_shard){.offset = lo, .count = hi - lo, .shard_size = S};
}

static size_t esize(const ct_optimizer *opt) { return ct_dtype_size(opt->params.dtype); }

/* The staging copies run where the buffers live (the flat buffers and the staging share a device;
 * the host's memcpy on the CPU): n bytes from src to dst, and n zero bytes at dst. */
static ct_status copy_on(ct_device d, void *dst, const void *src, size_t n) {
    return n ? ct_device_copy(dst, d, src, d, n) : CT_OK;
}

/* Elements per rank block in one staged collective: the staging holds world blocks plus one. */
static int64_t chunk_of(const ct_optimizer *opt, int world, int64_t S) {
    int64_t k = opt->scratch.data ? ct_tensor_numel(&opt->scratch) / (world + 1) : 0;
    return min64(k, S);
}

ct_status ct_zero1_create_staged(const ct_optim_config *cfg, ct_param_store *ps, const ct_comm *c,
                                 int64_t staging_bytes, ct_optimizer **out) {
    *out = NULL;
    if (staging_bytes < 1)
        return ct_error(CT_ERR_INVALID_ARG, "zero1: staging of %lld bytes (must be >= 1)", (long long)staging_bytes);
    if (!ps->finalized)
        return ct_error(CT_ERR_STATE, "zero1: the parameter store is not finalized (build the model first)");
    ct_zero1_shard sh = ct_zero1_partition(ct_tensor_numel(&ps->values), c->world_size, c->rank);
    ct_status s = ct_optimizer_create_shard(cfg, ps, sh.offset, sh.count, out);
    if (s != CT_OK) return ct_error_prefix(s, "zero1 (rank %d/%d): ", c->rank, c->world_size);
    int64_t per = c->world_size + 1;
    int64_t k = max64(1, staging_bytes / (int64_t)ct_dtype_size(ps->dtype) / per);
    int64_t n = per * min64(k, sh.shard_size);
    s = ct_tensor_alloc(&(*out)->scratch, ps->dtype, ps->device, 1, &n);
    if (s != CT_OK) {
        ct_optimizer_destroy(*out);
        *out = NULL;
        return ct_error_prefix(s, "zero1 (rank %d/%d): staging: ", c->rank, c->world_size);
    }
    return CT_OK;
}

ct_status ct_zero1_create(const ct_optim_config *cfg, ct_param_store *ps, const ct_comm *c, ct_optimizer **out) {
    return ct_zero1_create_staged(cfg, ps, c, CT_ZERO1_STAGING_BYTES, out);
}

/* The shard optimizer belongs to this rank of this world (same partition) and has its staging. */
static ct_status check_shard(const ct_optimizer *opt, const ct_comm *c, ct_zero1_shard *sh) {
    *sh = ct_zero1_partition(opt->full_numel, c->world_size, c->rank);
    int64_t count = ct_tensor_numel(&opt->params);
    if (opt->shard_offset != sh->offset || count != sh->count)
        return ct_error(CT_ERR_STATE,
                        "optimizer '%s' holds elements [%lld, %lld) of %lld, but rank %d of %d owns [%lld, %lld) "
                        "(created for another rank or world size?)",
                        ct_optimizer_name(opt), (long long)opt->shard_offset, (long long)(opt->shard_offset + count),
                        (long long)opt->full_numel, c->rank, c->world_size, (long long)sh->offset,
                        (long long)(sh->offset + sh->count));
    if (sh->shard_size > 0 && chunk_of(opt, c->world_size, sh->shard_size) < 1)
        return ct_error(CT_ERR_STATE, "optimizer '%s' has no ZeRO-1 staging memory (create it with ct_zero1_create)",
                        ct_optimizer_name(opt));
    return CT_OK;
}

/* `flat` is the full buffer whose shard `view` (params or grads of the shard optimizer) is. */
static ct_status check_flat(const ct_optimizer *opt, const ct_tensor *view, const ct_tensor *flat, const char *what) {
    char a[128];
    if (flat->dtype != view->dtype || flat->device.kind != view->device.kind ||
        ct_tensor_numel(flat) != opt->full_numel)
        return ct_error(CT_ERR_INVALID_ARG,
                        "%s %s: expected the %lld-element %s flat buffer the optimizer was built on", what,
                        ct_tensor_str(flat, a, sizeof a), (long long)opt->full_numel, ct_dtype_name(view->dtype));
    if (ct_tensor_numel(view) > 0 && (char *)view->data != (char *)flat->data + (size_t)opt->shard_offset * esize(opt))
        return ct_error(CT_ERR_INVALID_ARG, "%s is not the flat buffer the optimizer's shard lies in", what);
    return CT_OK;
}

/* --- the step --------------------------------------------------------------------------------- */

/* Gradient sums of every rank, reduced into this rank's shard of grads. */
static ct_status reduce_scatter_grads(ct_optimizer *opt, ct_comm *c, ct_tensor *grads, const ct_zero1_shard *sh) {
    int W = c->world_size;
    int64_t P = opt->full_numel, S = sh->shard_size, k = chunk_of(opt, W, S);
    size_t es = esize(opt);
    char *g = grads->data, *stage = opt->scratch.data, *recv = stage + (size_t)(W * k) * es;
    ct_device dev = grads->device;
    for (int64_t t = 0; t < S; t += k) {
        int64_t len = min64(k, S - t);
        for (int r = 0; r < W; r++) {
            int64_t src = (int64_t)r * S + t, avail = max64(0, min64(len, P - src));
            char *dst = stage + (size_t)(r * len) * es;
            if (avail > 0) CT_TRY(copy_on(dev, dst, g + (size_t)src * es, (size_t)avail * es));
            if (avail < len) ct_device_zero(dev, dst + (size_t)avail * es, (size_t)(len - avail) * es);
        }
        int64_t n_in = W * len;
        ct_tensor in = ct_tensor_view(stage, grads->dtype, grads->device, 1, &n_in);
        ct_tensor out = ct_tensor_view(recv, grads->dtype, grads->device, 1, &len);
        ct_comm_set_label(c, "ZeRO-1 gradient reduce-scatter (elements %lld of %lld per shard)", (long long)t,
                          (long long)S);
        CT_TRY(ct_comm_reduce_scatter(c, &in, &out, CT_SUM));
        int64_t mine = max64(0, min64(len, sh->count - t));
        if (mine > 0) CT_TRY(copy_on(dev, g + (size_t)(sh->offset + t) * es, recv, (size_t)mine * es));
    }
    return CT_OK;
}

/* Every rank's parameter shard into every rank's full buffer: in place when world divides P (this
 * rank's shard is its own block of the buffer), staged otherwise. */
static ct_status all_gather_params(ct_optimizer *opt, ct_comm *c, ct_tensor *params, const ct_zero1_shard *sh) {
    int W = c->world_size;
    int64_t P = opt->full_numel, S = sh->shard_size;
    if (S == 0) return CT_OK;
    size_t es = esize(opt);
    char *p = params->data;
    if (S * W == P) {
        ct_tensor in = ct_tensor_view(p + (size_t)sh->offset * es, params->dtype, params->device, 1, &S);
        ct_comm_set_label(c, "ZeRO-1 parameter all-gather");
        return ct_comm_all_gather(c, &in, params);
    }
    int64_t k = chunk_of(opt, W, S);
    char *stage = opt->scratch.data, *send = stage + (size_t)(W * k) * es;
    ct_device dev = params->device;
    for (int64_t t = 0; t < S; t += k) {
        int64_t len = min64(k, S - t), mine = max64(0, min64(len, sh->count - t));
        if (mine > 0) CT_TRY(copy_on(dev, send, p + (size_t)(sh->offset + t) * es, (size_t)mine * es));
        if (mine < len) ct_device_zero(dev, send + (size_t)mine * es, (size_t)(len - mine) * es);
        int64_t n_out = W * len;
        ct_tensor in = ct_tensor_view(send, params->dtype, params->device, 1, &len);
        ct_tensor out = ct_tensor_view(stage, params->dtype, params->device, 1, &n_out);
        ct_comm_set_label(c, "ZeRO-1 parameter all-gather (elements %lld of %lld per shard)", (long long)t,
                          (long long)S);
        CT_TRY(ct_comm_all_gather(c, &in, &out));
        for (int r = 0; r < W; r++) {
            if (r == c->rank) continue; /* already there */
            int64_t dst = (int64_t)r * S + t, avail = max64(0, min64(len, P - dst));
            if (avail > 0) CT_TRY(copy_on(dev, p + (size_t)dst * es, stage + (size_t)(r * len) * es, (size_t)avail * es));
        }
    }
    return CT_OK;
}

static double max_abs(const ct_tensor *t) {
    int64_t n = ct_tensor_numel(t);
    double best = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs(t->dtype == CT_F32 ? (double)((const float *)t->data)[i] : ((const double *)t->data)[i]);
        if (e > best) best = e;
    }
    return best;
}

static double sum_squares_scaled(const ct_tensor *t, double inv) {
    int64_t n = ct_tensor_numel(t);
    double acc = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = (t->dtype == CT_F32 ? (double)((const float *)t->data)[i] : ((const double *)t->data)[i]) * inv;
        acc += e * e;
    }
    return acc;
}

/* The L2 norm of the gradients of all shards together, the same on every rank. Like ct_op_l2_norm,
 * squares that overflow float64 although every element is finite are summed again scaled by the
 * largest magnitude (every rank takes the same branch: the sums it tests are all-reduced). */
static ct_status global_norm(ct_comm *c, const ct_tensor *g, double *norm) {
    double ss = ct_op_sum_squares_det(g);
    ct_comm_set_label(c, "ZeRO-1 gradient norm");
    CT_TRY(ct_comm_all_reduce_f64(c, &ss, 1, CT_SUM));
    if (!isinf(ss)) {
        *norm = sqrt(ss); /* NaN stays NaN */
        return CT_OK;
    }
    /* Rare (a norm beyond float64): the shard is read on the host. */
    ct_tensor h = {0};
    CT_TRY(ct_tensor_alloc(&h, g->dtype, CT_CPU, g->ndim, g->shape));
    ct_status s = ct_tensor_copy_to(&h, g);
    double big = s == CT_OK ? max_abs(&h) : 0;
    ct_comm_set_label(c, "ZeRO-1 gradient norm (largest magnitude)");
    if (s == CT_OK) s = ct_comm_all_reduce_f64(c, &big, 1, CT_MAX);
    if (s != CT_OK || isinf(big)) {
        ct_tensor_free(&h);
        *norm = INFINITY;
        return s;
    }
    ss = sum_squares_scaled(&h, 1.0 / big);
    ct_tensor_free(&h);
    ct_comm_set_label(c, "ZeRO-1 gradient norm (rescaled)");
    CT_TRY(ct_comm_all_reduce_f64(c, &ss, 1, CT_SUM));
    *norm = big * sqrt(ss);
    return CT_OK;
}

ct_status ct_zero1_step(ct_optimizer *opt, ct_comm *c, ct_tensor *grads, ct_tensor *params, double lr,
                        double grad_scale, double max_grad_norm, double *grad_norm) {
    CT_ASSERT(opt && c && grads && params);
    ct_zero1_shard sh;
    ct_status s = check_shard(opt, c, &sh);
    if (s == CT_OK) s = check_flat(opt, &opt->grads, grads, "grads");
    if (s == CT_OK) s = check_flat(opt, &opt->params, params, "params");
    if (s == CT_OK && !(lr >= 0 && isfinite(lr)))
        s = ct_error(CT_ERR_INVALID_ARG, "learning rate %g (must be finite and >= 0)", lr);
    if (s == CT_OK && !(grad_scale > 0 && isfinite(grad_scale)))
        s = ct_error(CT_ERR_INVALID_ARG, "grad_scale %g (must be finite and > 0)", grad_scale);
    if (s == CT_OK) s = reduce_scatter_grads(opt, c, grads, &sh);
    /* opt->grads is this rank's shard of grads, now the reduced sums. */
    if (s == CT_OK && grad_scale != 1.0) ct_op_scale(&opt->grads, grad_scale);
    double norm = NAN;
    if (s == CT_OK && (max_grad_norm > 0 || grad_norm)) {
        s = global_norm(c, &opt->grads, &norm);
        if (s == CT_OK && grad_norm) *grad_norm = norm;
        /* The same norm everywhere, so every rank scales alike or fails alike. */
        if (s == CT_OK) s = ct_clip_grad_norm_apply(&opt->grads, max_grad_norm, norm);
    }
    if (s == CT_OK) s = ct_optimizer_step(opt, lr);
    if (s == CT_OK) s = all_gather_params(opt, c, params, &sh);
    if (s != CT_OK)
        return ct_error_prefix(s, "zero1 step %lld (rank %d/%d): ", (long long)opt->step + 1, c->rank, c->world_size);
    return CT_OK;
}

/* --- state for checkpoints ------------------------------------------------------------------------ */

ct_status ct_zero1_agree(ct_comm *c, int root, ct_status s, const char *what) {
    CT_ASSERT(c && what);
    int64_t code = (int64_t)s, one = 1;
    /* Keep root's message: the broadcast must not be what a failed save reports. */
    char *msg = s != CT_OK ? copy_text(ct_last_error()) : NULL;
    ct_tensor t = ct_tensor_view(&code, CT_I64, CT_CPU, 1, &one);
    ct_comm_set_label(c, "%s: rank %d's outcome", what, root);
    ct_status bs = ct_comm_broadcast(c, &t, root);
    ct_status r;
    if (bs != CT_OK)
        r = ct_error_prefix(bs, "%s: ", what);
    else if (c->rank == root)
        r = s == CT_OK ? CT_OK : ct_error(s, "%s", msg ? msg : "");
    else
        r = code == CT_OK ? CT_OK : ct_error((ct_status)code, "%s failed on rank %d: see its log", what, root);
    free(msg);
    return r;
}

/* A state-only optimizer: the base with state tensors and no step. Its ops table lives inside it so
 * that it carries the shard optimizer's name (what optimizer.h5 records and checks). */
typedef struct full_state {
    ct_optimizer base;
    ct_optimizer_ops ops;
    char name[32];
} full_state;

static ct_status full_state_step(ct_optimizer *opt, double lr) {
    return ct_error(CT_ERR_UNSUPPORTED, "a state-only copy of optimizer '%s' (ZeRO-1 checkpoint) cannot step",
                    opt->ops->name);
}

/* The state-only optimizer with names and no state tensors yet (n_state 0). */
static ct_status full_state_new(ct_optimizer *shard, full_state **out) {
    *out = NULL;
    full_state *fs = calloc(1, sizeof *fs);
    if (!fs) return ct_error(CT_ERR_NOMEM, "optimizer '%s': out of memory", ct_optimizer_name(shard));
    snprintf(fs->name, sizeof fs->name, "%s", ct_optimizer_name(shard));
    fs->ops = (ct_optimizer_ops){.size = sizeof(ct_optimizer_ops), .name = fs->name, .step = full_state_step};
    ct_optimizer *b = &fs->base;
    b->ops = &fs->ops;
    b->config = shard->config;
    b->step = shard->step;
    b->last_lr = shard->last_lr;
    /* The whole flat buffers the shard lies in, so the copy looks like the unsharded optimizer. */
    int64_t n = shard->full_numel;
    size_t off = (size_t)shard->shard_offset * esize(shard);
    bool have = shard->params.data != NULL;
    b->params = ct_tensor_view(have ? (char *)shard->params.data - off : NULL, shard->params.dtype,
                               shard->params.device, 1, have ? &n : &(int64_t){0});
    b->grads = ct_tensor_view(have ? (char *)shard->grads.data - off : NULL, shard->grads.dtype, shard->grads.device,
                              1, have ? &n : &(int64_t){0});
    b->full_numel = n;
    *out = fs;
    return CT_OK;
}

static void set_state_name(ct_optim_state *st, const char *name) { snprintf(st->name, sizeof st->name, "%s", name); }

ct_status ct_zero1_full_state_create(ct_optimizer *shard, ct_optimizer **out) {
    *out = NULL;
    full_state *fs;
    CT_TRY(full_state_new(shard, &fs));
    int n = ct_optimizer_state_count(shard);
    ct_status s = n <= CT_OPTIM_MAX_STATE ? CT_OK
                                          : ct_error(CT_ERR_STATE, "optimizer '%s' has %d state tensors (at most %d)",
                                                     ct_optimizer_name(shard), n, CT_OPTIM_MAX_STATE);
    for (int i = 0; s == CT_OK && i < n; i++) {
        const char *name;
        ct_tensor *t;
        s = ct_optimizer_state_get(shard, i, &name, &t);
        if (s == CT_OK) s = ct_tensor_alloc(&fs->base.state[i].tensor, t->dtype, t->device, 1, &shard->full_numel);
        if (s != CT_OK) break;
        set_state_name(&fs->base.state[i], name);
        fs->base.n_state = i + 1;
    }
    if (s != CT_OK) {
        ct_optimizer_destroy(&fs->base);
        return ct_error_prefix(s, "zero1 full state: ");
    }
    *out = &fs->base;
    return CT_OK;
}

ct_status ct_zero1_gather_state(ct_optimizer *shard, ct_comm *c, int root, ct_optimizer **full) {
    CT_ASSERT(shard && c && full);
    *full = NULL;
    if (root < 0 || root >= c->world_size)
        return ct_error(CT_ERR_INVALID_ARG, "zero1 gather state: root %d outside [0, %d)", root, c->world_size);
    int n = ct_optimizer_state_count(shard);
    CT_ASSERT(n >= 0 && n <= CT_OPTIM_MAX_STATE);
    full_state *fs = NULL;
    ct_status s = c->rank == root ? full_state_new(shard, &fs) : CT_OK;
    /* Root could not even start: nobody enters the gathers. */
    CT_TRY(ct_zero1_agree(c, root, s, "zero1 gather state"));
    /* Every rank takes part in every gather even after a local failure, so none is left waiting. */
    for (int i = 0; i < n; i++) {
        const char *name;
        ct_tensor *t, got;
        ct_status si = ct_optimizer_state_get(shard, i, &name, &t);
        if (si == CT_OK) ct_comm_set_label(c, "ZeRO-1 optimizer state '%s' to rank %d", name, root);
        if (si == CT_OK) si = ct_comm_gather_v(c, t, root, &got);
        if (si == CT_OK && fs && s == CT_OK) {
            fs->base.state[i].tensor = got;
            set_state_name(&fs->base.state[i], name);
            fs->base.n_state = i + 1;
            if (ct_tensor_numel(&got) != shard->full_numel) /* stores that differ between ranks */
                si = ct_error(CT_ERR_STATE, "state '%s' gathered to %lld elements, the parameters have %lld", name,
                              (long long)ct_tensor_numel(&got), (long long)shard->full_numel);
            else if (!got.data) /* nothing to gather: a model without parameters */
                si = ct_tensor_alloc(&fs->base.state[i].tensor, t->dtype, t->device, 1, &(int64_t){0});
        } else if (si == CT_OK && got.data) {
            ct_tensor_free(&got);
        }
        if (s == CT_OK) s = si;
    }
    if (s != CT_OK) {
        if (fs) ct_optimizer_destroy(&fs->base);
        return ct_error_prefix(s, "zero1 gather state (rank %d/%d): ", c->rank, c->world_size);
    }
    if (fs) *full = &fs->base;
    return CT_OK;
}

/* On root: full has every state tensor of the shard, full-sized and of the same dtype. */
static ct_status check_full(ct_optimizer *shard, ct_optimizer *full) {
    if (!full) return ct_error(CT_ERR_INVALID_ARG, "no full state given on the root rank");
    int n = ct_optimizer_state_count(shard);
    for (int i = 0; i < n; i++) {
        const char *name;
        ct_tensor *t;
        CT_TRY(ct_optimizer_state_get(shard, i, &name, &t));
        ct_tensor *src = ct_optimizer_state_find(full, name);
        if (!src)
            return ct_error(CT_ERR_CONFIG, "the full state (optimizer '%s') has no state tensor '%s'",
                            ct_optimizer_name(full), name);
        if (src->dtype != t->dtype || ct_tensor_numel(src) != shard->full_numel)
            return ct_error(CT_ERR_CONFIG, "state tensor '%s' is %lld x %s, expected %lld x %s", name,
                            (long long)ct_tensor_numel(src), ct_dtype_name(src->dtype), (long long)shard->full_numel,
                            ct_dtype_name(t->dtype));
    }
    if (ct_optimizer_step_count(full) < 0) return ct_error(CT_ERR_CONFIG, "negative step count");
    return CT_OK;
}

ct_status ct_zero1_scatter_state(ct_optimizer *shard, ct_comm *c, int root, ct_optimizer *full) {
    CT_ASSERT(shard && c);
    if (root < 0 || root >= c->world_size)
        return ct_error(CT_ERR_INVALID_ARG, "zero1 scatter state: root %d outside [0, %d)", root, c->world_size);
    ct_zero1_shard sh;
    ct_status s = check_shard(shard, c, &sh);
    if (s == CT_OK && c->rank == root) s = check_full(shard, full);
    /* A bad shard elsewhere shows up in the agreement too: every rank must know before anything moves. */
    int64_t bad = s != CT_OK;
    char *msg = bad ? copy_text(ct_last_error()) : NULL;
    ct_comm_set_label(c, "ZeRO-1 optimizer state from rank %d: agreement that it fits", root);
    ct_status rs = ct_comm_all_reduce_i64(c, &bad, 1, CT_MAX);
    if (rs == CT_OK && bad) {
        rs = s != CT_OK ? ct_error(s, "%s", msg ? msg : "")
                        : ct_error(CT_ERR_CONFIG, "the full state does not fit on another rank: see its log");
    }
    free(msg);
    if (rs != CT_OK) return ct_error_prefix(rs, "zero1 scatter state (rank %d/%d): ", c->rank, c->world_size);

    int64_t step = c->rank == root ? ct_optimizer_step_count(full) : 0, one = 1;
    ct_tensor st = ct_tensor_view(&step, CT_I64, CT_CPU, 1, &one);
    ct_comm_set_label(c, "ZeRO-1 optimizer step count from rank %d", root);
    s = ct_comm_broadcast(c, &st, root);
    /* Chunks of the whole staging buffer travel from root; each rank keeps what falls in its shard. */
    int64_t P = shard->full_numel, L = shard->scratch.data ? ct_tensor_numel(&shard->scratch) : 0;
    size_t es = esize(shard);
    CT_ASSERT(L > 0 || P == 0); /* check_shard saw the staging */
    int n = ct_optimizer_state_count(shard);
    for (int i = 0; s == CT_OK && i < n; i++) {
        const char *name;
        ct_tensor *t;
        s = ct_optimizer_state_get(shard, i, &name, &t);
        const ct_tensor *src = s == CT_OK && c->rank == root ? ct_optimizer_state_find(full, name) : NULL;
        for (int64_t at = 0; s == CT_OK && at < P; at += L) {
            int64_t len = min64(L, P - at);
            ct_device dev = shard->scratch.device;
            if (src)
                s = ct_device_copy(shard->scratch.data, dev, (const char *)src->data + (size_t)at * es, src->device,
                                   (size_t)len * es);
            ct_tensor chunk = ct_tensor_view(shard->scratch.data, t->dtype, dev, 1, &len);
            if (s == CT_OK) {
                ct_comm_set_label(c, "ZeRO-1 optimizer state '%s' from rank %d (elements %lld to %lld)", name, root,
                                  (long long)at, (long long)(at + len));
                s = ct_comm_broadcast(c, &chunk, root);
            }
            int64_t lo = max64(at, sh.offset), hi = min64(at + len, sh.offset + sh.count);
            if (s == CT_OK && hi > lo)
                s = ct_device_copy((char *)t->data + (size_t)(lo - sh.offset) * es, t->device,
                                   (const char *)shard->scratch.data + (size_t)(lo - at) * es, dev,
                                   (size_t)(hi - lo) * es);
        }
    }
    if (s == CT_OK) s = ct_optimizer_set_step_count(shard, step);
    if (s != CT_OK) return ct_error_prefix(s, "zero1 scatter state (rank %d/%d): ", c->rank, c->world_size);
    return CT_OK;
}
