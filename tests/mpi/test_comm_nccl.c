/* The NCCL communicator under `mpirun -np N`, one GPU per rank: the communicator conformance suite
 * (tests/comm/comm_conformance.h, as tests/mpi/test_comm_mpi.c runs it for MPI) on GPU tensors with
 * buffers of up to millions of elements: all-reduce (f32/f64/i64 x sum/min/max, exact data; random
 * f32 within rounding and bit-identical on every rank), broadcast from non-zero roots, all-gather
 * (and in place), gather_v with a rank that sends nothing (the root's result on its GPU),
 * reduce-scatter, non-blocking all-reduces waited in reverse order, the metric helpers and check_same,
 * validation errors, and the timeout: rank 0 skips a barrier, the others get CT_ERR_STATE after ~1 s
 * and the communicator refuses further work. Then what only NCCL has: non-blocking all-reduces with
 * the stream ordering that DDP relies on: each bucket is written by a kernel on the caller's stream
 * right before its start (the collective must see it) and read by a kernel right after its wait
 * (which must see the reduced values) - with buckets of millions of elements, so a missing dependency
 * shows; CPU tensors through the same communicator (MPI underneath); and its own validation errors
 * (a GPU tensor of another device, CPU and GPU mixed).
 *
 * One rank (np 1, what a one-GPU machine can run) checks the same code paths with trivial results;
 * the cross-rank parts (mismatched dtypes, the timeout) need two.
 *
 * `test_comm_nccl watchdog T` is the failure of a non-blocking all-reduce: rank 1 never joins (alone,
 * rank 0 holds its own stream with a sleeping host function, so the all-reduce never starts), rank
 * 0 waits for it on the GPU and then blocks reading the result back; the watchdog must end the job
 * after the T s timeout with "all_reduce (rank 0/N): no answer ... ending the job" (ctest looks for it).
 *
 * Exits 77 (skipped) in builds without CUDA and where this node has fewer GPUs than ranks. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/ops/ops.h"
#include "comm_conformance.h"
#include "dist/comm.h"
#include "testlib.h"

#ifdef CT_HAVE_CUDA /* the whole test; without CUDA, main only says it is skipped */
#include <cuda_runtime_api.h>

#include "backends/cuda/cuda_rt.h"

static ct_comm_test ct;
static ct_comm *comm;
static int R, W;      /* this rank, world size */
static ct_device GPU; /* this rank's GPU */

#define MUST(expr) CT_COMM_MUST(&ct, expr)

static ct_tensor host1(ct_dtype dt, int64_t n) { return ct_comm_test_host(dt, n); }
static ct_tensor on_gpu(const ct_tensor *cpu) { return ct_comm_test_to_device(&ct, cpu); }
static ct_tensor on_host(const ct_tensor *gpu) { return ct_comm_test_to_host(&ct, gpu); }

static void identity(void) {
    const char *size = getenv("OMPI_COMM_WORLD_SIZE"), *rank = getenv("OMPI_COMM_WORLD_RANK");
    CHECK(strcmp(comm->ops->name, "nccl") == 0, "communicator '%s'", comm->ops->name);
    CHECK(size && atoi(size) == W && rank && atoi(rank) == R, "rank %d/%d, mpirun says %s/%s", R, W,
          rank ? rank : "?", size ? size : "?");
}

/* A copy by a kernel on the caller's stream: dropout with p = 0 writes y = x * 1 (exact). */
static void kernel_copy(const ct_tensor *x, ct_tensor *y, ct_tensor *mask) {
    ct_dropout_ctx ctx = {{1, 2}, 3, 0};
    ct_op_dropout_forward(x, 0.0, &ctx, mask, y);
}

/* Buckets as DDP makes them: written by a kernel right before the start, read by a kernel right
 * after the wait; started in order, waited in reverse. */
static void non_blocking(void) {
    enum { K = 6 };
    const ct_dtype dts[K] = {CT_F32, CT_F32, CT_F64, CT_F32, CT_F64, CT_F32};
    ct_tensor src[K], bucket[K], after[K], mask[K];
    ct_comm_request *req[K];
    for (int k = 0; k < K; k++) {
        uint64_t tag = 800 + (uint64_t)k;
        int64_t n = k == 3   ? 0
                    : k == 1 ? ct_comm_test_size(&ct, tag, 3000000, 5000000)
                             : ct_comm_test_size(&ct, tag, 1, 200000);
        ct_tensor h0 = host1(dts[k], n);
        ct_comm_test_fill(&ct, &h0, tag, R, 0);
        src[k] = on_gpu(&h0);
        ct_tensor_free(&h0);
        MUST(ct_tensor_alloc(&bucket[k], dts[k], GPU, 1, &n));
        MUST(ct_tensor_alloc(&after[k], dts[k], GPU, 1, &n));
        MUST(ct_tensor_alloc(&mask[k], CT_U8, GPU, 1, &n));
    }
    for (int k = 0; k < K; k++) {
        if (ct_tensor_numel(&src[k])) kernel_copy(&src[k], &bucket[k], &mask[k]);
        MUST(ct_comm_all_reduce_start(comm, &bucket[k], CT_SUM, &req[k]));
    }
    for (int k = K - 1; k >= 0; k--) {
        MUST(ct_comm_wait(comm, req[k]));
        if (ct_tensor_numel(&src[k])) kernel_copy(&bucket[k], &after[k], &mask[k]);
    }
    for (int k = 0; k < K; k++) {
        ct_tensor back = on_host(&after[k]);
        int64_t wrong = ct_comm_test_wrong(&ct, &back, 800 + (uint64_t)k, CT_SUM, 0);
        CHECK(wrong == 0, "non-blocking bucket %d (%lld %s): %lld wrong after the wait", k,
              (long long)ct_tensor_numel(&back), ct_dtype_name(dts[k]), (long long)wrong);
        ct_tensor ts[5] = {back, src[k], bucket[k], after[k], mask[k]};
        for (int i = 0; i < 5; i++) ct_tensor_free(&ts[i]);
    }
}

/* CPU tensors through the NCCL communicator go through its MPI side (the suite's helpers and
 * check_same do too): the conformance suite's non-blocking buckets on host memory. */
static void cpu_tensors(void) {
    ct_comm_test host = ct;
    host.device = CT_CPU;
    host.sizes = &ct_comm_test_host_sizes;
    host.where[0] = 0;
    ct_tensor c = host1(CT_F32, 1000);
    ct_comm_test_fill(&host, &c, 160, R, 0);
    ct_comm_request *req;
    MUST(ct_comm_all_reduce_start(comm, &c, CT_MAX, &req));
    MUST(ct_comm_wait(comm, req));
    CHECK(ct_comm_test_wrong(&host, &c, 160, CT_MAX, 0) == 0, "non-blocking all_reduce of a CPU tensor");
    ct_tensor_free(&c);
    ct_comm_test_non_blocking(&host, comm, "non-blocking all_reduce of CPU tensors", 170, 1000);
}

static void validation(void) {
    ct_tensor h = host1(CT_F32, 4), g = on_gpu(&h);
    ct_tensor elsewhere = g;
    elsewhere.device.index = GPU.index + 1; /* refused before anything touches it */
    char prefix[64], dev[32];
    snprintf(prefix, sizeof prefix, "all_reduce (rank %d/%d): ", R, W);
    snprintf(dev, sizeof dev, "works on cuda:%d", GPU.index);
    CHECK_ERR(ct_comm_all_reduce(comm, &elsewhere, CT_SUM), CT_ERR_DEVICE, prefix, dev);
    ct_tensor out = host1(CT_F32, 4 * (int64_t)W);
    snprintf(prefix, sizeof prefix, "all_gather (rank %d/%d): ", R, W);
    CHECK_ERR(ct_comm_all_gather(comm, &g, &out), CT_ERR_DEVICE, prefix, "both CPU tensors or both GPU tensors");
    ct_tensor ts[3] = {h, g, out};
    for (int i = 0; i < 3; i++) ct_tensor_free(&ts[i]);
}

/* Another NCCL communicator for the suite's timeout check (this rank's GPU). */
static ct_status nccl_create(double timeout_s, ct_comm **out) { return ct_comm_nccl_create(timeout_s, -1, out); }

/* Holds the caller's stream (a host function on it) far beyond the timeout. */
static void CUDART_CB hold_stream(void *arg) { sleep((unsigned)(*(double *)arg * 10 + 10)); }

/* Rank 1 never starts its all-reduce (alone, rank 0 holds its own stream before starting, so the
 * all-reduce cannot begin either); rank 0's host blocks reading the result back, and only the
 * watchdog can end the job. */
static int watchdog(double timeout_s) {
    MUST(ct_comm_nccl_create(timeout_s, -1, &comm));
    R = comm->rank;
    W = comm->world_size;
    GPU = (ct_device){CT_DEVICE_CUDA, comm->local_rank};
    ct.comm = comm; /* for MUST and on_gpu; no suite here */
    ct.device = GPU;
    int64_t n = 1000;
    ct_tensor h = host1(CT_F32, n), g = on_gpu(&h);
    MUST(ct_comm_barrier(comm));
    if (R == 1) {
        sleep((unsigned)(10 * timeout_s + 10));
        printf("rank 1: the job is still running %g s after the timeout\n", 10 * timeout_s);
        return 1;
    }
    if (W == 1 && cudaLaunchHostFunc((cudaStream_t)ct_cuda_stream(), hold_stream, &timeout_s) != cudaSuccess) {
        printf("rank 0: cannot hold the stream\n");
        return 1;
    }
    ct_comm_request *req;
    MUST(ct_comm_all_reduce_start(comm, &g, CT_SUM, &req));
    MUST(ct_comm_wait(comm, req));
    ct_tensor back = on_host(&g); /* blocks until the watchdog ends the job */
    printf("rank %d: read the result back although rank 1 never joined\n", R);
    ct_tensor_free(&back);
    return 1;
}

/* This node's rank count from the launcher, before MPI starts. */
static int local_ranks(void) {
    const char *vars[] = {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"};
    for (int i = 0; i < 3; i++) {
        const char *v = getenv(vars[i]);
        if (v && atoi(v) > 0) return atoi(v);
    }
    return 1;
}

#endif /* CT_HAVE_CUDA */

int main(int argc, char **argv) {
#ifndef CT_HAVE_CUDA
    (void)argc;
    (void)argv;
    printf("test_comm_nccl: skipped (this build has no CUDA backend)\n");
    return 77;
#else
    int gpus = ct_cuda_device_count(), need = local_ranks();
    if (gpus < need) {
        printf("test_comm_nccl: skipped (%d CUDA device(s) for %d ranks on this node)\n", gpus, need);
        return 77;
    }
    if (argc == 3 && strcmp(argv[1], "watchdog") == 0) return watchdog(atof(argv[2]));

    ct_test_begin("test_comm_nccl");
    ct_status s = ct_comm_nccl_create(30, -1, &comm);
    if (s != CT_OK) {
        printf("test_comm_nccl: cannot create the NCCL communicator: %s\n", ct_last_error());
        return 1;
    }
    GPU = (ct_device){CT_DEVICE_CUDA, comm->local_rank};
    ct_comm_test_init(&ct, comm, GPU, &ct_comm_test_gpu_sizes, nccl_create);
    R = ct.R;
    W = ct.W;

    identity();
    non_blocking();
    cpu_tensors();
    validation();
    /* Last: the suite ends with its timeout check (two ranks or more; one rank cannot be left waiting
     * for another) and an all-reduce after it. */
    ct_comm_test_run(&ct);

    int rc = ct_test_finish();
    ct_comm_free(comm);
    return rc;
#endif
}
