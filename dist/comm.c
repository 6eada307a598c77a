/* The communicator wrappers (the single place every collective is validated and its errors get
 * "<collective> (rank R/W): "), the helpers over them (metric-state all-reduces, the cross-rank
 * config check) and ct_comm_create_default, which decides from the launcher's environment whether
 * this process is one rank of several (MPI) or alone (single). See comm.h. */
#include "dist/comm.h"

#include "core/log.h"
#include "core/ops/backend.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A member is usable when the table is recent enough to have it and it is set. */
#define HAS_OP(c, member)                                                                                            \
    ((c)->ops->size >= offsetof(ct_comm_ops, member) + sizeof((c)->ops->member) && (c)->ops->member)

static const char *comm_name(const ct_comm *c) { return HAS_OP(c, name) ? c->ops->name : "custom"; }

/* Every wrapper ends here: the label set for this call is used up, and an error is prefixed with it
 * (what the caller was doing) and the collective. */
static ct_status named(ct_comm *c, const char *collective, ct_status s) {
    char label[sizeof c->label];
    memcpy(label, c->label, sizeof label);
    c->label[0] = 0;
    if (s == CT_OK) return s;
    if (label[0]) return ct_error_prefix(s, "%s (%s, rank %d/%d): ", label, collective, c->rank, c->world_size);
    return ct_error_prefix(s, "%s (rank %d/%d): ", collective, c->rank, c->world_size);
}

void ct_comm_set_label(ct_comm *c, const char *fmt, ...) {
    CT_ASSERT(c && fmt);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->label, sizeof c->label, fmt, ap);
    va_end(ap);
}

static ct_status unsupported(ct_comm *c, const char *collective) {
    return named(c, collective,
                 ct_error(CT_ERR_UNSUPPORTED, "not supported by the '%s' communicator", comm_name(c)));
}

/* Reductions run on the dtypes every backend can add: f32 (gradients), f64 and i64 (metric states). */
static ct_status check_reducible(const ct_tensor *t, const char *what) {
    char buf[128];
    if (t->dtype != CT_F32 && t->dtype != CT_F64 && t->dtype != CT_I64)
        return ct_error(CT_ERR_DTYPE, "%s %s: reductions take f32, f64 or i64", what, ct_tensor_str(t, buf, sizeof buf));
    return CT_OK;
}

static ct_status check_op(ct_reduce op) {
    if (op != CT_SUM && op != CT_MIN && op != CT_MAX)
        return ct_error(CT_ERR_INVALID_ARG, "unknown reduction %d (expected CT_SUM, CT_MIN or CT_MAX)", (int)op);
    return CT_OK;
}

/* Memory behind a tensor of numel > 0 must exist; an empty tensor may have none. */
static ct_status check_data(const ct_tensor *t, const char *what) {
    char buf[128];
    if (t->ndim < 0 || t->ndim > CT_MAX_DIMS)
        return ct_error(CT_ERR_SHAPE, "%s has %d dimensions (at most %d)", what, t->ndim, CT_MAX_DIMS);
    for (int i = 0; i < t->ndim; i++)
        if (t->shape[i] < 0) return ct_error(CT_ERR_SHAPE, "%s has a negative dimension", what);
    if (!t->data && ct_tensor_numel(t) > 0)
        return ct_error(CT_ERR_INVALID_ARG, "%s %s has no memory", what, ct_tensor_str(t, buf, sizeof buf));
    return CT_OK;
}

static ct_status check_root(const ct_comm *c, int root) {
    if (root < 0 || root >= c->world_size)
        return ct_error(CT_ERR_INVALID_ARG, "root %d outside [0, %d) (world size %d)", root, c->world_size,
                        c->world_size);
    return CT_OK;
}

static bool overlap(const ct_tensor *a, const ct_tensor *b) {
    const char *pa = a->data, *pb = b->data;
    size_t na = ct_tensor_nbytes(a), nb = ct_tensor_nbytes(b);
    return na && nb && pa < pb + nb && pb < pa + na;
}

/* --- host staging ------------------------------------------------------------------------------ */

/* Whether c's collectives take t's memory themselves: host memory always, a device's when the
 * communicator says so (NCCL: CUDA memory). Otherwise the wrappers stage: the collective runs on a
 * host copy, and what it wrote is copied back; a GPU job without NCCL (MPI alone) trains correctly,
 * at the cost of the copies and of overlapping nothing. */
static bool takes(const ct_comm *c, const ct_tensor *t) {
    return t->device.kind == CT_DEVICE_CPU ||
           (HAS_OP(c, device_kinds) && (c->ops->device_kinds & (1u << (unsigned)t->device.kind)));
}

/* A host tensor holding t's values (empty for an empty t). */
static ct_status stage_in(const ct_tensor *t, ct_tensor *host) {
    *host = ct_tensor_view(NULL, t->dtype, CT_CPU, t->ndim, t->shape);
    if (ct_tensor_numel(t) == 0) return CT_OK;
    CT_TRY(ct_tensor_alloc(host, t->dtype, CT_CPU, t->ndim, t->shape));
    ct_status s = ct_tensor_copy_to(host, t);
    if (s != CT_OK) ct_tensor_free(host);
    return s;
}

/* After the collective (status s) on host: its values back into t (when it succeeded), host freed. */
static ct_status stage_out(ct_tensor *t, ct_tensor *host, ct_status s) {
    if (s == CT_OK && host->data) s = ct_tensor_copy_to(t, host);
    if (host->data) ct_tensor_free(host);
    return s;
}

static ct_status staged_all_reduce(ct_comm *c, ct_tensor *t, ct_reduce op) {
    if (takes(c, t)) return c->ops->all_reduce(c, t, op);
    ct_tensor h;
    CT_TRY(stage_in(t, &h));
    return stage_out(t, &h, c->ops->all_reduce(c, &h, op));
}

static ct_status staged_broadcast(ct_comm *c, ct_tensor *t, int root) {
    if (takes(c, t)) return c->ops->broadcast(c, t, root);
    ct_tensor h;
    CT_TRY(stage_in(t, &h));
    return stage_out(t, &h, c->ops->broadcast(c, &h, root));
}

/* `in` is either this rank's block of `out` (then it is staged as that block of out's copy) or apart. */
static ct_status staged_all_gather(ct_comm *c, const ct_tensor *in, ct_tensor *out) {
    if (takes(c, in) && takes(c, out)) return c->ops->all_gather(c, in, out);
    ct_tensor ho, hi = {0};
    CT_TRY(stage_in(out, &ho));
    bool own_block = overlap(in, out);
    ct_status s = CT_OK;
    if (own_block) {
        size_t at = (size_t)((char *)in->data - (char *)out->data);
        hi = ct_tensor_view((char *)ho.data + at, in->dtype, CT_CPU, in->ndim, in->shape);
    } else {
        s = stage_in(in, &hi);
    }
    if (s == CT_OK) s = c->ops->all_gather(c, &hi, &ho);
    if (!own_block && hi.data) ct_tensor_free(&hi);
    return stage_out(out, &ho, s);
}

static ct_status staged_reduce_scatter(ct_comm *c, const ct_tensor *in, ct_tensor *out, ct_reduce op) {
    if (takes(c, in) && takes(c, out)) return c->ops->reduce_scatter(c, in, out, op);
    ct_tensor hi, ho;
    CT_TRY(stage_in(in, &hi));
    ct_status s = stage_in(out, &ho);
    if (s == CT_OK) s = stage_out(out, &ho, c->ops->reduce_scatter(c, &hi, &ho, op));
    if (hi.data) ct_tensor_free(&hi);
    return s;
}

/* A staged all_reduce_start has finished when it returns: its request is this marker, which
 * ct_comm_wait answers at once. */
static char staged_done;
#define STAGED_DONE ((ct_comm_request *)&staged_done)

ct_status ct_comm_all_reduce(ct_comm *c, ct_tensor *t, ct_reduce op) {
    CT_ASSERT(c && c->ops && t);
    if (!HAS_OP(c, all_reduce)) return unsupported(c, "all_reduce");
    ct_status s = check_reducible(t, "tensor");
    if (s == CT_OK) s = check_op(op);
    if (s == CT_OK) s = check_data(t, "tensor");
    if (s == CT_OK) s = staged_all_reduce(c, t, op);
    return named(c, "all_reduce", s);
}

ct_status ct_comm_all_reduce_start(ct_comm *c, ct_tensor *t, ct_reduce op, ct_comm_request **req) {
    CT_ASSERT(c && c->ops && t && req);
    *req = NULL;
    if (!HAS_OP(c, all_reduce_start) || !HAS_OP(c, wait)) return unsupported(c, "all_reduce_start");
    ct_status s = check_reducible(t, "tensor");
    if (s == CT_OK) s = check_op(op);
    if (s == CT_OK) s = check_data(t, "tensor");
    if (s == CT_OK && !takes(c, t)) {
        s = staged_all_reduce(c, t, op);
        if (s == CT_OK) *req = STAGED_DONE;
    } else if (s == CT_OK) {
        s = c->ops->all_reduce_start(c, t, op, req);
    }
    if (s != CT_OK) *req = NULL;
    return named(c, "all_reduce_start", s);
}

ct_status ct_comm_wait(ct_comm *c, ct_comm_request *req) {
    CT_ASSERT(c && c->ops && req); /* a request comes from a successful start and is waited once */
    if (req == STAGED_DONE) return named(c, "all_reduce", CT_OK);
    if (!HAS_OP(c, wait)) return unsupported(c, "all_reduce");
    /* The collective being waited for is the all-reduce (the only non-blocking one). */
    return named(c, "all_reduce", c->ops->wait(c, req));
}

ct_status ct_comm_broadcast(ct_comm *c, ct_tensor *t, int root) {
    CT_ASSERT(c && c->ops && t);
    if (!HAS_OP(c, broadcast)) return unsupported(c, "broadcast");
    ct_status s = check_root(c, root);
    if (s == CT_OK) s = check_data(t, "tensor");
    if (s == CT_OK) s = staged_broadcast(c, t, root);
    return named(c, "broadcast", s);
}

ct_status ct_comm_all_gather(ct_comm *c, const ct_tensor *in, ct_tensor *out) {
    CT_ASSERT(c && c->ops && in && out);
    if (!HAS_OP(c, all_gather)) return unsupported(c, "all_gather");
    char a[128], b[128];
    ct_status s = check_data(in, "in");
    if (s == CT_OK) s = check_data(out, "out");
    if (s == CT_OK && in->dtype != out->dtype)
        s = ct_error(CT_ERR_DTYPE, "in %s and out %s differ in dtype", ct_tensor_str(in, a, sizeof a),
                     ct_tensor_str(out, b, sizeof b));
    int64_t n = ct_tensor_numel(in);
    if (s == CT_OK && ct_tensor_numel(out) != c->world_size * n)
        s = ct_error(CT_ERR_SHAPE, "out %s has %lld elements, expected world size %d x in %s = %lld",
                     ct_tensor_str(out, b, sizeof b), (long long)ct_tensor_numel(out), c->world_size,
                     ct_tensor_str(in, a, sizeof a), (long long)(c->world_size * n));
    /* `in` may be this rank's own block of `out` (ZeRO-1 gathers parameter shards in place); any
     * other overlap would be read while it is written. */
    if (s == CT_OK && overlap(in, out) &&
        (char *)in->data != (char *)out->data + (size_t)(c->rank * n) * ct_dtype_size(in->dtype))
        s = ct_error(CT_ERR_INVALID_ARG, "in overlaps out other than as this rank's block %d of out", c->rank);
    if (s == CT_OK) s = staged_all_gather(c, in, out);
    return named(c, "all_gather", s);
}

ct_status ct_comm_gather_v_total(const int64_t *info, int world, int root, int64_t *total) {
    *total = 0;
    for (int q = 0; q < world; q++) {
        if (info[2 * q + 1] != info[2 * root + 1])
            return ct_error(CT_ERR_DTYPE, "rank %d sends %s but the root (rank %d) %s", q,
                            ct_dtype_name((ct_dtype)info[2 * q + 1]), root,
                            ct_dtype_name((ct_dtype)info[2 * root + 1]));
        *total += info[2 * q];
    }
    return CT_OK;
}

ct_status ct_comm_gather_v(ct_comm *c, const ct_tensor *in, int root, ct_tensor *out) {
    CT_ASSERT(c && c->ops && in && out);
    int64_t zero = 0;
    *out = ct_tensor_view(NULL, in->dtype, in->device, 1, &zero);
    if (!HAS_OP(c, gather_v)) return unsupported(c, "gather_v");
    ct_status s = check_root(c, root);
    if (s == CT_OK) s = check_data(in, "in");
    if (s == CT_OK) s = c->ops->gather_v(c, in, root, out);
    if (s != CT_OK) {
        if (out->data) ct_tensor_free(out);
        *out = ct_tensor_view(NULL, in->dtype, in->device, 1, &zero);
    }
    return named(c, "gather_v", s);
}

ct_status ct_comm_reduce_scatter(ct_comm *c, const ct_tensor *in, ct_tensor *out, ct_reduce op) {
    CT_ASSERT(c && c->ops && in && out);
    if (!HAS_OP(c, reduce_scatter)) return unsupported(c, "reduce_scatter");
    char a[128], b[128];
    ct_status s = check_reducible(in, "in");
    if (s == CT_OK) s = check_op(op);
    if (s == CT_OK) s = check_data(in, "in");
    if (s == CT_OK) s = check_data(out, "out");
    if (s == CT_OK && in->dtype != out->dtype)
        s = ct_error(CT_ERR_DTYPE, "in %s and out %s differ in dtype", ct_tensor_str(in, a, sizeof a),
                     ct_tensor_str(out, b, sizeof b));
    int64_t n = ct_tensor_numel(out);
    if (s == CT_OK && ct_tensor_numel(in) != c->world_size * n)
        s = ct_error(CT_ERR_SHAPE, "in %s has %lld elements, expected world size %d x out %s = %lld",
                     ct_tensor_str(in, a, sizeof a), (long long)ct_tensor_numel(in), c->world_size,
                     ct_tensor_str(out, b, sizeof b), (long long)(c->world_size * n));
    if (s == CT_OK && overlap(in, out)) s = ct_error(CT_ERR_INVALID_ARG, "in and out overlap");
    if (s == CT_OK) s = staged_reduce_scatter(c, in, out, op);
    return named(c, "reduce_scatter", s);
}

ct_status ct_comm_barrier(ct_comm *c) {
    CT_ASSERT(c && c->ops);
    if (!HAS_OP(c, barrier)) return unsupported(c, "barrier");
    return named(c, "barrier", c->ops->barrier(c));
}

void ct_comm_abort(ct_comm *c, int code) {
    /* What the rank printed last is usually why it aborts: get it out before the job dies. */
    fflush(NULL);
    if (c && c->ops && HAS_OP(c, abort)) c->ops->abort(c, code);
    exit(code); /* a backend without abort, or one whose abort came back */
}

void ct_comm_free(ct_comm *c) {
    if (!c) return;
    if (c->ops && HAS_OP(c, destroy)) c->ops->destroy(c);
}

/* --- helpers ------------------------------------------------------------------------------------- */

ct_status ct_comm_all_reduce_f64(ct_comm *c, double *v, int64_t n, ct_reduce op) {
    CT_ASSERT(c && n >= 0 && (v || n == 0));
    ct_tensor t = ct_tensor_view(v, CT_F64, CT_CPU, 1, &n);
    return ct_comm_all_reduce(c, &t, op);
}

ct_status ct_comm_all_reduce_i64(ct_comm *c, int64_t *v, int64_t n, ct_reduce op) {
    CT_ASSERT(c && n >= 0 && (v || n == 0));
    ct_tensor t = ct_tensor_view(v, CT_I64, CT_CPU, 1, &n);
    return ct_comm_all_reduce(c, &t, op);
}

ct_status ct_comm_check_same(ct_comm *c, uint64_t value, const char *what) {
    CT_ASSERT(c && what);
    int world = c->world_size;
    int64_t one = 1, all_n = world;
    int64_t *all = malloc((size_t)world * sizeof *all);
    if (!all) return named(c, "check_same", ct_error(CT_ERR_NOMEM, "cannot allocate %d values", world));
    int64_t mine = (int64_t)value;
    ct_tensor in = ct_tensor_view(&mine, CT_I64, CT_CPU, 1, &one);
    ct_tensor out = ct_tensor_view(all, CT_I64, CT_CPU, 1, &all_n);
    ct_comm_set_label(c, "check that every rank has the same %s", what);
    ct_status s = ct_comm_all_gather(c, &in, &out);
    if (s != CT_OK) {
        free(all);
        return s;
    }
    /* Every rank sees the same gathered values, so every rank reaches the same verdict and reports
     * the same ranks. */
    char list[768];
    size_t len = 0;
    int differ = 0;
    for (int r = 1; r < world; r++) {
        if (all[r] == all[0]) continue;
        if (differ < 8 && len < sizeof list)
            len += (size_t)snprintf(list + len, sizeof list - len, "%srank %d has %#llx", differ ? ", " : "", r,
                                    (unsigned long long)all[r]);
        differ++;
    }
    if (differ > 8 && len < sizeof list) snprintf(list + len, sizeof list - len, " and %d more", differ - 8);
    if (differ)
        s = named(c, "check_same",
                  ct_error(CT_ERR_CONFIG, "%s differs between ranks: rank 0 has %#llx, %s (%d of %d ranks differ)",
                           what, (unsigned long long)all[0], list, differ, world));
    free(all);
    return s;
}

/* --- main_process_first --------------------------------------------------------------------------- */

/* What a failed main process sends the others: its status (an int32 in the first 4 bytes) and its
 * message after it. */
#define FIRST_MSG_BYTES 2048

ct_status ct_comm_main_process_first(ct_comm *c, bool local, const char *desc, ct_status (*fn)(void *ctx),
                                     void *ctx) {
    CT_ASSERT(fn);
    if (!desc) desc = "main_process_first";
    if (!c || c->world_size <= 1) return fn(ctx);
    bool is_main = local ? c->local_rank == 0 : c->rank == 0;
    ct_status mine = CT_OK;
    char msg[FIRST_MSG_BYTES] = "";
    if (is_main) {
        mine = fn(ctx);
        /* The collectives below must not be able to replace the message this process returns. */
        if (mine != CT_OK) snprintf(msg, sizeof msg, "%s", ct_last_error());
    }
    /* rank + 1 of a failed main, 0 otherwise: the MAX names a failing main (the highest) or none.
     * The others wait here until every main has run. */
    int64_t failed = mine != CT_OK ? (int64_t)c->rank + 1 : 0;
    ct_comm_set_label(c, "%s: the main processes' outcome", desc);
    ct_status s = ct_comm_all_reduce_i64(c, &failed, 1, CT_MAX);
    if (s != CT_OK) return mine != CT_OK ? ct_error(mine, "%s", msg) : s;
    if (failed == 0) return is_main ? CT_OK : fn(ctx);

    /* A main failed: it sends its status and message, so every process reports the reason (and the
     * same exit code), whichever of them the job's end lets print. */
    int root = (int)(failed - 1);
    uint8_t buf[sizeof(int32_t) + FIRST_MSG_BYTES] = {0};
    if (c->rank == root) {
        int32_t st = (int32_t)mine;
        memcpy(buf, &st, sizeof st);
        snprintf((char *)buf + sizeof st, FIRST_MSG_BYTES, "%s", msg);
    }
    int64_t nbuf = (int64_t)sizeof buf;
    ct_tensor t = ct_tensor_view(buf, CT_U8, CT_CPU, 1, &nbuf);
    ct_comm_set_label(c, "%s: the failed main process's message", desc);
    s = ct_comm_broadcast(c, &t, root);
    if (mine != CT_OK) return ct_error(mine, "%s", msg);
    if (s != CT_OK)
        return ct_error(CT_ERR_STATE, "%s: the main process (rank %d) failed; see its message", desc, root);
    int32_t st;
    memcpy(&st, buf, sizeof st);
    buf[sizeof buf - 1] = '\0';
    ct_status theirs = st < 0 && st >= (int32_t)CT_ERR_INTERRUPTED ? (ct_status)st : CT_ERR_STATE;
    return ct_error(theirs, "%s: the main process (rank %d) failed: %s", desc, root, (const char *)buf + sizeof st);
}

/* --- choosing a communicator ---------------------------------------------------------------------- */

/* The first of the launcher's variables that is set to a number in [min, 2^30), else fallback. */
static int launcher_number(const char *const vars[3], int min, int fallback) {
    for (size_t i = 0; i < 3; i++) {
        const char *v = getenv(vars[i]);
        if (!v || !*v) continue;
        char *end;
        long n = strtol(v, &end, 10);
        if (*end == '\0' && n >= min && n < (1L << 30)) return (int)n;
    }
    return fallback;
}

/* OpenMPI's mpirun, PMI (srun --mpi=pmi2, MPICH's hydra) and Slurm's srun. Slurm's
 * SLURM_STEP_NUM_TASKS rather than SLURM_NTASKS: a batch script has SLURM_NTASKS set while it is a
 * single process; srun sets the step's count. */
int ct_comm_launcher_world_size(void) {
    static const char *const vars[3] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS"};
    return launcher_number(vars, 1, 1);
}

int ct_comm_launcher_rank(void) {
    static const char *const vars[3] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"};
    return launcher_number(vars, 0, -1);
}

ct_status ct_comm_create_default(double timeout_s, ct_comm **out) {
    CT_ASSERT(out);
    *out = NULL;
    if (!(timeout_s > 0) || !isfinite(timeout_s))
        return ct_error(CT_ERR_INVALID_ARG, "communicator: ddp_timeout must be a positive number of seconds, got %g",
                        timeout_s);
    int launched = ct_comm_launcher_world_size();
#ifdef CT_HAVE_MPI
    if (launched > 1) return ct_comm_mpi_create(timeout_s, out);
#else
    /* Alone, each of the launched processes would train the whole model by itself. */
    if (launched > 1)
        return ct_error(CT_ERR_UNSUPPORTED,
                        "communicator: started by mpirun/srun as one of %d processes, but this build has no MPI "
                        "(configure with -DCTRAINER_MPI=ON)",
                        launched);
#endif
    CT_TRY(ct_comm_single_create(out));
    (*out)->timeout_s = timeout_s;
    return CT_OK;
}

ct_status ct_comm_for_device(const ct_comm *base, ct_device dev, ct_comm **out) {
    CT_ASSERT(base && out);
    *out = NULL;
    const ct_backend_ops *b = ct_backend_for(dev);
    bool has = b && b->size >= offsetof(ct_backend_ops, collectives) + sizeof b->collectives;
    const char *own = has ? b->collectives : NULL;
    if (base->world_size <= 1 || !own || strcmp(own, "nccl") != 0) return CT_OK;
    ct_status s = ct_comm_nccl_create(base->timeout_s, dev.index, out);
    char name[32];
    ct_device_str(dev, name, sizeof name);
    if (s == CT_ERR_UNSUPPORTED) { /* a build without NCCL: MPI stages the device's memory */
        if (base->rank == 0)
            ct_log_warning("%s; the collectives of %s go through host memory over MPI", ct_last_error(), name);
        return CT_OK;
    }
    if (s != CT_OK) return ct_error_prefix(s, "rank %d/%d: NCCL on %s: ", base->rank, base->world_size, name);
    if (base->rank == 0) ct_log_info("collectives: NCCL, each process on its own GPU (%s on rank 0)", name);
    return CT_OK;
}
