/* The MPI communicator under `mpirun -np N`: the communicator conformance suite
 * (tests/comm/comm_conformance.h: every collective against values each rank computes locally, exact
 * and random data, non-blocking all-reduces waited in reverse order, check_same with mismatching
 * ranks, validation errors, and the timeout: rank 0 skips a barrier the others enter, and they get
 * CT_ERR_STATE after ~1 s instead of hanging) on CPU tensors, and what only MPI has: the launcher's
 * rank and local rank, all-reduce and broadcast split into chunks (CT_MPI_MAX_COUNT), the default
 * communicator under mpirun, and the refusal of GPU tensors. Each rank prints "N passed, M failed"
 * and exits non-zero on a failure; a collective that fails unexpectedly ends the job at once
 * (ct_comm_abort), so a broken build never leaves ranks waiting for each other. */
#include <stdlib.h>
#include <string.h>

#include "comm_conformance.h"
#include "dist/comm.h"
#include "testlib.h"

static ct_comm_test ct;
static ct_comm *comm;
static int R, W; /* this rank, world size */

#define MUST(expr) CT_COMM_MUST(&ct, expr)

static void identity(void) {
    const char *size = getenv("OMPI_COMM_WORLD_SIZE"), *rank = getenv("OMPI_COMM_WORLD_RANK");
    const char *lrank = getenv("OMPI_COMM_WORLD_LOCAL_RANK"), *lsize = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    CHECK(strcmp(comm->ops->name, "mpi") == 0, "communicator '%s' under mpirun", comm->ops->name);
    CHECK(size && atoi(size) == W && rank && atoi(rank) == R, "rank %d/%d, mpirun says %s/%s", R, W,
          rank ? rank : "?", size ? size : "?");
    CHECK(lrank && atoi(lrank) == comm->local_rank && lsize && atoi(lsize) == comm->local_world_size,
          "local rank %d/%d, mpirun says %s/%s", comm->local_rank, comm->local_world_size, lrank ? lrank : "?",
          lsize ? lsize : "?");
    CHECK(W >= 2, "run this under mpirun with at least 2 ranks (world size %d)", W);
}

/* A second communicator whose MPI calls move at most 5 elements: all-reduce and broadcast must
 * split and reassemble. Destroying it must leave the first one (and MPI) working. */
static void chunked(void) {
    setenv("CT_MPI_MAX_COUNT", "5", 1);
    ct_comm *c = NULL;
    MUST(ct_comm_mpi_create(30, &c));
    unsetenv("CT_MPI_MAX_COUNT");
    ct_tensor t = ct_comm_test_host(CT_F64, 23);
    ct_comm_test_fill(&ct, &t, 700, R, 0);
    MUST(ct_comm_all_reduce(c, &t, CT_SUM));
    CHECK(ct_comm_test_wrong(&ct, &t, 700, CT_SUM, 0) == 0, "chunked all_reduce of 23 elements in 5s");
    ct_comm_test_non_blocking(&ct, c, "chunked non-blocking", 710, 60); /* 12 chunks at most */
    for (int64_t i = 0; i < 23; i++) ct_tensor_set(&t, i, (double)(ct_comm_test_hash(&ct, 720, R, i) % 1000));
    MUST(ct_comm_broadcast(c, &t, W - 1));
    int64_t wrong = 0;
    for (int64_t i = 0; i < 23; i++) wrong += ct_tensor_get(&t, i) != (double)(ct_comm_test_hash(&ct, 720, W - 1, i) % 1000);
    CHECK(wrong == 0, "chunked broadcast: %lld wrong", (long long)wrong);
    ct_tensor_free(&t);
    ct_comm_free(c);

    /* Launched by mpirun with several ranks, the default is MPI. */
    MUST(ct_comm_create_default(30, &c));
    CHECK(strcmp(c->ops->name, "mpi") == 0 && c->world_size == W && c->rank == R, "default communicator: %s %d/%d",
          c->ops->name, c->rank, c->world_size);
    MUST(ct_comm_barrier(c));
    ct_comm_free(c);
}

/* MPI takes host memory only: a device tensor is staged through a host copy by the wrappers (the
 * checked device's runs under mpirun, tests/cli/checked_device.sh, compare the results), so a device
 * this build or machine lacks fails in that copy, named, and MPI itself never sees device memory. */
static void cpu_only(void) {
    ct_tensor f = ct_comm_test_host(CT_F32, 4), gpu = f;
    gpu.device = (ct_device){CT_DEVICE_CUDA, 0};
    char prefix[64];
    snprintf(prefix, sizeof prefix, "all_reduce (rank %d/%d): ", R, W);
    if (ct_device_check(gpu.device) != CT_OK) CHECK_ERR(ct_comm_all_reduce(comm, &gpu, CT_SUM), CT_ERR_DEVICE, prefix);
    ct_tensor_free(&f);
}

int main(void) {
    ct_test_begin("test_comm_mpi");
    comm = NULL;
    ct_status s = ct_comm_mpi_create(30, &comm);
    if (s != CT_OK) {
        printf("test_comm_mpi: cannot create the MPI communicator: %s\n", ct_last_error());
        return 1;
    }
    ct_comm_test_init(&ct, comm, CT_CPU, &ct_comm_test_host_sizes, ct_comm_mpi_create);
    R = ct.R;
    W = ct.W;

    identity();
    chunked();
    cpu_only();
    ct_comm_test_run(&ct); /* ends with an all-reduce after the given-up barrier and the extra communicators */

    int rc = ct_test_finish();
    ct_comm_free(comm);
    return rc;
}
