/* The NCCL communicator: one process per GPU under `mpirun -np N`, CUDA tensors reduced by NCCL.
 * Built into the CUDA backend's module (backends/cuda/CMakeLists.txt), reached through
 * ct_comm_nccl_create (dist/nccl/nccl_entry.c).
 *
 * Bootstrap and CPU tensors go through an MPI communicator of its own (dist/mpi/comm_mpi.c): rank 0's
 * ncclUniqueId is broadcast over it, every rank's setup outcome is agreed over it before anyone
 * enters ncclCommInitRank (so no rank waits there for one that already gave up), gather_v's counts
 * travel over it, and every collective on CPU tensors (metric states, config hashes) is simply MPI's.
 * The GPU is the local rank's unless the caller names one.
 *
 * Streams: every NCCL collective runs on one dedicated stream, after an event recorded on the
 * caller's current stream (so it sees everything the caller's kernels wrote before the call):
 *  - blocking collectives (all_reduce, broadcast, all_gather, gather_v, reduce_scatter, barrier)
 *    return once the collective has finished on the GPU, polled like comm_mpi.c polls MPI (spin,
 *    yield, sleep), so they give up after ddp_timeout with CT_ERR_STATE and the caller can
 *    ct_comm_abort the job. Their results are then visible to the host and to every stream.
 *  - all_reduce_start enqueues and returns; ct_comm_wait makes the caller's stream wait for the
 *    collective's event, without synchronising the host, so gradient buckets travel while backward
 *    runs and the optimizer step is ordered after them on the GPU.
 * A non-blocking request is past any host check once it is waited, and a peer that stops answering
 * would leave the next host synchronisation (a loss value read back) blocked forever. A watchdog
 * thread therefore polls the requests in flight and NCCL's asynchronous error state; a request
 * older than ddp_timeout, or an NCCL error while requests are pending, prints the reason and ends
 * the whole job (MPI_Abort through the MPI communicator), as a rank failure must.
 *
 * A blocking collective given up at the timeout stays in flight on the GPU: the communicator
 * refuses further work ("unusable"), as comm_mpi.c does, and destroy gives the NCCL stream a few
 * seconds to finish, then aborts the NCCL communicator instead of waiting for it.
 *
 * Compiled into the CUDA module only in builds with both CUDA and MPI; nccl_entry.c says which part a
 * build lacks otherwise.
 * Why one long file: the collectives, the event polling, the watchdog thread and the teardown all
 * follow one set of rules about what is still in flight on the GPU, which splitting would scatter. */
#include "dist/comm.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <mpi.h>
#include <nccl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backends/cuda/cuda_rt.h"
#include "dist/poll.h"
#include "core/util.h"

typedef struct nccl_req {
    struct nccl_req *next;  /* in the in-flight list or the pool */
    cudaEvent_t done;       /* recorded on the NCCL stream after the collective */
    double started;         /* when it was posted (ct_monotonic_seconds) */
    bool waited;            /* ct_comm_wait ordered the caller's stream after it */
    ct_comm_request *cpu;   /* a CPU tensor's request, owned by the MPI communicator */
} nccl_req;

typedef struct nccl_comm {
    ct_comm base;
    ct_comm *mpi;           /* bootstrap, CPU tensors, gather_v counts, abort */
    ncclComm_t nccl;
    int device;
    cudaStream_t stream;    /* every collective runs here */
    cudaEvent_t ready;      /* the caller's stream, recorded before each collective */
    cudaEvent_t done;       /* the end of a blocking collective */
    void *scratch;          /* 4 device bytes the barrier reduces */

    pthread_mutex_t mu;     /* guards the fields below, which the watchdog reads */
    nccl_req *inflight;     /* started, and not both finished and waited */
    nccl_req *pool;         /* records for reuse */
    const char *broken;     /* the collective that was given up; NULL while usable */
    bool stop;              /* tells the watchdog to end */
    pthread_cond_t wake;    /* CLOCK_MONOTONIC */
    pthread_t watchdog;
    bool have_mu, have_watchdog;
} nccl_comm;

enum { DRAIN_LIMIT_S = 5, WATCHDOG_EXIT = 1 };


static nccl_comm *self(ct_comm *c) { return (nccl_comm *)c; }

/* The caller's stream on the communicator's GPU (a copy to another device, an evaluator's replica on
 * its own GPU, may have left that one current on the thread). */
static cudaStream_t caller_stream(const nccl_comm *m) {
    ct_cuda_use_device(m->device);
    return (cudaStream_t)ct_cuda_stream();
}

static ncclDataType_t reduce_type(ct_dtype dt) {
    switch (dt) {
    case CT_F32: return ncclFloat32;
    case CT_F64: return ncclFloat64;
    default: return ncclInt64; /* the wrapper admits f32, f64 and i64 only */
    }
}

static ncclRedOp_t reduce_op(ct_reduce op) { return op == CT_MIN ? ncclMin : op == CT_MAX ? ncclMax : ncclSum; }

/* --- state and errors ---------------------------------------------------------------------------- */

static ct_status usable(nccl_comm *m) {
    pthread_mutex_lock(&m->mu);
    const char *broken = m->broken;
    pthread_mutex_unlock(&m->mu);
    if (broken)
        return ct_error(CT_ERR_STATE,
                        "the communicator is unusable since an earlier %s was given up (ddp_timeout %g s or an NCCL "
                        "error); end the job with ct_comm_abort",
                        broken, m->base.timeout_s);
    return CT_OK;
}

/* Marks the communicator unusable (the collective stays in flight on the GPU) and returns s. */
static ct_status give_up(nccl_comm *m, const char *what, ct_status s) {
    pthread_mutex_lock(&m->mu);
    if (!m->broken) m->broken = what;
    pthread_mutex_unlock(&m->mu);
    return s;
}

static ct_status nccl_failed(nccl_comm *m, const char *what, ncclResult_t r, const char *call) {
    const char *detail = m->nccl ? ncclGetLastError(m->nccl) : NULL;
    return give_up(m, what,
                   ct_error(CT_ERR_STATE, "%s failed: %s%s%s%s", call, ncclGetErrorString(r),
                            detail && *detail ? " (" : "", detail && *detail ? detail : "",
                            detail && *detail ? ")" : ""));
}

/* An error NCCL found in the background (a peer lost, a network failure). */
static ct_status async_error(nccl_comm *m, const char *what) {
    ncclResult_t state = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(m->nccl, &state);
    if (r != ncclSuccess) return nccl_failed(m, what, r, "ncclCommGetAsyncError");
    if (state != ncclSuccess && state != ncclInProgress)
        return nccl_failed(m, what, state, "a previous collective (reported asynchronously)");
    return CT_OK;
}

static ct_status need_gpu(const nccl_comm *m, const ct_tensor *t, const char *what) {
    char buf[128];
    if (t->device.kind != CT_DEVICE_CUDA || t->device.index != m->device)
        return ct_error(CT_ERR_DEVICE,
                        "%s %s: this NCCL communicator works on cuda:%d (CPU tensors go through MPI, all on one "
                        "side)",
                        what, ct_tensor_str(t, buf, sizeof buf), m->device);
    return CT_OK;
}

/* in and out of a two-tensor collective: both on the CPU (true, MPI's job) or both on our GPU. */
static ct_status both_cpu(const nccl_comm *m, const ct_tensor *in, const ct_tensor *out, bool *cpu) {
    char a[128], b[128];
    *cpu = in->device.kind == CT_DEVICE_CPU && out->device.kind == CT_DEVICE_CPU;
    if (*cpu) return CT_OK;
    if (in->device.kind == CT_DEVICE_CPU || out->device.kind == CT_DEVICE_CPU)
        return ct_error(CT_ERR_DEVICE, "in %s and out %s must both be CPU tensors or both GPU tensors",
                        ct_tensor_str(in, a, sizeof a), ct_tensor_str(out, b, sizeof b));
    CT_TRY(need_gpu(m, in, "in"));
    return need_gpu(m, out, "out");
}

/* --- request records ----------------------------------------------------------------------------- */

/* Returns finished, waited requests to the pool (called from the communicator's thread). */
static void reap(nccl_comm *m) {
    pthread_mutex_lock(&m->mu);
    for (nccl_req **p = &m->inflight; *p;) {
        nccl_req *r = *p;
        if (r->waited && cudaEventQuery(r->done) == cudaSuccess) {
            *p = r->next;
            r->next = m->pool;
            m->pool = r;
        } else
            p = &r->next;
    }
    pthread_mutex_unlock(&m->mu);
}

/* A record from the pool or a new one; NULL (with the error set) when none can be made. */
static nccl_req *req_get(nccl_comm *m) {
    pthread_mutex_lock(&m->mu);
    nccl_req *r = m->pool;
    if (r) m->pool = r->next;
    pthread_mutex_unlock(&m->mu);
    if (!r) {
        r = calloc(1, sizeof *r);
        if (!r) {
            ct_error(CT_ERR_NOMEM, "cannot allocate a request");
            return NULL;
        }
        cudaError_t e = cudaEventCreateWithFlags(&r->done, cudaEventDisableTiming);
        if (e != cudaSuccess) {
            free(r);
            ct_error(CT_ERR_NOMEM, "cannot create a CUDA event: %s", cudaGetErrorString(e));
            return NULL;
        }
    }
    r->next = NULL;
    r->waited = false;
    r->cpu = NULL;
    return r;
}

static void req_put(nccl_comm *m, nccl_req *r) {
    pthread_mutex_lock(&m->mu);
    r->next = m->pool;
    m->pool = r;
    pthread_mutex_unlock(&m->mu);
}

/* --- running a collective ------------------------------------------------------------------------ */

/* Before a GPU collective: the communicator is usable and error-free, and the NCCL stream waits for
 * everything already enqueued on the caller's stream. */
static ct_status begin(nccl_comm *m, const char *what) {
    CT_TRY(usable(m));
    CT_TRY(async_error(m, what));
    reap(m);
    CT_CUDA_CHECK(cudaEventRecord(m->ready, caller_stream(m)));
    CT_CUDA_CHECK(cudaStreamWaitEvent(m->stream, m->ready, 0));
    return CT_OK;
}

/* One query of an event, for ct_poll_until: a GPU error (e) or an NCCL error (s, already given
 * up on) ends the wait. */
typedef struct event_test {
    nccl_comm *m;
    cudaEvent_t ev;
    const char *what;
    cudaError_t e;
    ct_status s;
} event_test;

static ct_poll test_event(void *ctx) {
    event_test *t = ctx;
    t->e = cudaEventQuery(t->ev);
    if (t->e == cudaSuccess) return CT_POLL_DONE;
    if (t->e != cudaErrorNotReady) return CT_POLL_FAILED;
    t->s = async_error(t->m, t->what);
    return t->s != CT_OK ? CT_POLL_FAILED : CT_POLL_PENDING;
}

/* Polls ev to completion, or gives up after the timeout or on an NCCL error (dist/poll.h: spinning,
 * then yielding, then sleeping). */
static ct_status poll_event(nccl_comm *m, cudaEvent_t ev, const char *what) {
    double limit = m->base.timeout_s;
    event_test t = {.m = m, .ev = ev, .what = what, .s = CT_OK};
    switch (ct_poll_until(test_event, &t, limit)) {
    case CT_POLL_DONE:
        return CT_OK;
    case CT_POLL_FAILED:
        if (t.s != CT_OK) return t.s;
        return give_up(m, what, ct_error(CT_ERR_STATE, "the GPU failed: %s", cudaGetErrorString(t.e)));
    default:
        return give_up(m, what,
                       ct_error(CT_ERR_STATE, "no answer from the other ranks within %g s (ddp_timeout)", limit));
    }
}

/* After a blocking collective was enqueued: wait for it on the host. */
static ct_status finish(nccl_comm *m, const char *what) {
    CT_CUDA_CHECK(cudaEventRecord(m->done, m->stream));
    return poll_event(m, m->done, what);
}

#define NCCL_TRY(m, what, call)                                                                                      \
    do {                                                                                                             \
        ncclResult_t r_ = (call);                                                                                    \
        if (r_ != ncclSuccess) return nccl_failed((m), (what), r_, #call);                                           \
    } while (0)

/* --- collectives ---------------------------------------------------------------------------------- */

static ct_status nccl_all_reduce(ct_comm *c, ct_tensor *t, ct_reduce op) {
    nccl_comm *m = self(c);
    CT_TRY(usable(m));
    if (t->device.kind == CT_DEVICE_CPU) return m->mpi->ops->all_reduce(m->mpi, t, op);
    CT_TRY(need_gpu(m, t, "tensor"));
    CT_TRY(begin(m, "all_reduce"));
    size_t n = (size_t)ct_tensor_numel(t);
    if (n)
        NCCL_TRY(m, "all_reduce",
                 ncclAllReduce(t->data, t->data, n, reduce_type(t->dtype), reduce_op(op), m->nccl, m->stream));
    return finish(m, "all_reduce");
}

static ct_status nccl_all_reduce_start(ct_comm *c, ct_tensor *t, ct_reduce op, ct_comm_request **req) {
    nccl_comm *m = self(c);
    CT_TRY(usable(m));
    nccl_req *r = req_get(m);
    if (!r) return CT_ERR_NOMEM;
    if (t->device.kind == CT_DEVICE_CPU) {
        ct_status s = m->mpi->ops->all_reduce_start(m->mpi, t, op, &r->cpu);
        if (s != CT_OK) {
            req_put(m, r);
            return s;
        }
        *req = (ct_comm_request *)r;
        return CT_OK;
    }
    ct_status s = need_gpu(m, t, "tensor");
    if (s == CT_OK) s = begin(m, "all_reduce");
    size_t n = (size_t)ct_tensor_numel(t);
    if (s == CT_OK && n) {
        ncclResult_t nr = ncclAllReduce(t->data, t->data, n, reduce_type(t->dtype), reduce_op(op), m->nccl, m->stream);
        if (nr != ncclSuccess) s = nccl_failed(m, "all_reduce", nr, "ncclAllReduce");
    }
    if (s != CT_OK) {
        req_put(m, r);
        return s;
    }
    CT_CUDA_CHECK(cudaEventRecord(r->done, m->stream));
    r->started = ct_monotonic_seconds();
    pthread_mutex_lock(&m->mu);
    r->next = m->inflight;
    m->inflight = r;
    pthread_mutex_unlock(&m->mu);
    *req = (ct_comm_request *)r;
    return CT_OK;
}

static ct_status nccl_wait(ct_comm *c, ct_comm_request *req) {
    nccl_comm *m = self(c);
    nccl_req *r = (nccl_req *)req;
    if (r->cpu) {
        ct_status s = m->mpi->ops->wait(m->mpi, r->cpu);
        req_put(m, r);
        return s;
    }
    /* On an unusable communicator the request stays in flight, left to destroy. */
    CT_TRY(usable(m));
    CT_TRY(async_error(m, "all_reduce"));
    if (cudaEventQuery(r->done) == cudaErrorNotReady && ct_monotonic_seconds() - r->started >= m->base.timeout_s)
        return give_up(m, "all_reduce",
                       ct_error(CT_ERR_STATE, "no answer from the other ranks within %g s (ddp_timeout)",
                                m->base.timeout_s));
    /* The GPU, not the host, waits: whatever the caller enqueues next runs after the all-reduce. */
    CT_CUDA_CHECK(cudaStreamWaitEvent(caller_stream(m), r->done, 0));
    pthread_mutex_lock(&m->mu);
    r->waited = true;
    pthread_mutex_unlock(&m->mu);
    return CT_OK;
}

static ct_status nccl_broadcast(ct_comm *c, ct_tensor *t, int root) {
    nccl_comm *m = self(c);
    CT_TRY(usable(m));
    if (t->device.kind == CT_DEVICE_CPU) return m->mpi->ops->broadcast(m->mpi, t, root);
    CT_TRY(need_gpu(m, t, "tensor"));
    CT_TRY(begin(m, "broadcast"));
    size_t bytes = ct_tensor_nbytes(t);
    if (bytes) NCCL_TRY(m, "broadcast", ncclBroadcast(t->data, t->data, bytes, ncclUint8, root, m->nccl, m->stream));
    return finish(m, "broadcast");
}

static ct_status nccl_all_gather(ct_comm *c, const ct_tensor *in, ct_tensor *out) {
    nccl_comm *m = self(c);
    CT_TRY(usable(m));
    bool cpu;
    CT_TRY(both_cpu(m, in, out, &cpu));
    if (cpu) return m->mpi->ops->all_gather(m->mpi, in, out);
    CT_TRY(begin(m, "all_gather"));
    /* The wrapper allows one overlap, in = this rank's block of out, which is NCCL's in-place form. */
    size_t bytes = ct_tensor_nbytes(in);
    if (bytes)
        NCCL_TRY(m, "all_gather", ncclAllGather(in->data, out->data, bytes, ncclUint8, m->nccl, m->stream));
    return finish(m, "all_gather");
}

static ct_status nccl_reduce_scatter(ct_comm *c, const ct_tensor *in, ct_tensor *out, ct_reduce op) {
    nccl_comm *m = self(c);
    CT_TRY(usable(m));
    bool cpu;
    CT_TRY(both_cpu(m, in, out, &cpu));
    if (cpu) return m->mpi->ops->reduce_scatter(m->mpi, in, out, op);
    CT_TRY(begin(m, "reduce_scatter"));
    size_t n = (size_t)ct_tensor_numel(out);
    if (n)
        NCCL_TRY(m, "reduce_scatter",
                 ncclReduceScatter(in->data, out->data, n, reduce_type(in->dtype), reduce_op(op), m->nccl, m->stream));
    return finish(m, "reduce_scatter");
}

static ct_status nccl_barrier(ct_comm *c) {
    nccl_comm *m = self(c);
    CT_TRY(begin(m, "barrier"));
    NCCL_TRY(m, "barrier", ncclAllReduce(m->scratch, m->scratch, 1, ncclInt32, ncclMax, m->nccl, m->stream));
    return finish(m, "barrier");
}

/* Posts the point-to-point transfers of gather_v: every rank's block to the root, in rank order;
 * the root's own block is a device copy. counts[2q] is rank q's element count. */
static ct_status gather_v_transfers(nccl_comm *m, const ct_tensor *in, int root, const int64_t *info, ct_tensor *out) {
    size_t es = ct_dtype_size(in->dtype);
    int world = m->base.world_size;
    if (m->base.rank != root) {
        size_t bytes = (size_t)info[2 * m->base.rank] * es;
        if (bytes) NCCL_TRY(m, "gather_v", ncclSend(in->data, bytes, ncclUint8, root, m->nccl, m->stream));
        return CT_OK;
    }
    size_t off = 0;
    for (int q = 0; q < world; q++) {
        size_t bytes = (size_t)info[2 * q] * es;
        if (q == root && bytes)
            CT_CUDA_CHECK(
                cudaMemcpyAsync((char *)out->data + off, in->data, bytes, cudaMemcpyDeviceToDevice, m->stream));
        off += bytes;
    }
    NCCL_TRY(m, "gather_v", ncclGroupStart());
    off = 0;
    ct_status s = CT_OK;
    for (int q = 0; q < world && s == CT_OK; q++) {
        size_t bytes = (size_t)info[2 * q] * es;
        if (q != root && bytes) {
            ncclResult_t r = ncclRecv((char *)out->data + off, bytes, ncclUint8, q, m->nccl, m->stream);
            if (r != ncclSuccess) s = nccl_failed(m, "gather_v", r, "ncclRecv");
        }
        off += bytes;
    }
    /* The group is closed whatever happened inside it. */
    ncclResult_t r = ncclGroupEnd();
    if (s == CT_OK && r != ncclSuccess) s = nccl_failed(m, "gather_v", r, "ncclGroupEnd");
    return s;
}

/* Counts (and dtypes) first, over MPI, so every rank reaches the same verdict and knows the sizes;
 * then the blocks travel to the root by NCCL send/receive. */
static ct_status nccl_gather_v(ct_comm *c, const ct_tensor *in, int root, ct_tensor *out) {
    nccl_comm *m = self(c);
    CT_TRY(usable(m));
    if (in->device.kind == CT_DEVICE_CPU) return m->mpi->ops->gather_v(m->mpi, in, root, out);
    CT_TRY(need_gpu(m, in, "in"));
    int world = c->world_size;
    bool is_root = c->rank == root;
    int64_t mine[2] = {ct_tensor_numel(in), (int64_t)in->dtype}, two = 2, all_n = 2 * (int64_t)world;
    int64_t *info = malloc((size_t)all_n * sizeof *info);
    if (!info) return ct_error(CT_ERR_NOMEM, "cannot allocate the counts of %d ranks", world);
    ct_tensor tmine = ct_tensor_view(mine, CT_I64, CT_CPU, 1, &two);
    ct_tensor tall = ct_tensor_view(info, CT_I64, CT_CPU, 1, &all_n);
    ct_status s = m->mpi->ops->all_gather(m->mpi, &tmine, &tall);
    if (s != CT_OK) {
        give_up(m, "gather_v", s);
        return s; /* info may still be written by the given-up exchange: leave it */
    }
    int64_t total = 0;
    s = ct_comm_gather_v_total(info, world, root, &total);
    if (s != CT_OK || total == 0) {
        free(info);
        return s;
    }
    if (is_root && (s = ct_tensor_alloc(out, in->dtype, in->device, 1, &total)) != CT_OK) {
        free(info);
        return s;
    }
    /* begin orders the transfers after the allocation's zeroing (on the caller's stream). */
    s = begin(m, "gather_v");
    if (s == CT_OK) s = gather_v_transfers(m, in, root, info, out);
    if (s == CT_OK) s = finish(m, "gather_v");
    /* After a failure here the GPU may still write out, and freeing device memory waits for the whole
     * device: leave it (as comm_mpi.c leaves a given-up gather's buffers to MPI). */
    if (s != CT_OK) out->data = NULL;
    free(info);
    return s;
}

static void stop_watchdog(nccl_comm *m) {
    if (!m->have_watchdog) return;
    pthread_mutex_lock(&m->mu);
    m->stop = true;
    pthread_cond_signal(&m->wake);
    pthread_mutex_unlock(&m->mu);
    pthread_join(m->watchdog, NULL);
    m->have_watchdog = false;
}

static void nccl_abort(ct_comm *c, int code) {
    nccl_comm *m = self(c);
    /* The watchdog must not query a communicator being aborted. Aborting frees the GPU from
     * collectives that will never complete; then MPI ends every rank. */
    stop_watchdog(m);
    if (m->nccl) ncclCommAbort(m->nccl);
    m->mpi->ops->abort(m->mpi, code);
}

/* --- the watchdog -------------------------------------------------------------------------------- */

/* Whether a request in flight is overdue or failed (why says which), or NCCL reports an error while
 * requests are pending. Called with m->mu held. */
static bool overdue(nccl_comm *m, char *why, size_t cap) {
    bool pending = false;
    double now = ct_monotonic_seconds();
    for (nccl_req *r = m->inflight; r; r = r->next) {
        cudaError_t e = cudaEventQuery(r->done);
        if (e == cudaSuccess) continue;
        if (e != cudaErrorNotReady) {
            snprintf(why, cap, "the GPU failed: %s", cudaGetErrorString(e));
            return true;
        }
        pending = true;
        if (now - r->started >= m->base.timeout_s) {
            snprintf(why, cap, "no answer from the other ranks within %g s (ddp_timeout)", m->base.timeout_s);
            return true;
        }
    }
    ncclResult_t state = ncclSuccess;
    if (pending && ncclCommGetAsyncError(m->nccl, &state) == ncclSuccess && state != ncclSuccess &&
        state != ncclInProgress) {
        snprintf(why, cap, "NCCL failed: %s", ncclGetErrorString(state));
        return true;
    }
    return false;
}

/* Checks the requests in flight a few times per timeout (at least once a second). The communicator's
 * thread may be blocked inside CUDA behind them, so this thread ends the job itself: MPI_Abort only
 * asks the launcher to kill the job's processes, which is safe from here. */
static void *watchdog_main(void *arg) {
    nccl_comm *m = arg;
    cudaSetDevice(m->device);
    double period = m->base.timeout_s / 10;
    period = period < 0.05 ? 0.05 : period > 1.0 ? 1.0 : period;
    pthread_mutex_lock(&m->mu);
    while (!m->stop) {
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        long ns = until.tv_nsec + (long)(period * 1e9);
        until.tv_sec += ns / 1000000000L;
        until.tv_nsec = ns % 1000000000L;
        pthread_cond_timedwait(&m->wake, &m->mu, &until);
        if (m->stop) break;
        char why[256];
        if (!overdue(m, why, sizeof why)) continue;
        pthread_mutex_unlock(&m->mu);
        fprintf(stderr, "all_reduce (rank %d/%d): %s; ending the job\n", m->base.rank, m->base.world_size, why);
        fflush(NULL);
        m->mpi->ops->abort(m->mpi, WATCHDOG_EXIT);
        _exit(WATCHDOG_EXIT); /* should MPI_Abort return */
    }
    pthread_mutex_unlock(&m->mu);
    return NULL;
}

/* --- creation and destruction -------------------------------------------------------------------- */

/* Frees what exists of m. drained: the NCCL stream has finished everything (else the communicator is
 * aborted and device memory that a collective may still touch is left alone). */
static void release(nccl_comm *m, bool drained) {
    stop_watchdog(m);
    if (m->nccl) {
        /* Nothing in flight (a given-up collective that a late peer completed counts as done): the
         * normal end; else abort, which does not wait for collectives that will never complete. */
        if (drained)
            ncclCommDestroy(m->nccl);
        else
            ncclCommAbort(m->nccl);
    }
    nccl_req *lists[2] = {m->inflight, m->pool};
    for (int k = 0; k < 2; k++)
        for (nccl_req *r = lists[k], *next; r; r = next) {
            next = r->next;
            if (drained) cudaEventDestroy(r->done);
            free(r);
        }
    if (drained) {
        if (m->ready) cudaEventDestroy(m->ready);
        if (m->done) cudaEventDestroy(m->done);
        if (m->scratch) ct_cuda_free(m->device, m->scratch);
    }
    if (m->stream) cudaStreamDestroy(m->stream); /* returns at once; pending work finishes first */
    if (m->have_mu) {
        pthread_cond_destroy(&m->wake);
        pthread_mutex_destroy(&m->mu);
    }
    ct_comm_free(m->mpi);
    free(m);
}

/* Waits a few seconds for the NCCL stream to finish (requests never waited, a late peer). */
static ct_poll test_stream(void *ctx) {
    cudaError_t e = cudaStreamQuery(((nccl_comm *)ctx)->stream);
    return e == cudaSuccess ? CT_POLL_DONE : e == cudaErrorNotReady ? CT_POLL_PENDING : CT_POLL_FAILED;
}

static bool drain(nccl_comm *m) {
    if (!m->stream) return true;
    return ct_poll_until(test_stream, m, DRAIN_LIMIT_S) == CT_POLL_DONE;
}

static void nccl_destroy(ct_comm *c) {
    nccl_comm *m = self(c);
    release(m, drain(m));
}

static const ct_comm_ops nccl_ops = {
    .size = sizeof(ct_comm_ops),
    .name = "nccl",
    .all_reduce = nccl_all_reduce,
    .all_reduce_start = nccl_all_reduce_start,
    .wait = nccl_wait,
    .broadcast = nccl_broadcast,
    .all_gather = nccl_all_gather,
    .gather_v = nccl_gather_v,
    .reduce_scatter = nccl_reduce_scatter,
    .barrier = nccl_barrier,
    .abort = nccl_abort,
    .destroy = nccl_destroy,
    .device_kinds = 1u << CT_DEVICE_CUDA,
};

static ct_status cuda_failed(cudaError_t e, const char *what) {
    cudaGetLastError();
    return ct_error(CT_ERR_DEVICE, "%s: %s", what, cudaGetErrorString(e));
}

/* This rank's GPU, stream, events, scratch memory and lock: everything local. */
static ct_status setup_local(nccl_comm *m, int device) {
    int visible = ct_cuda_device_count();
    int dev = device >= 0 ? device : m->base.local_rank;
    if (dev >= visible)
        return ct_error(CT_ERR_DEVICE, "cuda:%d is not there: %d CUDA device(s) visible%s (one GPU per local rank)",
                        dev, visible, getenv("CUDA_VISIBLE_DEVICES") ? " (CUDA_VISIBLE_DEVICES is set)" : "");
    m->device = dev;
    CT_TRY(ct_cuda_set_device(dev));
    cudaError_t e = cudaStreamCreateWithFlags(&m->stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        m->stream = NULL;
        return cuda_failed(e, "cannot create the NCCL stream");
    }
    if ((e = cudaEventCreateWithFlags(&m->ready, cudaEventDisableTiming)) != cudaSuccess) {
        m->ready = NULL;
        return cuda_failed(e, "cannot create a CUDA event");
    }
    if ((e = cudaEventCreateWithFlags(&m->done, cudaEventDisableTiming)) != cudaSuccess) {
        m->done = NULL;
        return cuda_failed(e, "cannot create a CUDA event");
    }
    CT_TRY(ct_cuda_malloc(dev, 4, &m->scratch));
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(&m->wake, &ca);
    pthread_condattr_destroy(&ca);
    if (rc != 0) return ct_error(CT_ERR_STATE, "cannot create a condition variable");
    if (pthread_mutex_init(&m->mu, NULL) != 0) {
        pthread_cond_destroy(&m->wake);
        return ct_error(CT_ERR_STATE, "cannot create a mutex");
    }
    m->have_mu = true;
    return CT_OK;
}

/* The module's entry point for ct_comm_nccl_create (dist/nccl/nccl_entry.c finds it by this name). */
ct_status ct_cuda_module_nccl_create(double timeout_s, int device, ct_comm **out);

ct_status ct_cuda_module_nccl_create(double timeout_s, int device, ct_comm **out) {
    CT_ASSERT(out);
    *out = NULL;
    if (!(timeout_s > 0) || !isfinite(timeout_s))
        return ct_error(CT_ERR_INVALID_ARG,
                        "nccl communicator: ddp_timeout must be a positive number of seconds, got %g", timeout_s);
    ct_comm *mpi = NULL;
    ct_status s = ct_comm_mpi_create(timeout_s, &mpi);
    if (s != CT_OK) return ct_error_prefix(s, "nccl communicator: ");
    nccl_comm *m = calloc(1, sizeof *m);
    if (!m) {
        ct_comm_free(mpi);
        return ct_error(CT_ERR_NOMEM, "nccl communicator: cannot allocate");
    }
    m->mpi = mpi;
    m->base = (ct_comm){.ops = &nccl_ops, .rank = mpi->rank, .world_size = mpi->world_size,
                        .local_rank = mpi->local_rank, .local_world_size = mpi->local_world_size,
                        .timeout_s = timeout_s};
    int rank = mpi->rank, world = mpi->world_size;

    /* Local setup, and rank 0's id. */
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    s = setup_local(m, device);
    if (s == CT_OK && rank == 0) {
        ncclResult_t r = ncclGetUniqueId(&id);
        if (r != ncclSuccess) s = ct_error(CT_ERR_STATE, "ncclGetUniqueId failed: %s", ncclGetErrorString(r));
    }
    /* Everyone learns whether anyone failed (rank + 1 of the highest that did), so either all enter
     * ncclCommInitRank or none does. */
    int64_t failed = s != CT_OK ? rank + 1 : 0, one = 1;
    char mine[512] = "";
    if (s != CT_OK) snprintf(mine, sizeof mine, "%s", ct_last_error());
    ct_tensor tf = ct_tensor_view(&failed, CT_I64, CT_CPU, 1, &one);
    ct_status agreed = mpi->ops->all_reduce(mpi, &tf, CT_MAX);
    if (agreed == CT_OK && failed == 0) {
        int64_t nid = (int64_t)sizeof id;
        ct_tensor tid = ct_tensor_view(&id, CT_U8, CT_CPU, 1, &nid);
        agreed = mpi->ops->broadcast(mpi, &tid, 0);
    }
    if (s != CT_OK || agreed != CT_OK || failed != 0) {
        if (s != CT_OK)
            s = ct_error(s, "%s", mine);
        else if (agreed != CT_OK)
            s = agreed;
        else
            s = ct_error(CT_ERR_STATE, "rank %d could not set up its GPU; see its message", (int)failed - 1);
        bool drained = agreed == CT_OK; /* a given-up MPI exchange leaves MPI state, not GPU work */
        release(m, drained);
        return ct_error_prefix(s, "nccl communicator (rank %d/%d): ", rank, world);
    }
    ncclResult_t r = ncclCommInitRank(&m->nccl, world, id, rank);
    if (r != ncclSuccess) {
        m->nccl = NULL;
        s = ct_error(CT_ERR_STATE, "ncclCommInitRank failed: %s", ncclGetErrorString(r));
        release(m, true);
        return ct_error_prefix(s, "nccl communicator (rank %d/%d): ", rank, world);
    }
    if (pthread_create(&m->watchdog, NULL, watchdog_main, m) != 0) {
        release(m, true);
        return ct_error(CT_ERR_STATE, "nccl communicator (rank %d/%d): cannot start the watchdog thread", rank, world);
    }
    m->have_watchdog = true;
    *out = &m->base;
    return CT_OK;
}
