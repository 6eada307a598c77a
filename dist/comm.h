/* Communicators: the collectives data-parallel training and evaluation need, behind one vtable.
 *
 * Implementations: "single" (one process; every collective is a copy or a no-op) and "mpi"
 * (OpenMPI; `mpirun -np N ctrainer ...` or `srun`). ct_comm_create_default picks MPI when the process
 * was launched by mpirun/srun with more than one rank (OMPI_COMM_WORLD_SIZE / PMI_SIZE /
 * SLURM_STEP_NUM_TASKS > 1; not SLURM_NTASKS, which a batch script that is one process also has) and
 * single otherwise, so a plain `ctrainer train` never needs mpirun (single never touches MPI). NCCL
 * (dist/nccl/) is behind the same table for CUDA tensors.
 *
 * Buffers are ct_tensors on any device: a communicator takes host memory and the device kinds it names
 * (device_kinds: NCCL's CUDA); the wrappers stage other device tensors through a host copy, so MPI
 * alone serves a GPU job too (gather_v takes host tensors only). Reductions (all_reduce,
 * reduce_scatter) take f32, f64 and i64; broadcast, all_gather and gather_v move any dtype. All-reduce
 * is in place. Non-blocking all-reduce returns a request completed by ct_comm_wait, so gradient buckets
 * can travel while backward still runs; MPI without a progress thread moves data only inside MPI calls,
 * so each start (and each wait) also pushes the buckets already in flight.
 *
 * Failure: every blocking call and every wait gives up after the communicator's timeout
 * (ddp_timeout seconds, default 1800) and returns CT_ERR_STATE naming the collective and the rank;
 * ct_comm_abort ends every rank of the job (MPI_Abort) with an exit code, so a rank that fails never
 * leaves the others hanging. Messages carry "rank R/W" so logs from several ranks can be told apart.
 * A collective given up at the timeout stays in flight inside MPI (nothing can cancel one): its
 * buffers may still be written, and every later call on that communicator fails with CT_ERR_STATE
 * ("unusable"); the only sensible next step is ct_comm_abort. Errors found by the wrappers'
 * validation are local (the other ranks, which passed theirs, wait until their timeout), except
 * gather_v's dtype and size checks, which every rank makes on the gathered counts.
 *
 * The vtable follows the project's rule: size first, members only appended, NULL = unsupported
 * (CT_ERR_UNSUPPORTED) except where a default is stated. */
#ifndef CT_COMM_H
#define CT_COMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "core/tensor.h"

typedef enum ct_reduce { CT_SUM = 0, CT_MIN = 1, CT_MAX = 2 } ct_reduce;

typedef struct ct_comm ct_comm;
typedef struct ct_comm_request ct_comm_request; /* an in-flight non-blocking collective */

typedef struct ct_comm_ops {
    size_t size;
    const char *name; /* "single", "mpi" */
    /* In place over t (f32, f64 or i64; any shape, contiguous). */
    ct_status (*all_reduce)(ct_comm *c, ct_tensor *t, ct_reduce op);
    /* Non-blocking all_reduce; *req is completed (and freed) by ct_comm_wait. t must stay untouched
     * until then. */
    ct_status (*all_reduce_start)(ct_comm *c, ct_tensor *t, ct_reduce op, ct_comm_request **req);
    ct_status (*wait)(ct_comm *c, ct_comm_request *req);
    /* t on `root` is copied to every rank's t (same shape and dtype everywhere). */
    ct_status (*broadcast)(ct_comm *c, ct_tensor *t, int root);
    /* out = concatenation of every rank's `in` (same numel everywhere), rank order; out.numel =
     * world x in.numel. `in` may be this rank's own block of out (in place, as ZeRO-1 gathers
     * parameter shards); any other overlap is CT_ERR_INVALID_ARG. */
    ct_status (*all_gather)(ct_comm *c, const ct_tensor *in, ct_tensor *out);
    /* Variable counts: rank r sends in (any numel n_r, same dtype); on root, *out is allocated
     * (caller frees with ct_tensor_free) as the 1-D concatenation in rank order; elsewhere, and on
     * the root when every count is 0, *out is empty (numel 0, data NULL; ct_tensor_free is safe).
     * Whatever *out held before is overwritten, not freed. */
    ct_status (*gather_v)(ct_comm *c, const ct_tensor *in, int root, ct_tensor *out);
    /* in has world x n elements; rank r receives the op-reduction of every rank's block r into out
     * (n elements). in and out must not overlap. */
    ct_status (*reduce_scatter)(ct_comm *c, const ct_tensor *in, ct_tensor *out, ct_reduce op);
    ct_status (*barrier)(ct_comm *c);
    /* Ends the whole job with exit code `code` (never returns; NULL: exit(code) of this process). */
    void (*abort)(ct_comm *c, int code);
    void (*destroy)(ct_comm *c);
    /* Device kinds besides the CPU whose memory the collectives take, as bits (1u << kind; NCCL:
     * CUDA). 0: host memory only, and the wrappers stage a device tensor through a host copy (the
     * non-blocking all-reduce then completes in its start). gather_v always takes host memory. */
    unsigned device_kinds;
} ct_comm_ops;

struct ct_comm {
    const ct_comm_ops *ops;
    int rank, world_size;
    int local_rank, local_world_size; /* within this node */
    double timeout_s;                 /* ddp_timeout */
    char label[96];                   /* what the next collective is for (ct_comm_set_label) */
};

/* One process: rank 0 of 1. */
ct_status ct_comm_single_create(ct_comm **out);
/* MPI_COMM_WORLD (initialising MPI with MPI_THREAD_FUNNELED if needed; finalised by destroy of the
 * last MPI communicator, after which MPI cannot be initialised again in this process: keep one
 * communicator for the whole run). Create and use it on one thread, the one that initialised MPI.
 * CT_ERR_UNSUPPORTED in builds without MPI (CTRAINER_MPI=OFF, dist/mpi/comm_mpi_off.c). */
ct_status ct_comm_mpi_create(double timeout_s, ct_comm **out);
/* NCCL for CUDA tensors, one process per GPU under mpirun (dist/nccl/comm_nccl.c): bootstrapped through an
 * MPI communicator of its own, which also carries every collective on CPU tensors. device: this
 * rank's GPU, or -1 for the one of its local rank. CUDA tensors must live on that GPU; blocking
 * collectives return when done, all_reduce_start/wait order the caller's stream after the
 * all-reduce without synchronising the host. CT_ERR_UNSUPPORTED in builds without CUDA or MPI. */
ct_status ct_comm_nccl_create(double timeout_s, int device, ct_comm **out);
/* MPI when launched by mpirun/srun with several ranks, single otherwise. In builds without MPI a
 * launch with several ranks is CT_ERR_UNSUPPORTED (each would otherwise train alone). */
ct_status ct_comm_create_default(double timeout_s, ct_comm **out);

/* The communicator for a job whose tensors live on dev: where dev's backend names collectives of its
 * own (core/ops/backend.h: NCCL for CUDA) and base has several processes, a new communicator of
 * that kind, bootstrapped over MPI, on this process's GPU dev; otherwise *out is NULL and base
 * serves (the wrappers stage device memory through the host). A build without NCCL warns and leaves
 * base. The caller frees *out before base. */
ct_status ct_comm_for_device(const ct_comm *base, ct_device dev, ct_comm **out);

/* The wrappers: validate (dtype, shapes, contiguity), then call the op; errors say
 * "<collective> (rank R/W): ...". */
ct_status ct_comm_all_reduce(ct_comm *c, ct_tensor *t, ct_reduce op);
/* Names what the NEXT wrapper call on c is for (printf format): its error then reads "<label>
 * (<collective>, rank R/W): ...", e.g. "gradient all-reduce (bucket 3 of 7) (all_reduce, rank 1/2): no
 * answer from the other ranks within 30 s (ddp_timeout)". That call uses the label up, whatever its
 * outcome; an unlabelled call reads "<collective> (rank R/W): ...". */
void ct_comm_set_label(ct_comm *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
ct_status ct_comm_all_reduce_start(ct_comm *c, ct_tensor *t, ct_reduce op, ct_comm_request **req);
ct_status ct_comm_wait(ct_comm *c, ct_comm_request *req);
ct_status ct_comm_broadcast(ct_comm *c, ct_tensor *t, int root);
ct_status ct_comm_all_gather(ct_comm *c, const ct_tensor *in, ct_tensor *out);
ct_status ct_comm_gather_v(ct_comm *c, const ct_tensor *in, int root, ct_tensor *out);
ct_status ct_comm_reduce_scatter(ct_comm *c, const ct_tensor *in, ct_tensor *out, ct_reduce op);
ct_status ct_comm_barrier(ct_comm *c);
void ct_comm_abort(ct_comm *c, int code);
/* What the launcher (mpirun, srun) told this process before any communicator exists: the number
 * of processes it started (1 when not launched by one) and this one's rank (-1 when unknown). */
int ct_comm_launcher_world_size(void);
int ct_comm_launcher_rank(void);
void ct_comm_free(ct_comm *c);

/* For communicators' gather_v: the check every rank makes on the (count, dtype) pairs gathered from
 * the world ranks into info[2 * world]: every rank sends the root's dtype (else CT_ERR_DTYPE naming
 * the first that does not); *total is the sum of the counts. */
ct_status ct_comm_gather_v_total(const int64_t *info, int world, int root, int64_t *total);

/* Helpers over the wrappers. */
/* All-reduce of n doubles / int64s in memory (metric states). */
ct_status ct_comm_all_reduce_f64(ct_comm *c, double *v, int64_t n, ct_reduce op);
ct_status ct_comm_all_reduce_i64(ct_comm *c, int64_t *v, int64_t n, ct_reduce op);
/* Checks that every rank holds the same 64-bit value (a config hash): CT_ERR_CONFIG on every rank,
 * naming the ranks that differ from rank 0, when they do not. `what` names the value. */
ct_status ct_comm_check_same(ct_comm *c, uint64_t value, const char *what);

/* Hugging Face's TrainingArguments.main_process_first(local, desc) as a call: the main processes
 * (local rank 0 of each node when `local`, else rank 0) run fn(ctx) first while the others wait; then
 * the others run fn. For work every process needs but one (per node) should do first, such as
 * building a dataset cache on a node's disk (local) or on a shared file system (local = false), so
 * the others find it done. With c NULL or one process, just fn(ctx).
 *
 * Unlike Hugging Face, the main processes' outcome is shared (an i64 MAX all-reduce of rank + 1 of
 * a failed main, which is also the barrier the others wait in). When a main process fails, it
 * returns its own status and message, and every other process, main or not, does not run fn and
 * returns the failed main's status with "<desc>: the main process (rank R) failed: <its message>"
 * (R: the highest failing rank; its status and message are broadcast from it, so each process's log
 * has the reason and a job ends with one exit code; should that broadcast fail, CT_ERR_STATE
 * "<desc>: the main process (rank R) failed; see its message"). Failures of the later, non-main
 * calls are each process's own (they are not shared). The waiting is a collective: it gives up after
 * the communicator's timeout (ddp_timeout, which, as in Hugging Face, must cover the main processes'
 * work) with the collective's error, prefixed "<desc>: ". Every process must call this with the same
 * `local`. */
ct_status ct_comm_main_process_first(ct_comm *c, bool local, const char *desc, ct_status (*fn)(void *ctx),
                                     void *ctx);

#endif
