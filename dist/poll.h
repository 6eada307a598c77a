/* The one waiting loop of the communicators: polls a completion test until it reports done, fails,
 * or a time limit passes. MPI requests (dist/mpi/comm_mpi.c) and CUDA events of NCCL work
 * (dist/nccl/comm_nccl.c) are waited for this way rather than with a blocking wait, because a
 * blocking MPI_Wait or cudaEventSynchronize cannot be given a timeout (ddp_timeout), and a peer
 * that died must end the wait with a message rather than hang the job.
 *
 * The wait is spent in three phases: pure polling for the first CT_POLL_SPIN_S (a small collective
 * finishes within microseconds, and even the shortest sleep costs ~50 us of timer slack), then
 * polling with sched_yield until CT_POLL_YIELD_S (ranks are often oversubscribed: a rank still
 * computing on this core gets it at once), then polling with a sleep growing to
 * CT_POLL_MAX_PAUSE_NS, so a long wait for a slow peer does not burn a core its OpenMP threads or
 * another rank could use. */
#ifndef CT_DIST_POLL_H
#define CT_DIST_POLL_H

#ifdef __cplusplus
extern "C" {
#endif

#define CT_POLL_SPIN_S 100e-6
#define CT_POLL_YIELD_S 50e-3
enum { CT_POLL_MAX_PAUSE_NS = 200000 };

/* What a test says of the thing waited for, and what ct_poll_until says of the wait. */
typedef enum ct_poll {
    CT_POLL_PENDING,  /* test: not yet */
    CT_POLL_DONE,     /* complete */
    CT_POLL_FAILED,   /* the test found an error (it keeps what it needs to report it) */
    CT_POLL_TIMED_OUT /* ct_poll_until only: timeout_s passed without completion */
} ct_poll;

/* Calls test(ctx) until it returns CT_POLL_DONE or CT_POLL_FAILED (returned as they are), or until
 * timeout_s seconds have passed since the call (CT_POLL_TIMED_OUT; the test ran at least once).
 * The caller words the error: it knows what it was waiting for. */
ct_poll ct_poll_until(ct_poll (*test)(void *ctx), void *ctx, double timeout_s);

#ifdef __cplusplus
}
#endif

#endif
