/* A rank that fails in the middle of training must take the whole job down, never leave the others
 * waiting. Run as `mpirun -np N test_rank_dies MODE TIMEOUT_S`: every rank all-reduces a gradient-
 * sized buffer step after step; at step 20 rank 1 fails in one of three ways:
 *   exit   exits with code 3 without MPI_Finalize (a crash): mpirun sees it and ends the job;
 *   hang   stops answering (a deadlock, a stuck file system): the others give up after TIMEOUT_S
 *          (the ddp_timeout) and end the job with ct_comm_abort;
 *   abort  calls ct_comm_abort(4) itself (a rank that found its own error).
 * Two more modes stop rank 1 (SIGSTOP) where no collective of ours is waiting:
 *   stop_start  before its communicator exists (MPI_Init, whose fence waits for every rank);
 *   stop_end    after the last all-reduce, so the others are alone at the end (MPI_Finalize).
 * The others must give up after TIMEOUT_S and end the job with a message naming their rank.
 * The job must end non-zero; tests/mpi/expect_fail_within.sh checks that it does so in time. Reaching
 * the end of the steps is the failure this program exists to catch (it then exits 0). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dist/comm.h"

/* Stops this process (SIGSTOP). The others' guards must end the job within their timeout; once
 * they have, ending the stopped process is mpirun's, which under load was once seen to take more
 * than 30 s for a stopped one. So a timer kills it after STOPPED_S whatever happens: the job then
 * ends in time either way, and the test's verdict rests on the others' timeout messages, which a
 * job ended by this kill alone would not have. */
enum { STOPPED_S = 15 };
static void stop_for_good(void) {
    struct sigevent ev = {.sigev_notify = SIGEV_SIGNAL, .sigev_signo = SIGKILL};
    timer_t timer;
    struct itimerspec when = {.it_value = {.tv_sec = STOPPED_S}};
    if (timer_create(CLOCK_MONOTONIC, &ev, &timer) == 0) timer_settime(timer, 0, &when, NULL);
    raise(SIGSTOP);
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    double timeout = argc > 2 ? atof(argv[2]) : 0;
    if (argc != 3 ||
        (strcmp(mode, "exit") && strcmp(mode, "hang") && strcmp(mode, "abort") && strcmp(mode, "stop_start") &&
         strcmp(mode, "stop_end")) ||
        !(timeout > 0)) {
        fprintf(stderr, "usage: mpirun -np N test_rank_dies exit|hang|abort|stop_start|stop_end TIMEOUT_S\n");
        return 2;
    }
    bool stop_start = !strcmp(mode, "stop_start"), stop_end = !strcmp(mode, "stop_end");
    if (stop_start && ct_comm_launcher_rank() == 1) {
        printf("rank 1: stopping before MPI_Init\n");
        fflush(stdout);
        stop_for_good();
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
        if (step == 20 && stop_end) break;
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
    ct_tensor_free(&grad);
    if (stop_end && c->rank == 1) {
        printf("rank 1: stopping after the last all-reduce\n");
        fflush(stdout);
        stop_for_good();
    }
    int rank = c->rank;
    ct_comm_free(c);
    printf("rank %d: %s although rank 1 %s\n", rank, stop_end ? "ended" : "all 200 steps done",
           stop_end ? "stopped" : "failed");
    return 0;
}
