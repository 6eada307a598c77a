/* A rank that fails in the middle of training must take the whole job down, never leave the others
 * waiting. Run as `mpirun -np N test_rank_dies MODE TIMEOUT_S`: every rank all-reduces a gradient-
 * sized buffer step after step; at step 20 rank 1 fails in one of three ways:
 *   exit   exits with code 3 without MPI_Finalize (a crash): mpirun sees it and ends the job;
 *   hang   stops answering (a deadlock, a stuck file system): the others give up after TIMEOUT_S
 *          (the ddp_timeout) and end the job with ct_comm_abort;
 *   abort  calls ct_comm_abort(4) itself (a rank that found its own error).
 * The job must end non-zero; tests/mpi/expect_fail_within.sh checks that it does so in time. Reaching
 * the end of the steps is the failure this program exists to catch (it then exits 0). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dist/comm.h"

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    double timeout = argc > 2 ? atof(argv[2]) : 0;
    if (argc != 3 || (strcmp(mode, "exit") && strcmp(mode, "hang") && strcmp(mode, "abort")) || !(timeout > 0)) {
        fprintf(stderr, "usage: mpirun -np N test_rank_dies exit|hang|abort TIMEOUT_S\n");
        return 2;
    }
    ct_comm *c = NULL;
    if (ct_comm_create_default(timeout, &c) != CT_OK) {
        fprintf(stderr, "test_rank_dies: %s\n", ct_last_error());
        return 2;
    }
    if (c->world_size < 2) {
        fprintf(stderr, "test_rank_dies: run under mpirun with at least 2 ranks\n");
        return 2;
    }
    int64_t n = 100000;
    ct_tensor grad;
    if (ct_tensor_alloc(&grad, CT_F32, CT_CPU, 1, &n) != CT_OK) ct_comm_abort(c, 2);
    for (int step = 0; step < 200; step++) {
        if (step == 20 && c->rank == 1) {
            printf("rank 1: failing (%s) at step %d\n", mode, step);
            fflush(stdout);
            if (!strcmp(mode, "exit")) exit(3);
            if (!strcmp(mode, "abort")) ct_comm_abort(c, 4);
            sleep(600);
        }
        ct_tensor_fill(&grad, 1.0 + c->rank);
        ct_status s = ct_comm_all_reduce(c, &grad, CT_SUM);
        if (s != CT_OK) {
            fprintf(stderr, "test_rank_dies: step %d: %s\n", step, ct_last_error());
            ct_comm_abort(c, 1);
        }
    }
    printf("rank %d: all 200 steps done although rank 1 failed\n", c->rank);
    ct_tensor_free(&grad);
    ct_comm_free(c);
    return 0;
}
