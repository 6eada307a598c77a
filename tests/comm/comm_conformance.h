/* The communicator conformance suite: one list of checks that every communicator (dist/comm.h) must
 * pass, run by each communicator's own test: tests/unit/test_comm_single.c (one process),
 * tests/mpi/test_comm_mpi.c (`mpirun -np 2/3/4`) and tests/mpi/test_comm_nccl.c (one GPU per rank,
 * collectives on GPU tensors). What only one communicator has (MPI's chunking and its GPU refusal,
 * NCCL's stream ordering, single's copies and the wrappers' vtable rules) stays in that test.
 *
 * Every check compares against values each rank computes locally: every rank can generate every
 * other rank's data from rank 0's seed, so a wrong block, a wrong root, a wrong reduction or a lost
 * chunk shows up on the rank that received it. Integer-valued f32, dyadic f64 and i64 data make sums
 * exact whatever order the communicator adds in; random f32 data checks the sum within rounding and
 * that every rank got the bit-identical result (DDP depends on it). Tensors live on the device the
 * test names (filled on the host and copied there, read back after the collective); the sizes are
 * the test's (a GPU run uses larger buffers). A collective that fails unexpectedly ends the job at
 * once (ct_comm_abort), so a broken build never leaves ranks waiting for each other. */
#ifndef CT_COMM_CONFORMANCE_H
#define CT_COMM_CONFORMANCE_H

#include <stdint.h>

#include "dist/comm.h"
#include "testlib.h"

/* Buffer sizes of the checks (element counts; ranges are [lo, hi], drawn from the shared seed). */
typedef struct ct_comm_test_sizes {
    int64_t all_reduce_max;    /* exact all-reduce of each dtype and reduction: 1 to this many */
    int64_t random[3][2];      /* random f32 sums: up to three ranges ({0, 0}: none) */
    int64_t broadcast_rows, broadcast_cols;
    int64_t all_gather_max;    /* per rank */
    int64_t gather_v_max;      /* per sending rank: 1 to this many (rank 1 sends nothing) */
    int64_t reduce_scatter_max; /* per block */
    int64_t non_blocking_big;  /* the largest of the non-blocking buckets */
} ct_comm_test_sizes;

extern const ct_comm_test_sizes ct_comm_test_host_sizes; /* CPU tensors (what the MPI test always used) */
extern const ct_comm_test_sizes ct_comm_test_gpu_sizes;  /* GPU tensors (what the NCCL test always used) */

typedef struct ct_comm_test {
    ct_comm *comm;
    ct_device device;                 /* where the collectives' tensors live */
    const ct_comm_test_sizes *sizes;
    /* Creates another communicator of the kind under test with the given timeout (the timeout check);
     * NULL: no timeout check (one process cannot be left waiting for another). */
    ct_status (*create)(double timeout_s, ct_comm **out);
    int R, W;        /* this rank, world size */
    uint64_t shared; /* rank 0's seed, the same on every rank */
    char where[32];  /* "" on the CPU, " on cuda:N" otherwise (for messages) */
} ct_comm_test;

/* Ends the job when a collective fails (the ranks are out of step after it). */
#define CT_COMM_MUST(ct, expr)                                                                                       \
    do {                                                                                                             \
        ct_status m_s_ = (expr);                                                                                     \
        CHECK(m_s_ == CT_OK, "%s -> %s: %s", #expr, ct_status_str(m_s_), ct_last_error());                           \
        if (m_s_ != CT_OK) {                                                                                         \
            ct_test_finish();                                                                                        \
            ct_comm_abort((ct)->comm, 1);                                                                            \
        }                                                                                                            \
    } while (0)

/* Fills *ct for communicator c and shares rank 0's test seed with every rank (a broadcast). */
void ct_comm_test_init(ct_comm_test *ct, ct_comm *c, ct_device device, const ct_comm_test_sizes *sizes,
                       ct_status (*create)(double timeout_s, ct_comm **out));

/* Every check below, in this order, then a final all-reduce of ones. */
void ct_comm_test_run(ct_comm_test *ct);

/* Rank and world in range, local rank and world in range. */
void ct_comm_test_identity(ct_comm_test *ct);
/* all_reduce of f32/f64/i64 x sum/min/max (odd sizes, 2-D when the size allows), and the
 * all_reduce_f64/i64 helpers on host memory. */
void ct_comm_test_all_reduce_exact(ct_comm_test *ct);
/* Random f32 sums within rounding, bit-identical on every rank (checked by an all_gather). */
void ct_comm_test_all_reduce_random(ct_comm_test *ct);
/* f64, i64, u8, f32 from non-zero roots: the root's data wins. */
void ct_comm_test_broadcast(ct_comm_test *ct);
/* all_gather of f32, i64, f64, and in place (in = this rank's block of out, as ZeRO-1 gathers). */
void ct_comm_test_all_gather(ct_comm_test *ct);
/* gather_v with variable counts (rank 1 sends nothing) to several roots, an empty gather_v, and with
 * two ranks or more mismatched dtypes (every rank fails alike). */
void ct_comm_test_gather_v(ct_comm_test *ct);
/* reduce_scatter of f32/f64/i64 x sum/max/min. */
void ct_comm_test_reduce_scatter(ct_comm_test *ct);
/* Buckets started one after another (as backward produces them; one empty, one i64 max) and waited
 * in reverse order, on communicator c (ct->comm or another of the same world). */
void ct_comm_test_non_blocking(ct_comm_test *ct, ct_comm *c, const char *label, uint64_t tag0, int64_t big);
/* check_same: equal values pass; with two ranks or more, ranks 1 and W-1 differing are named. */
void ct_comm_test_check_same(ct_comm_test *ct);
/* The wrappers' validation, the same on every rank: an i32 all-reduce, a root out of range, an
 * all_gather whose out is not world x in. */
void ct_comm_test_validation(ct_comm_test *ct);
/* With ct->create and two ranks or more: rank 0 skips a barrier the others enter; they give up after
 * ~1 s with CT_ERR_STATE naming the barrier and the rank, the communicator then refuses work
 * ("unusable"), and rank 0's late barrier lets everything end cleanly. */
void ct_comm_test_timeout(ct_comm_test *ct);

/* The data: element i of rank q's data for test `tag`, a shared size in [lo, hi], exact values that
 * sum exactly over the world, and the elements of host tensor t that differ from the op-reduction over
 * ranks of element offset + i. */
uint64_t ct_comm_test_hash(const ct_comm_test *ct, uint64_t tag, int q, int64_t i);
int64_t ct_comm_test_size(const ct_comm_test *ct, uint64_t tag, int64_t lo, int64_t hi);
void ct_comm_test_fill(const ct_comm_test *ct, ct_tensor *t, uint64_t tag, int q, int64_t offset);
int64_t ct_comm_test_wrong(const ct_comm_test *ct, const ct_tensor *t, uint64_t tag, ct_reduce op, int64_t offset);
/* A 1-D host tensor (n may be 0: an empty view); copies of a tensor on ct->device and on the host. */
ct_tensor ct_comm_test_host(ct_dtype dt, int64_t n);
ct_tensor ct_comm_test_to_device(ct_comm_test *ct, const ct_tensor *host);
ct_tensor ct_comm_test_to_host(ct_comm_test *ct, const ct_tensor *t);
const char *ct_comm_test_op_name(ct_reduce op);
double ct_comm_test_now(void);

#endif
