/* The single-process communicator and the wrappers every communicator goes through: the
 * communicator conformance suite on one rank (tests/comm/comm_conformance.h, which the MPI and NCCL
 * tests run too), then what only single has: each collective on one rank as the identity or a
 * bit-for-bit copy (fresh random data, every dtype the copies move), the validation errors with
 * their "<collective> (rank 0/1): " prefix, the vtable rules (short or NULL members are
 * CT_ERR_UNSUPPORTED), ct_comm_create_default choosing "single" without a launcher (and never
 * initialising MPI), ct_comm_abort's exit code, and in builds without MPI the refusals of MPI, NCCL
 * and of a launch with several ranks. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "comm_conformance.h"
#include "dist/comm.h"
#include "testlib.h"

#ifdef CT_HAVE_MPI
#include <mpi.h>
#endif

static ct_rng rng;

/* A tensor of n random non-zero values (integers for i64), and a copy of its bytes. */
static ct_tensor random_tensor(ct_dtype dt, int64_t n) {
    ct_tensor t;
    CT_ASSERT(ct_tensor_alloc(&t, dt, CT_CPU, 1, &n) == CT_OK);
    for (int64_t i = 0; i < n; i++) {
        double v = dt == CT_I64 ? (double)((int64_t)ct_rng_below(&rng, 2000001) - 1000000) : ct_rng_normal(&rng);
        if (v == 0) v = 1;
        ct_tensor_set(&t, i, v);
    }
    return t;
}

static void *copy_bytes(const ct_tensor *t) {
    size_t b = ct_tensor_nbytes(t);
    void *p = malloc(b ? b : 1);
    memcpy(p, t->data, b);
    return p;
}

static void identity(ct_comm *c) {
    CHECK(c->rank == 0 && c->world_size == 1 && c->local_rank == 0 && c->local_world_size == 1,
          "single: rank %d/%d local %d/%d", c->rank, c->world_size, c->local_rank, c->local_world_size);
    CHECK(strcmp(c->ops->name, "single") == 0, "name %s", c->ops->name);
    CHECK(c->timeout_s == 1800.0, "default timeout %g", c->timeout_s);
}

static void reductions(ct_comm *c) {
    const ct_dtype dts[] = {CT_F32, CT_F64, CT_I64};
    const ct_reduce ops[] = {CT_SUM, CT_MIN, CT_MAX};
    for (int d = 0; d < 3; d++)
        for (int o = 0; o < 3; o++) {
            int64_t n = 1 + (int64_t)ct_rng_below(&rng, 300);
            ct_tensor t = random_tensor(dts[d], n);
            void *before = copy_bytes(&t);
            CHECK_OK(ct_comm_all_reduce(c, &t, ops[o]));
            CHECK(memcmp(before, t.data, ct_tensor_nbytes(&t)) == 0, "all_reduce %s op %d changed data on one rank",
                  ct_dtype_name(dts[d]), o);
            /* Non-blocking: several in flight, waited in reverse order. */
            ct_comm_request *req[3];
            for (int k = 0; k < 3; k++) CHECK_OK(ct_comm_all_reduce_start(c, &t, ops[o], &req[k]));
            for (int k = 2; k >= 0; k--) CHECK_OK(ct_comm_wait(c, req[k]));
            CHECK(memcmp(before, t.data, ct_tensor_nbytes(&t)) == 0, "all_reduce_start changed data");
            free(before);
            ct_tensor_free(&t);
        }
    double v[5];
    int64_t w[5];
    for (int i = 0; i < 5; i++) {
        v[i] = ct_rng_normal(&rng);
        w[i] = (int64_t)ct_rng_u32(&rng) - (1 << 30);
    }
    double v0[5];
    int64_t w0[5];
    memcpy(v0, v, sizeof v);
    memcpy(w0, w, sizeof w);
    CHECK_OK(ct_comm_all_reduce_f64(c, v, 5, CT_SUM));
    CHECK_OK(ct_comm_all_reduce_i64(c, w, 5, CT_MAX));
    CHECK_OK(ct_comm_all_reduce_f64(c, NULL, 0, CT_SUM));
    CHECK(memcmp(v, v0, sizeof v) == 0 && memcmp(w, w0, sizeof w) == 0, "helpers changed data");
}

static void data_movement(ct_comm *c) {
    const ct_dtype dts[] = {CT_F32, CT_F64, CT_I64, CT_I32, CT_U8};
    for (int d = 0; d < 5; d++) {
        int64_t n = 1 + (int64_t)ct_rng_below(&rng, 100);
        ct_tensor in;
        CT_ASSERT(ct_tensor_alloc(&in, dts[d], CT_CPU, 1, &n) == CT_OK);
        for (int64_t i = 0; i < n; i++) ct_tensor_set(&in, i, (double)(1 + ct_rng_below(&rng, 100)));
        void *before = copy_bytes(&in);

        CHECK_OK(ct_comm_broadcast(c, &in, 0));
        CHECK(memcmp(before, in.data, ct_tensor_nbytes(&in)) == 0, "broadcast changed data");

        ct_tensor out;
        CT_ASSERT(ct_tensor_alloc(&out, dts[d], CT_CPU, 1, &n) == CT_OK);
        CHECK_OK(ct_comm_all_gather(c, &in, &out));
        CHECK(memcmp(before, out.data, ct_tensor_nbytes(&in)) == 0, "all_gather %s is not a copy", ct_dtype_name(dts[d]));
        /* In place: in is this rank's block of out. */
        memset(out.data, 0, ct_tensor_nbytes(&out));
        memcpy(out.data, before, ct_tensor_nbytes(&in));
        ct_tensor self = out;
        CHECK_OK(ct_comm_all_gather(c, &self, &out));
        CHECK(memcmp(before, out.data, ct_tensor_nbytes(&in)) == 0, "in-place all_gather changed data");
        ct_tensor_free(&out);

        ct_tensor g = {.data = (void *)1}; /* whatever the caller had is replaced */
        CHECK_OK(ct_comm_gather_v(c, &in, 0, &g));
        CHECK(ct_tensor_numel(&g) == n && g.ndim == 1 && g.dtype == dts[d] && g.data &&
                  memcmp(before, g.data, ct_tensor_nbytes(&in)) == 0,
              "gather_v of %lld %s elements: got %lld", (long long)n, ct_dtype_name(dts[d]), (long long)ct_tensor_numel(&g));
        ct_tensor_free(&g);
        free(before);
        ct_tensor_free(&in);
    }
    /* An empty contribution gathers to an empty result without memory. */
    int64_t zero = 0;
    ct_tensor empty = ct_tensor_view(NULL, CT_F64, CT_CPU, 1, &zero), g;
    CHECK_OK(ct_comm_gather_v(c, &empty, 0, &g));
    CHECK(ct_tensor_numel(&g) == 0 && g.data == NULL && g.dtype == CT_F64, "empty gather_v: %lld elements",
          (long long)ct_tensor_numel(&g));
    ct_tensor_free(&g);

    /* Reduce-scatter over one rank: out = in. 2-D in, 1-D out: only element counts matter. */
    for (int d = 0; d < 3; d++) {
        ct_dtype dt = (ct_dtype[]){CT_F32, CT_F64, CT_I64}[d];
        int64_t rows = 1 + (int64_t)ct_rng_below(&rng, 5), cols = 1 + (int64_t)ct_rng_below(&rng, 9);
        ct_tensor in = random_tensor(dt, rows * cols), out;
        int64_t shape2[2] = {rows, cols}, n = rows * cols;
        CT_ASSERT(ct_tensor_reshape(&in, 2, shape2, &in) == CT_OK);
        CT_ASSERT(ct_tensor_alloc(&out, dt, CT_CPU, 1, &n) == CT_OK);
        CHECK_OK(ct_comm_reduce_scatter(c, &in, &out, CT_SUM));
        CHECK(memcmp(in.data, out.data, ct_tensor_nbytes(&in)) == 0, "reduce_scatter %s is not a copy", ct_dtype_name(dt));
        ct_tensor_free(&out);
        ct_tensor_free(&in);
    }
    CHECK_OK(ct_comm_barrier(c));
    CHECK_OK(ct_comm_check_same(c, ct_rng_u32(&rng), "config hash"));
}

static void validation(ct_comm *c) {
    int64_t n = 6, n2 = 3;
    ct_tensor f = random_tensor(CT_F32, n), d = random_tensor(CT_F64, n), small = random_tensor(CT_F32, n2);
    int32_t ints[6] = {1, 2, 3, 4, 5, 6};
    ct_tensor i32 = ct_tensor_view(ints, CT_I32, CT_CPU, 1, &n);
    ct_comm_request *req = (ct_comm_request *)&req;

    CHECK_ERR(ct_comm_all_reduce(c, &i32, CT_SUM), CT_ERR_DTYPE, "all_reduce (rank 0/1): ", "[6] i32",
              "f32, f64 or i64");
    CHECK_ERR(ct_comm_all_reduce(c, &f, (ct_reduce)7), CT_ERR_INVALID_ARG, "all_reduce (rank 0/1): ",
              "unknown reduction 7");
    CHECK_ERR(ct_comm_all_reduce_start(c, &i32, CT_MAX, &req), CT_ERR_DTYPE, "all_reduce_start (rank 0/1): ", "i32");
    CHECK(req == NULL, "a failed start leaves a request");
    ct_tensor nomem = ct_tensor_view(NULL, CT_F32, CT_CPU, 1, &n);
    CHECK_ERR(ct_comm_all_reduce(c, &nomem, CT_SUM), CT_ERR_INVALID_ARG, "all_reduce (rank 0/1): ", "no memory");

    CHECK_ERR(ct_comm_broadcast(c, &f, 1), CT_ERR_INVALID_ARG, "broadcast (rank 0/1): ", "root 1 outside [0, 1)");
    CHECK_ERR(ct_comm_broadcast(c, &f, -2), CT_ERR_INVALID_ARG, "broadcast (rank 0/1): ", "root -2");

    CHECK_ERR(ct_comm_all_gather(c, &f, &small), CT_ERR_SHAPE, "all_gather (rank 0/1): ", "out [3] f32 cpu has 3 elements",
              "world size 1 x in [6] f32 cpu = 6");
    CHECK_ERR(ct_comm_all_gather(c, &f, &d), CT_ERR_DTYPE, "all_gather (rank 0/1): ", "differ in dtype");
    /* Overlap other than as this rank's own block: in starts one element into out. */
    ct_tensor shifted = ct_tensor_view((float *)f.data + 1, CT_F32, CT_CPU, 1, &n2);
    ct_tensor head = ct_tensor_view(f.data, CT_F32, CT_CPU, 1, &n2);
    CHECK_ERR(ct_comm_all_gather(c, &shifted, &head), CT_ERR_INVALID_ARG, "all_gather (rank 0/1): ",
              "in overlaps out");

    ct_tensor g;
    CHECK_ERR(ct_comm_gather_v(c, &f, 1, &g), CT_ERR_INVALID_ARG, "gather_v (rank 0/1): ", "root 1");
    CHECK(g.data == NULL && ct_tensor_numel(&g) == 0, "failed gather_v left data");

    CHECK_ERR(ct_comm_reduce_scatter(c, &f, &small, CT_SUM), CT_ERR_SHAPE, "reduce_scatter (rank 0/1): ",
              "in [6] f32 cpu has 6 elements, expected world size 1 x out [3] f32 cpu = 3");
    CHECK_ERR(ct_comm_reduce_scatter(c, &i32, &i32, CT_SUM), CT_ERR_DTYPE, "reduce_scatter (rank 0/1): ", "i32");
    CHECK_ERR(ct_comm_reduce_scatter(c, &f, &d, CT_SUM), CT_ERR_DTYPE, "reduce_scatter (rank 0/1): ", "differ in dtype");
    CHECK_ERR(ct_comm_reduce_scatter(c, &f, &f, CT_MIN), CT_ERR_INVALID_ARG, "reduce_scatter (rank 0/1): ",
              "in and out overlap");
    CHECK_ERR(ct_comm_reduce_scatter(c, &f, &f, (ct_reduce)-1), CT_ERR_INVALID_ARG, "unknown reduction -1");

    /* The no-op collectives accept any device and stage nothing; copies go through the device's
     * backend, which refuses a device this build or machine lacks. */
    ct_tensor gpu = f;
    gpu.device = (ct_device){CT_DEVICE_CUDA, 0};
    ct_tensor cpu_copy = random_tensor(CT_F32, n);
    CHECK_OK(ct_comm_all_reduce(c, &gpu, CT_SUM));
    CHECK_OK(ct_comm_broadcast(c, &gpu, 0));
    if (ct_device_check(gpu.device) != CT_OK) {
        CHECK_ERR(ct_comm_all_gather(c, &gpu, &cpu_copy), CT_ERR_DEVICE, "all_gather (rank 0/1): ");
        CHECK_ERR(ct_comm_gather_v(c, &gpu, 0, &g), CT_ERR_DEVICE, "gather_v (rank 0/1): ");
    }
    ct_tensor_free(&cpu_copy);

    ct_tensor_free(&f);
    ct_tensor_free(&d);
    ct_tensor_free(&small);
}

/* A communicator written against an older, shorter table, and one with NULL members: both answer
 * CT_ERR_UNSUPPORTED with the collective and the communicator's name. */
static ct_status fake_all_reduce(ct_comm *c, ct_tensor *t, ct_reduce op) { return CT_OK; }
static ct_status fake_fails(ct_comm *c) { return ct_error(CT_ERR_IO, "link down"); }

static void vtable_rules(void) {
    ct_comm_ops short_ops = {.size = offsetof(ct_comm_ops, all_reduce_start), .name = "old",
                             .all_reduce = fake_all_reduce,
                             /* beyond the declared size: must be ignored */
                             .barrier = fake_fails};
    ct_comm c = {.ops = &short_ops, .rank = 2, .world_size = 5, .local_rank = 0, .local_world_size = 1, .timeout_s = 1};
    int64_t n = 4;
    ct_tensor t = random_tensor(CT_F64, n), g;
    ct_comm_request *req;
    CHECK_OK(ct_comm_all_reduce(&c, &t, CT_SUM));
    CHECK_ERR(ct_comm_all_reduce_start(&c, &t, CT_SUM, &req), CT_ERR_UNSUPPORTED,
              "all_reduce_start (rank 2/5): not supported by the 'old' communicator");
    CHECK_ERR(ct_comm_barrier(&c), CT_ERR_UNSUPPORTED, "barrier (rank 2/5): not supported by the 'old' communicator");
    CHECK_ERR(ct_comm_gather_v(&c, &t, 0, &g), CT_ERR_UNSUPPORTED, "gather_v (rank 2/5)");

    ct_comm_ops null_ops = {.size = sizeof(ct_comm_ops), .barrier = fake_fails};
    c.ops = &null_ops;
    CHECK_ERR(ct_comm_all_reduce(&c, &t, CT_SUM), CT_ERR_UNSUPPORTED,
              "all_reduce (rank 2/5): not supported by the 'custom' communicator");
    CHECK_ERR(ct_comm_reduce_scatter(&c, &t, &t, CT_SUM), CT_ERR_UNSUPPORTED, "reduce_scatter (rank 2/5)");
    /* A backend's own error gets the prefix too. */
    CHECK_ERR(ct_comm_barrier(&c), CT_ERR_IO, "barrier (rank 2/5): link down");
    ct_comm_free(NULL);
    ct_tensor_free(&t);
}

static void create_default(void) {
    static const char *const launcher_vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS"};
    for (int i = 0; i < 3; i++) unsetenv(launcher_vars[i]);
    ct_comm *c = NULL;
    double timeout = 1 + (double)ct_rng_below(&rng, 5000);
    CHECK_OK(ct_comm_create_default(timeout, &c));
    CHECK(c && strcmp(c->ops->name, "single") == 0 && c->timeout_s == timeout, "default without a launcher: %s %g",
          c ? c->ops->name : "(null)", c ? c->timeout_s : 0.0);
    ct_comm_free(c);
    /* A launcher that started one process, or a variable that is not a number, still means alone. */
    setenv("OMPI_COMM_WORLD_SIZE", "1", 1);
    setenv("PMI_SIZE", "four", 1);
    setenv("SLURM_NTASKS", "8", 1); /* a batch script: one process even with 8 tasks allocated */
    CHECK_OK(ct_comm_create_default(60, &c));
    CHECK(c && strcmp(c->ops->name, "single") == 0, "default under mpirun -np 1: %s", c ? c->ops->name : "(null)");
    ct_comm_free(c);
    for (int i = 0; i < 3; i++) unsetenv(launcher_vars[i]);
    unsetenv("SLURM_NTASKS");

    const double bad[] = {0, -1, NAN, INFINITY};
    for (int i = 0; i < 4; i++) {
        c = (ct_comm *)&c;
        CHECK_ERR(ct_comm_create_default(bad[i], &c), CT_ERR_INVALID_ARG, "ddp_timeout must be a positive number");
        CHECK(c == NULL, "failed create left a communicator");
#ifdef CT_HAVE_MPI
        CHECK_ERR(ct_comm_mpi_create(bad[i], &c), CT_ERR_INVALID_ARG, "mpi communicator: ddp_timeout");
#endif
    }
#ifdef CT_HAVE_MPI
    /* Nothing here may have initialised MPI: a plain run never needs mpirun. */
    int initialised = 1;
    MPI_Initialized(&initialised);
    CHECK(!initialised, "the single communicator initialised MPI");
#endif
}

#ifndef CT_HAVE_MPI
/* A build without MPI (CTRAINER_MPI=OFF): asking for MPI or NCCL says how to get it, and a job that
 * mpirun/srun started with several ranks fails instead of training the model once per rank. */
static void without_mpi(void) {
    ct_comm *c = (ct_comm *)&c;
    CHECK_ERR(ct_comm_mpi_create(60, &c), CT_ERR_UNSUPPORTED, "mpi communicator: this build has no MPI",
              "-DCTRAINER_MPI=ON");
    CHECK(c == NULL, "failed mpi create left a communicator");
    c = (ct_comm *)&c;
    CHECK_ERR(ct_comm_nccl_create(60, -1, &c), CT_ERR_UNSUPPORTED, "nccl communicator: this build has no MPI",
              "-DCTRAINER_MPI=ON");
    CHECK(c == NULL, "failed nccl create left a communicator");
    static const char *const launcher_vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS"};
    for (int v = 0; v < 3; v++) {
        char n[16], want[64];
        int ranks = 2 + (int)ct_rng_below(&rng, 63);
        snprintf(n, sizeof n, "%d", ranks);
        snprintf(want, sizeof want, "as one of %d processes", ranks);
        setenv(launcher_vars[v], n, 1);
        c = (ct_comm *)&c;
        CHECK_ERR(ct_comm_create_default(60, &c), CT_ERR_UNSUPPORTED, want, "this build has no MPI",
                  "-DCTRAINER_MPI=ON");
        CHECK(c == NULL, "refused default left a communicator");
        unsetenv(launcher_vars[v]);
    }
}
#endif

/* ct_comm_abort ends the process with the code (in a child, so this test survives). */
static void abort_exits(void) {
    fflush(NULL);
    pid_t pid = fork();
    CT_ASSERT(pid >= 0);
    if (pid == 0) {
        ct_comm *c;
        if (ct_comm_single_create(&c) != CT_OK) _exit(100);
        ct_comm_abort(c, 7);
        _exit(101);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 7, "abort: child status %#x, expected exit code 7", status);
}

int main(void) {
    ct_test_begin("test_comm_single");
    ct_rng_init(&rng, ct_test_seed, 0, CT_RNG_USER);
    ct_comm *c = NULL;
    CHECK_OK(ct_comm_single_create(&c));
    ct_comm_test ct;
    ct_comm_test_init(&ct, c, CT_CPU, &ct_comm_test_host_sizes, NULL);
    ct_comm_test_run(&ct);
    identity(c);
    reductions(c);
    data_movement(c);
    validation(c);
    ct_comm_free(c);
    vtable_rules();
    create_default();
#ifndef CT_HAVE_MPI
    without_mpi();
#endif
    abort_exits();
    return ct_test_finish();
}
