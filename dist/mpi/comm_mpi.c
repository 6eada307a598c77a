/* The MPI communicator: one rank of `mpirun -np N` (or `srun`) over a duplicate of MPI_COMM_WORLD.
 *
 * Every collective, blocking or not, is posted as its non-blocking MPI-3 form (MPI_Iallreduce,
 * MPI_Ibcast, ...) and completed by polling MPI_Test (spinning, then yielding, then sleeping; see
 * req_finish). MPI's own blocking calls wait forever; polling is what lets a rank whose peers never
 * arrive (one crashed, hung, or took another branch) give up after ddp_timeout with CT_ERR_STATE,
 * so the caller can ct_comm_abort the job instead of hanging. A request given up that way stays in flight inside MPI,
 * so the communicator refuses further collectives ("unusable") and destroy gives such requests a
 * few seconds to finish before it frees the communicator; if they never do, MPI is not finalised
 * (finalising with a collective in flight can hang) and mpirun reports the rank as having exited
 * without MPI_Finalize, which is the truth.
 *
 * MPI is initialised with MPI_THREAD_FUNNELED on the first create (OpenMP threads compute between
 * collectives, only the thread that created the communicator calls MPI) and finalised when the
 * last MPI communicator is destroyed, unless someone else initialised it. Errors come back as
 * codes (MPI_ERRORS_RETURN on the duplicate), never as MPI's default abort.
 *
 * MPI_Init_thread, MPI_Comm_split_type and MPI_Finalize have no non-blocking form, and each waits for
 * every rank (the launcher's fence at the start and at the end): a rank stopped before the others
 * got through, or after the last collective, would leave them there forever. A guard thread bounds
 * each by ddp_timeout: past it, the process says which call on which rank did not complete and
 * ends itself with exit code 1, after which the launcher ends the job (the stopped rank too). That
 * is the one way out of a call nothing can cancel, and it runs only where the call never returned.
 *
 * MPI counts are ints: all-reduce and broadcast split bigger tensors into chunks of at most 2^30
 * elements (CT_MPI_MAX_COUNT in the environment lowers that, so tests can exercise the chunking on
 * small tensors); all-gather, gather_v and reduce-scatter refuse per-rank blocks beyond INT_MAX
 * elements with CT_ERR_UNSUPPORTED. Finished request records go to a per-communicator pool, so a
 * training step that all-reduces its gradient buckets allocates nothing once warm. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/log.h"
#include "dist/comm.h"
#include "dist/poll.h"

typedef struct mpi_req {
    struct mpi_req *prev, *next; /* in the communicator's in-flight list; `next` alone in its pool */
    int n, cap;                  /* MPI requests posted, and room for them */
    MPI_Request *reqs;
} mpi_req;

typedef struct mpi_comm {
    ct_comm base;
    MPI_Comm comm;
    int64_t chunk;      /* most elements one MPI call moves */
    mpi_req inflight;   /* sentinel of the circular list of posted, unfinished requests */
    mpi_req *pool;      /* finished records for reuse */
    const char *broken; /* the collective that was given up, NULL while the communicator is usable */
} mpi_comm;

static int live_comms;       /* MPI communicators not yet destroyed */
static bool we_initialised;  /* MPI_Init_thread was ours, so MPI_Finalize is too */
static bool unfinished;      /* a collective never completed: finalising could hang */

enum { DRAIN_LIMIT_S = 5 };

static ct_status mpi_error(int rc, const char *call) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "error code %d", rc);
    return ct_error(CT_ERR_STATE, "%s failed: %s", call, msg);
}

static MPI_Datatype mpi_type(ct_dtype dt) {
    switch (dt) {
    case CT_F32: return MPI_FLOAT;
    case CT_F64: return MPI_DOUBLE;
    case CT_I32: return MPI_INT32_T;
    case CT_I64: return MPI_INT64_T;
    case CT_BF16: return MPI_UINT16_T; /* moved, never reduced */
    case CT_U8: return MPI_UINT8_T;
    }
    return MPI_DATATYPE_NULL;
}

static MPI_Op mpi_op(ct_reduce op) { return op == CT_MIN ? MPI_MIN : op == CT_MAX ? MPI_MAX : MPI_SUM; }

static ct_status need_cpu(const ct_tensor *t, const char *what) {
    char buf[128];
    if (t->device.kind != CT_DEVICE_CPU)
        return ct_error(CT_ERR_DEVICE, "%s %s: MPI collectives take CPU tensors", what, ct_tensor_str(t, buf, sizeof buf));
    if (mpi_type(t->dtype) == MPI_DATATYPE_NULL)
        return ct_error(CT_ERR_DTYPE, "%s %s: no MPI type for this dtype", what, ct_tensor_str(t, buf, sizeof buf));
    return CT_OK;
}

static ct_status need_int_count(int64_t n, const char *what) {
    if (n > INT_MAX)
        return ct_error(CT_ERR_UNSUPPORTED, "%s of %lld elements: MPI counts are limited to %d here", what,
                        (long long)n, INT_MAX);
    return CT_OK;
}

static ct_status usable(const mpi_comm *m) {
    if (m->broken)
        return ct_error(CT_ERR_STATE,
                        "the communicator is unusable since an earlier %s was given up (ddp_timeout %g s or an MPI "
                        "error); end the job with ct_comm_abort",
                        m->broken, m->base.timeout_s);
    return CT_OK;
}

/* --- the guard of MPI's blocking calls ------------------------------------------------------------ */

typedef struct guard {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* on CLOCK_MONOTONIC */
    bool done, started;
    const char *call;
    double limit_s;
    int rank, world; /* -1 before MPI knows them */
} guard;

static void *guard_main(void *arg) {
    guard *g = arg;
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    double end = (double)until.tv_sec + until.tv_nsec * 1e-9 + g->limit_s;
    until.tv_sec = (time_t)end;
    until.tv_nsec = (long)((end - (double)until.tv_sec) * 1e9);
    pthread_mutex_lock(&g->mu);
    int rc = 0;
    while (!g->done && rc != ETIMEDOUT) rc = pthread_cond_timedwait(&g->cv, &g->mu, &until);
    bool expired = !g->done;
    pthread_mutex_unlock(&g->mu);
    if (!expired) return NULL;
    char who[64] = "";
    if (g->rank >= 0) snprintf(who, sizeof who, "rank %d/%d: ", g->rank, g->world);
    ct_log_error("%s%s did not complete within %g s (ddp_timeout): another rank of the job never got there (stopped, "
                 "hung or gone); ending this process so that the job ends",
                 who, g->call, g->limit_s);
    fflush(NULL);
    _exit(1);
}

/* Starts the guard of `call`; where no thread can be started, the call runs unguarded, as before. */
static void guard_start(guard *g, const char *call, double limit_s, int rank, int world) {
    *g = (guard){.call = call, .limit_s = limit_s, .rank = rank, .world = world};
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, &attr);
    pthread_condattr_destroy(&attr);
    g->started = pthread_create(&g->thread, NULL, guard_main, g) == 0;
    if (!g->started) ct_log_warning("%s runs without its ddp_timeout guard (no thread could be started)", call);
}

static void guard_stop(guard *g) {
    pthread_mutex_lock(&g->mu);
    g->done = true;
    pthread_cond_signal(&g->cv);
    pthread_mutex_unlock(&g->mu);
    if (g->started) pthread_join(g->thread, NULL);
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
}

/* --- request records ----------------------------------------------------------------------------- */

/* A record with room for n MPI requests, linked into the in-flight list; NULL when out of memory. */
static mpi_req *req_get(mpi_comm *m, int n) {
    mpi_req *r = m->pool;
    if (r)
        m->pool = r->next;
    else if (!(r = calloc(1, sizeof *r)))
        return NULL;
    if (r->cap < n) {
        MPI_Request *p = realloc(r->reqs, (size_t)n * sizeof *p);
        if (!p) {
            r->next = m->pool;
            m->pool = r;
            return NULL;
        }
        r->reqs = p;
        r->cap = n;
    }
    r->n = 0;
    r->prev = &m->inflight;
    r->next = m->inflight.next;
    m->inflight.next->prev = r;
    m->inflight.next = r;
    return r;
}

static void req_unlink(mpi_req *r) {
    r->prev->next = r->next;
    r->next->prev = r->prev;
}

static void req_put(mpi_comm *m, mpi_req *r) {
    req_unlink(r);
    r->next = m->pool;
    m->pool = r;
}

/* Leaves r in flight inside MPI (nothing can cancel a collective) and marks the communicator. */
static ct_status give_up(mpi_comm *m, const char *what, ct_status s) {
    if (!m->broken) m->broken = what;
    return s;
}

/* One MPI_Testall of a record, for ct_poll_until; rc keeps a failure's code. */
typedef struct req_test {
    mpi_req *r;
    int rc;
} req_test;

static ct_poll test_req(void *ctx) {
    req_test *t = ctx;
    int done = 0;
    t->rc = MPI_Testall(t->r->n, t->r->reqs, &done, MPI_STATUSES_IGNORE);
    return t->rc != MPI_SUCCESS ? CT_POLL_FAILED : done ? CT_POLL_DONE : CT_POLL_PENDING;
}

/* Polls r to completion (returning it to the pool) or gives up after the timeout (dist/poll.h:
 * spinning, then yielding, then sleeping). */
static ct_status req_finish(mpi_comm *m, mpi_req *r, const char *what) {
    double limit = m->base.timeout_s;
    req_test t = {.r = r};
    switch (ct_poll_until(test_req, &t, limit)) {
    case CT_POLL_DONE:
        req_put(m, r);
        return CT_OK;
    case CT_POLL_FAILED:
        return give_up(m, what, mpi_error(t.rc, "MPI_Testall"));
    default:
        return give_up(m, what,
                       ct_error(CT_ERR_STATE, "no answer from the other ranks within %g s (ddp_timeout)", limit));
    }
}

/* --- collectives ---------------------------------------------------------------------------------- */

/* Posts t's all-reduce (in place) or broadcast from root in chunks of at most m->chunk elements
 * (MPI counts are ints); *out is the in-flight record. */
static ct_status post_chunks(mpi_comm *m, ct_tensor *t, bool broadcast, ct_reduce op, int root, mpi_req **out) {
    const char *what = broadcast ? "broadcast" : "all_reduce";
    CT_TRY(usable(m));
    CT_TRY(need_cpu(t, "tensor"));
    int64_t n = ct_tensor_numel(t), chunks = n == 0 ? 1 : (n + m->chunk - 1) / m->chunk;
    if (chunks > INT_MAX) return need_int_count(chunks, broadcast ? "chunks of broadcast" : "chunks of all_reduce");
    mpi_req *r = req_get(m, (int)chunks);
    if (!r) return ct_error(CT_ERR_NOMEM, "cannot allocate a request of %lld chunks", (long long)chunks);
    size_t es = ct_dtype_size(t->dtype);
    for (int64_t k = 0; k < chunks; k++) {
        int64_t off = k * m->chunk, count = n - off < m->chunk ? n - off : m->chunk;
        char *p = off ? (char *)t->data + (size_t)off * es : t->data;
        int rc = broadcast ? MPI_Ibcast(p, (int)count, mpi_type(t->dtype), root, m->comm, &r->reqs[k])
                           : MPI_Iallreduce(MPI_IN_PLACE, p, (int)count, mpi_type(t->dtype), mpi_op(op), m->comm,
                                            &r->reqs[k]);
        if (rc != MPI_SUCCESS) return give_up(m, what, mpi_error(rc, broadcast ? "MPI_Ibcast" : "MPI_Iallreduce"));
        r->n++;
    }
    *out = r;
    return CT_OK;
}

static ct_status mpi_all_reduce(ct_comm *c, ct_tensor *t, ct_reduce op) {
    mpi_comm *m = (mpi_comm *)c;
    mpi_req *r = NULL;
    CT_TRY(post_chunks(m, t, false, op, 0, &r));
    return req_finish(m, r, "all_reduce");
}

static ct_status mpi_all_reduce_start(ct_comm *c, ct_tensor *t, ct_reduce op, ct_comm_request **req) {
    mpi_comm *m = (mpi_comm *)c;
    mpi_req *r = NULL;
    CT_TRY(post_chunks(m, t, false, op, 0, &r));
    /* Without a progress thread, MPI moves data only inside MPI calls: one test now gets the first
     * round going while the caller goes back to computing. */
    int done = 0;
    int rc = MPI_Testall(r->n, r->reqs, &done, MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS) return give_up(m, "all_reduce", mpi_error(rc, "MPI_Testall"));
    *req = (ct_comm_request *)r;
    return CT_OK;
}

static ct_status mpi_wait(ct_comm *c, ct_comm_request *req) {
    mpi_comm *m = (mpi_comm *)c;
    /* On an unusable communicator the request stays in flight with the others destroy drains. */
    CT_TRY(usable(m));
    return req_finish(m, (mpi_req *)req, "all_reduce");
}

static ct_status mpi_broadcast(ct_comm *c, ct_tensor *t, int root) {
    mpi_comm *m = (mpi_comm *)c;
    mpi_req *r = NULL;
    CT_TRY(post_chunks(m, t, true, CT_SUM, root, &r));
    return req_finish(m, r, "broadcast");
}

static ct_status mpi_all_gather(ct_comm *c, const ct_tensor *in, ct_tensor *out) {
    mpi_comm *m = (mpi_comm *)c;
    CT_TRY(usable(m));
    CT_TRY(need_cpu(in, "in"));
    CT_TRY(need_cpu(out, "out"));
    int64_t n = ct_tensor_numel(in);
    CT_TRY(need_int_count(n, "all_gather block"));
    mpi_req *r = req_get(m, 1);
    if (!r) return ct_error(CT_ERR_NOMEM, "cannot allocate a request");
    MPI_Datatype type = mpi_type(in->dtype);
    /* The wrapper allows exactly one overlap: in is this rank's own block of out. */
    bool in_place = n > 0 && (char *)in->data == (char *)out->data + (size_t)(c->rank * n) * ct_dtype_size(in->dtype);
    int rc = in_place ? MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, out->data, (int)n, type, m->comm, r->reqs)
                      : MPI_Iallgather(in->data, (int)n, type, out->data, (int)n, type, m->comm, r->reqs);
    if (rc != MPI_SUCCESS) return give_up(m, "all_gather", mpi_error(rc, "MPI_Iallgather"));
    r->n = 1;
    return req_finish(m, r, "all_gather");
}

/* Two rounds: every rank learns every count and dtype (so every rank reaches the same verdict on
 * them and either all post the gather or none does), then the root receives the data. */
static ct_status mpi_gather_v(ct_comm *c, const ct_tensor *in, int root, ct_tensor *out) {
    mpi_comm *m = (mpi_comm *)c;
    CT_TRY(usable(m));
    CT_TRY(need_cpu(in, "in"));
    int world = c->world_size;
    bool is_root = c->rank == root;
    /* [0, 2 world): every rank's (count, dtype); then this rank's own pair. Heap, not stack: a
     * given-up round still reads and writes it inside MPI after we return. */
    int64_t *info = malloc(((size_t)world + 1) * 2 * sizeof *info);
    int *counts = malloc((size_t)world * 2 * sizeof *counts);
    mpi_req *r = info && counts ? req_get(m, 1) : NULL;
    if (!r) {
        free(info);
        free(counts);
        return ct_error(CT_ERR_NOMEM, "cannot allocate the counts of %d ranks", world);
    }
    int64_t *mine = info + 2 * world;
    mine[0] = ct_tensor_numel(in);
    mine[1] = (int64_t)in->dtype;
    int *displs = counts + world;
    ct_status s = CT_OK;
    int rc = MPI_Iallgather(mine, 2, MPI_INT64_T, info, 2, MPI_INT64_T, m->comm, r->reqs);
    if (rc != MPI_SUCCESS)
        s = give_up(m, "gather_v", mpi_error(rc, "MPI_Iallgather"));
    else {
        r->n = 1;
        s = req_finish(m, r, "gather_v");
    }
    if (s != CT_OK) return s; /* info and counts stay with MPI */

    int64_t total = 0;
    s = ct_comm_gather_v_total(info, world, root, &total);
    if (s == CT_OK) s = need_int_count(total, "gather_v");
    if (s == CT_OK && is_root) {
        for (int q = 0, off = 0; q < world; q++) {
            counts[q] = (int)info[2 * q];
            displs[q] = off;
            off += counts[q];
        }
        if (total > 0) s = ct_tensor_alloc(out, in->dtype, CT_CPU, 1, &total);
    }
    if (s == CT_OK && (r = req_get(m, 1)) == NULL) s = ct_error(CT_ERR_NOMEM, "cannot allocate a request");
    if (s != CT_OK) {
        free(info);
        free(counts);
        return s; /* the wrapper frees *out */
    }
    MPI_Datatype type = mpi_type(in->dtype);
    rc = MPI_Igatherv(in->data, (int)mine[0], type, is_root ? out->data : NULL, is_root ? counts : NULL,
                      is_root ? displs : NULL, type, root, m->comm, r->reqs);
    if (rc != MPI_SUCCESS)
        s = give_up(m, "gather_v", mpi_error(rc, "MPI_Igatherv"));
    else {
        r->n = 1;
        s = req_finish(m, r, "gather_v");
    }
    if (s != CT_OK) {
        /* The gather may still write out, counts and displs: leave them to it. */
        out->data = NULL;
        return s;
    }
    free(info);
    free(counts);
    return CT_OK;
}

static ct_status mpi_reduce_scatter(ct_comm *c, const ct_tensor *in, ct_tensor *out, ct_reduce op) {
    mpi_comm *m = (mpi_comm *)c;
    CT_TRY(usable(m));
    CT_TRY(need_cpu(in, "in"));
    CT_TRY(need_cpu(out, "out"));
    int64_t n = ct_tensor_numel(out);
    CT_TRY(need_int_count(n, "reduce_scatter block"));
    mpi_req *r = req_get(m, 1);
    if (!r) return ct_error(CT_ERR_NOMEM, "cannot allocate a request");
    int rc = MPI_Ireduce_scatter_block(in->data, out->data, (int)n, mpi_type(in->dtype), mpi_op(op), m->comm, r->reqs);
    if (rc != MPI_SUCCESS) return give_up(m, "reduce_scatter", mpi_error(rc, "MPI_Ireduce_scatter_block"));
    r->n = 1;
    return req_finish(m, r, "reduce_scatter");
}

static ct_status mpi_barrier(ct_comm *c) {
    mpi_comm *m = (mpi_comm *)c;
    CT_TRY(usable(m));
    mpi_req *r = req_get(m, 1);
    if (!r) return ct_error(CT_ERR_NOMEM, "cannot allocate a request");
    int rc = MPI_Ibarrier(m->comm, r->reqs);
    if (rc != MPI_SUCCESS) return give_up(m, "barrier", mpi_error(rc, "MPI_Ibarrier"));
    r->n = 1;
    return req_finish(m, r, "barrier");
}

static void mpi_abort(ct_comm *c, int code) { MPI_Abort(((mpi_comm *)c)->comm, code); }

/* Requests still in flight (never waited, or given up) get a few seconds to complete: a peer that
 * arrives late finishes them, and MPI can then be finalised cleanly. */
static ct_poll test_inflight(void *ctx) {
    mpi_comm *m = ctx;
    for (mpi_req *r = m->inflight.next, *next; r != &m->inflight; r = next) {
        next = r->next;
        int done = 0;
        if (MPI_Testall(r->n, r->reqs, &done, MPI_STATUSES_IGNORE) != MPI_SUCCESS || done) req_put(m, r);
    }
    return m->inflight.next == &m->inflight ? CT_POLL_DONE : CT_POLL_PENDING;
}

static void drain(mpi_comm *m) {
    if (ct_poll_until(test_inflight, m, DRAIN_LIMIT_S) == CT_POLL_TIMED_OUT) unfinished = true;
}

static void free_records(mpi_req *r, mpi_req *end) {
    while (r != end) {
        mpi_req *next = r->next;
        free(r->reqs);
        free(r);
        r = next;
    }
}

static void mpi_destroy(ct_comm *c) {
    mpi_comm *m = (mpi_comm *)c;
    int rank = c->rank, world = c->world_size;
    double limit = c->timeout_s;
    drain(m);
    free_records(m->inflight.next, &m->inflight);
    free_records(m->pool, NULL);
    MPI_Comm_free(&m->comm); /* collectives still in flight complete (or not) on their own */
    free(m);
    if (--live_comms == 0 && we_initialised && !unfinished) {
        int finalised = 0;
        MPI_Finalized(&finalised);
        if (!finalised) {
            guard g;
            guard_start(&g, "MPI_Finalize (the end of the job)", limit, rank, world);
            MPI_Finalize();
            guard_stop(&g);
        }
    }
}

static const ct_comm_ops mpi_ops = {
    .size = sizeof(ct_comm_ops),
    .name = "mpi",
    .all_reduce = mpi_all_reduce,
    .all_reduce_start = mpi_all_reduce_start,
    .wait = mpi_wait,
    .broadcast = mpi_broadcast,
    .all_gather = mpi_all_gather,
    .gather_v = mpi_gather_v,
    .reduce_scatter = mpi_reduce_scatter,
    .barrier = mpi_barrier,
    .abort = mpi_abort,
    .destroy = mpi_destroy,
};

/* --- creation ------------------------------------------------------------------------------------- */

static int64_t chunk_from_env(void) {
    const char *v = getenv("CT_MPI_MAX_COUNT");
    if (v && *v) {
        char *end;
        long long n = strtoll(v, &end, 10);
        if (*end == '\0' && n >= 1 && n <= INT_MAX) return n;
    }
    return (int64_t)1 << 30;
}

/* Open MPI's non-blocking collectives (libnbc) all-reduce in place by reducing to rank 0 and
 * broadcasting back, binomial trees both ways: 2 log2(p) rounds, each a link delay across hosts.
 * Recursive doubling exchanges the same data in log2(p) rounds (every rank ends with the same sums:
 * each pair adds the same two partial sums). bench/multihost.py, 2 hosts with a 20 ms one-way delay:
 * the MLP's step went from 10 link delays to 4.5 (its gradients from 8.6 to 4.2, the step's agreement
 * from 2 to 1); on 3 hosts libnbc takes the same path either way. Set before MPI starts, and only
 * where the environment does not choose already (OMPI_MCA_... wins, as everywhere in Open MPI). */
static void prefer_recursive_doubling(void) {
#ifdef OPEN_MPI
    setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "recursive_doubling", 0);
#endif
}

static ct_status init_mpi(double timeout_s) {
    int initialised = 0, finalised = 0;
    MPI_Initialized(&initialised);
    MPI_Finalized(&finalised);
    if (finalised)
        return ct_error(CT_ERR_STATE, "MPI was already finalised in this process and cannot be initialised again; "
                                      "keep one communicator for the whole run");
    if (!initialised) {
        int provided = MPI_THREAD_SINGLE;
        guard g;
        guard_start(&g, "MPI_Init (the start of the job)", timeout_s, ct_comm_launcher_rank(),
                    ct_comm_launcher_world_size());
        prefer_recursive_doubling();
        int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
        guard_stop(&g);
        if (rc != MPI_SUCCESS) return mpi_error(rc, "MPI_Init_thread");
        we_initialised = true;
        if (provided < MPI_THREAD_FUNNELED)
            return ct_error(CT_ERR_UNSUPPORTED,
                            "this MPI provides thread level %d, below MPI_THREAD_FUNNELED (OpenMP threads run "
                            "between collectives)",
                            provided);
    }
    int is_main = 0;
    MPI_Is_thread_main(&is_main);
    if (!is_main)
        return ct_error(CT_ERR_STATE, "communicators must be created and used on the thread that initialised MPI");
    return CT_OK;
}

ct_status ct_comm_mpi_create(double timeout_s, ct_comm **out) {
    CT_ASSERT(out);
    *out = NULL;
    if (!(timeout_s > 0) || !isfinite(timeout_s))
        return ct_error(CT_ERR_INVALID_ARG,
                        "mpi communicator: ddp_timeout must be a positive number of seconds, got %g", timeout_s);
    ct_status s = init_mpi(timeout_s);
    if (s != CT_OK) return ct_error_prefix(s, "mpi communicator: ");
    int world_rank = 0, world_size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);

    mpi_comm *m = calloc(1, sizeof *m);
    if (!m) return ct_error(CT_ERR_NOMEM, "mpi communicator: cannot allocate");
    m->base = (ct_comm){.ops = &mpi_ops, .rank = world_rank, .world_size = world_size, .timeout_s = timeout_s};
    m->inflight.next = m->inflight.prev = &m->inflight;
    m->chunk = chunk_from_env();
    m->comm = MPI_COMM_NULL;

    /* The duplicate keeps our collectives apart from anyone else's on MPI_COMM_WORLD; MPI_Comm_idup
     * (also a collective) lets creation time out like the rest when a rank never gets here. */
    mpi_req *r = req_get(m, 1);
    if (!r) {
        free(m);
        return ct_error(CT_ERR_NOMEM, "mpi communicator: cannot allocate");
    }
    int rc = MPI_Comm_idup(MPI_COMM_WORLD, &m->comm, r->reqs);
    if (rc != MPI_SUCCESS) s = mpi_error(rc, "MPI_Comm_idup");
    if (s == CT_OK) {
        r->n = 1;
        s = req_finish(m, r, "communicator creation");
    }
    if (s != CT_OK) {
        /* The duplicate may still complete inside MPI and write m->comm: leave m to it. */
        unfinished = true;
        return ct_error_prefix(s, "mpi communicator (rank %d/%d): ", world_rank, world_size);
    }
    MPI_Comm_set_errhandler(m->comm, MPI_ERRORS_RETURN);

    MPI_Comm local = MPI_COMM_NULL;
    guard g;
    guard_start(&g, "MPI_Comm_split_type (communicator creation)", timeout_s, world_rank, world_size);
    rc = MPI_Comm_split_type(m->comm, MPI_COMM_TYPE_SHARED, world_rank, MPI_INFO_NULL, &local);
    guard_stop(&g);
    if (rc != MPI_SUCCESS) {
        s = mpi_error(rc, "MPI_Comm_split_type");
        MPI_Comm_free(&m->comm);
        free_records(m->pool, NULL);
        free(m);
        return ct_error_prefix(s, "mpi communicator (rank %d/%d): ", world_rank, world_size);
    }
    MPI_Comm_rank(local, &m->base.local_rank);
    MPI_Comm_size(local, &m->base.local_world_size);
    MPI_Comm_free(&local);

    live_comms++;
    *out = &m->base;
    return CT_OK;
}
