/* The communication of one data-parallel training step, measured alone: the all-reduce of a float32
 * gradient buffer (default 235146 elements, the Fashion-MNIST MLP's parameters) and of the step's one
 * agreement (6 float64 summed: loss sum, sample count, flops, the two stop signals and one word of
 * non-finite-loss bits), as dist/strategy_ddp.c and trainer/step_agree.c do them.
 *
 * Two ways for the gradients: MPI_Allreduce on MPI_COMM_WORLD (what MPI itself costs) and the
 * Trainer's own path (ct_comm_all_reduce_start + ct_comm_wait over the MPI communicator, which
 * polls MPI_Testall so it can give up after ddp_timeout). Each is timed over ITERS calls after a
 * barrier and a warm-up; the figure is the slowest rank's mean, since a step waits for the slowest.
 *
 * Usage: mpirun -np N bench_allreduce [FLOATS] [ITERS]. Rank 0 prints one JSON line. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "dist/comm.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The slowest rank's value of x (every rank gets it). */
static double slowest(double x) {
    double m;
    MPI_Allreduce(&x, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return m;
}

static void die(const char *what) {
    fprintf(stderr, "bench_allreduce: %s: %s\n", what, ct_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
}

int main(int argc, char **argv) {
    int64_t n = argc > 1 ? atoll(argv[1]) : 235146;
    int iters = argc > 2 ? atoi(argv[2]) : 200, warm = 10;
    if (n <= 0 || iters <= 0) {
        fprintf(stderr, "usage: bench_allreduce [FLOATS > 0] [ITERS > 0]\n");
        return 2;
    }
    /* The communicator initialises MPI (as in the Trainer); MPI_COMM_WORLD is usable afterwards. */
    ct_comm *c;
    if (ct_comm_mpi_create(60.0, &c) != CT_OK) {
        fprintf(stderr, "bench_allreduce: %s\n", ct_last_error());
        return 1;
    }
    float *g = malloc((size_t)n * sizeof *g), *r = malloc((size_t)n * sizeof *r);
    if (!g || !r) die("out of memory");
    for (int64_t i = 0; i < n; i++) g[i] = (float)((i * 7919 + c->rank) % 1000) * 1e-3f;
    ct_tensor tg = ct_tensor_view(g, CT_F32, CT_CPU, 1, &n);
    double agreement[6] = {1, 2, 3, 0, 0, 0};

    /* MPI_Allreduce alone. */
    for (int i = 0; i < warm; i++) MPI_Allreduce(g, r, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now();
    for (int i = 0; i < iters; i++) MPI_Allreduce(g, r, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double mpi_s = slowest((now() - t0) / iters);

    /* The Trainer's path: one non-blocking bucket (under 25 MiB) and its wait, in place. */
    for (int i = 0; i < warm; i++) {
        ct_comm_request *req;
        if (ct_comm_all_reduce_start(c, &tg, CT_SUM, &req) != CT_OK || ct_comm_wait(c, req) != CT_OK) die("all_reduce");
    }
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = now();
    for (int i = 0; i < iters; i++) {
        ct_comm_request *req;
        if (ct_comm_all_reduce_start(c, &tg, CT_SUM, &req) != CT_OK || ct_comm_wait(c, req) != CT_OK) die("all_reduce");
    }
    double ct_s = slowest((now() - t0) / iters);

    /* The step's one agreement, latency only. */
    for (int i = 0; i < warm; i++)
        if (ct_comm_all_reduce_f64(c, agreement, 6, CT_SUM) != CT_OK) die("agreement");
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = now();
    for (int i = 0; i < iters; i++)
        if (ct_comm_all_reduce_f64(c, agreement, 6, CT_SUM) != CT_OK) die("agreement");
    double small_s = slowest((now() - t0) / iters);

    if (c->rank == 0)
        printf("{\"world_size\": %d, \"floats\": %lld, \"iterations\": %d, \"mpi_allreduce_s\": %.4e, "
               "\"ct_comm_allreduce_s\": %.4e, \"ct_comm_small_s\": %.4e, \"step_comm_s\": %.4e}\n",
               c->world_size, (long long)n, iters, mpi_s, ct_s, small_s, ct_s + small_s);
    free(g);
    free(r);
    ct_comm_free(c);
    return 0;
}
