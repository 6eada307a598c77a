/* ct_comm_main_process_first under `mpirun -np N` (dist/comm.h), with real processes:
 *   - order: every main process has finished fn before any other starts it, seen two ways: the
 *     mains write a marker file at their end that the others must find at their start (and the mains
 *     must find no marker of the others), and the wall-clock times of every rank's start and end,
 *     gathered (one host, one clock);
 *   - global (rank 0 first) and local (local rank 0 of each node first): on this one host, with the
 *     real local ranks and with local ranks rewritten to simulate nodes of two processes (ranks 0 and
 *     2 are then mains and run at the same time, rank 1 waits for both; globally rank 2 waits too);
 *   - failure: a failing main returns its own message; every other process returns its status and
 *     message naming its rank, without running fn; with two mains, one failing, the other (which
 *     succeeded) fails as well; the communicator is usable afterwards.
 * Each rank prints "N passed, M failed" and exits non-zero on a failure; an unexpected collective
 * failure ends the job at once. */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "dist/comm.h"
#include "testlib.h"

static ct_comm *comm;
static int R, W;
static char dir[64];

#define MUST(expr)                                                                                                   \
    do {                                                                                                             \
        ct_status m_s_ = (expr);                                                                                     \
        CHECK(m_s_ == CT_OK, "%s -> %s: %s", #expr, ct_status_str(m_s_), ct_last_error());                           \
        if (m_s_ != CT_OK) {                                                                                         \
            ct_test_finish();                                                                                        \
            ct_comm_abort(comm, 1);                                                                                  \
        }                                                                                                            \
    } while (0)

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void marker(char *buf, size_t cap, const char *tag, const char *role, int rank) {
    snprintf(buf, cap, "%s/%s_%s_%d", dir, tag, role, rank);
}

static bool exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0;
}

/* One case: which ranks are mains (as the test expects them), which fail. */
typedef struct job {
    const char *tag;
    bool main_of[64];
    bool fail_of[64];
    int calls;
    double start, end;
    int missing_mains; /* mains whose marker an other process did not find at its start */
    int early_others;  /* others whose marker a main found at its start */
} job;

static ct_status fn(void *ctx) {
    job *j = ctx;
    j->calls++;
    j->start = now();
    char p[256];
    if (j->main_of[R]) {
        for (int r = 0; r < W; r++) {
            marker(p, sizeof p, j->tag, "other", r);
            if (!j->main_of[r] && exists(p)) j->early_others++;
        }
        usleep(300 * 1000); /* long enough that an other that did not wait would start meanwhile */
    } else {
        for (int r = 0; r < W; r++) {
            marker(p, sizeof p, j->tag, "main", r);
            if (j->main_of[r] && !exists(p)) j->missing_mains++;
        }
    }
    marker(p, sizeof p, j->tag, j->main_of[R] ? "main" : "other", R);
    FILE *f = fopen(p, "w");
    if (f) fclose(f);
    j->end = now();
    if (j->fail_of[R]) return ct_error(CT_ERR_IO, "rank %d cannot build %s", R, j->tag);
    return CT_OK;
}

/* Runs a case that succeeds everywhere and checks the order on every rank. */
static void ordered(const char *tag, bool local) {
    job j = {.tag = tag};
    int mains = 0;
    for (int r = 0; r < W; r++) {
        /* With local, a node's first process (nodes of two when the test simulates them, else
         * the one host); globally rank 0. */
        j.main_of[r] = local && comm->local_world_size == 2 ? r % 2 == 0 : r == 0;
        mains += j.main_of[r];
    }
    MUST(ct_comm_main_process_first(comm, local, tag, fn, &j));
    CHECK(j.calls == 1, "%s: fn ran %d times on rank %d", tag, j.calls, R);
    CHECK(j.missing_mains == 0, "%s: rank %d started before %d main(s) had finished", tag, R, j.missing_mains);
    CHECK(j.early_others == 0, "%s: main rank %d found %d other(s) already started", tag, R, j.early_others);
    /* The clock: every main's end before every other's start. */
    double mine[2] = {j.start, j.end}, *all = malloc((size_t)W * 2 * sizeof *all);
    int64_t two = 2, n = 2 * W;
    ct_tensor in = ct_tensor_view(mine, CT_F64, CT_CPU, 1, &two), out = ct_tensor_view(all, CT_F64, CT_CPU, 1, &n);
    MUST(ct_comm_all_gather(comm, &in, &out));
    double last_main_end = 0, first_other_start = 1e300;
    for (int r = 0; r < W; r++) {
        if (j.main_of[r] && all[2 * r + 1] > last_main_end) last_main_end = all[2 * r + 1];
        if (!j.main_of[r] && all[2 * r] < first_other_start) first_other_start = all[2 * r];
    }
    CHECK(last_main_end <= first_other_start, "%s: a main ended at %.6f, after an other started at %.6f", tag,
          last_main_end, first_other_start);
    if (R == 0)
        printf("%s: %d main(s) of %d; the others started %.3f s after the last main ended\n", tag, mains, W,
               first_other_start - last_main_end);
    free(all);
}

/* A case where the ranks in `fail` (mains) fail. */
static void failing(const char *tag, bool local, const bool *main_of, const bool *fail_of) {
    job j = {.tag = tag};
    int highest = -1;
    for (int r = 0; r < W; r++) {
        j.main_of[r] = main_of[r];
        j.fail_of[r] = fail_of[r];
        if (fail_of[r]) highest = r;
    }
    ct_status s = ct_comm_main_process_first(comm, local, tag, fn, &j);
    char want[256];
    if (j.fail_of[R]) {
        snprintf(want, sizeof want, "rank %d cannot build %s", R, tag);
        CHECK(s == CT_ERR_IO && strcmp(ct_last_error(), want) == 0, "%s: failing rank %d got %s '%s'", tag, R,
              ct_status_str(s), ct_last_error());
        CHECK(j.calls == 1, "%s: fn ran %d times on failing rank %d", tag, j.calls, R);
    } else {
        snprintf(want, sizeof want, "%s: the main process (rank %d) failed: rank %d cannot build %s", tag, highest,
                 highest, tag);
        CHECK(s == CT_ERR_IO && strcmp(ct_last_error(), want) == 0, "%s: rank %d got %s '%s', expected '%s'", tag, R,
              ct_status_str(s), ct_last_error(), want);
        CHECK(j.calls == (j.main_of[R] ? 1 : 0), "%s: fn ran %d times on rank %d (a %s)", tag, j.calls, R,
              j.main_of[R] ? "main that succeeded" : "process whose main failed");
    }
}

static void remove_dir(const char *d) {
    DIR *dd = opendir(d);
    if (!dd) return;
    struct dirent *e;
    char p[512];
    while ((e = readdir(dd))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", d, e->d_name);
        unlink(p);
    }
    closedir(dd);
    rmdir(d);
}

int main(void) {
    ct_test_begin("test_main_first");
    MUST(ct_comm_mpi_create(60, &comm));
    R = comm->rank;
    W = comm->world_size;
    CT_ASSERT(W <= 64);
    /* Rank 0's temporary directory for the markers, shared with the others (one host). */
    if (R == 0) {
        snprintf(dir, sizeof dir, "/tmp/ct_first_XXXXXX");
        CT_ASSERT(mkdtemp(dir));
    }
    int64_t nd = sizeof dir;
    ct_tensor dt = ct_tensor_view(dir, CT_U8, CT_CPU, 1, &nd);
    MUST(ct_comm_broadcast(comm, &dt, 0));

    /* One host: every process is on rank 0's node. */
    CHECK(comm->local_rank == R && comm->local_world_size == W, "rank %d: local rank %d of %d on one host", R,
          comm->local_rank, comm->local_world_size);
    ordered("global", false);
    ordered("local_one_node", true);

    /* Nodes of two processes: ranks 0 and 1 on the first, 2 and 3 on the second, ... */
    int saved_local = comm->local_rank, saved_local_world = comm->local_world_size;
    comm->local_rank = R % 2;
    comm->local_world_size = 2;
    ordered("local_two_per_node", true);
    ordered("global_two_per_node", false); /* rank 2, a node's first, still waits for rank 0 */

    bool main_of[64] = {0}, fail_of[64] = {0};
    /* Rank 0 fails (global). */
    main_of[0] = fail_of[0] = true;
    failing("global_failure", false, main_of, fail_of);
    /* The last node's main fails; the first node's main succeeded and learns it too. */
    int last_main = 0;
    for (int r = 0; r < W; r++) {
        main_of[r] = r % 2 == 0;
        fail_of[r] = false;
        if (main_of[r]) last_main = r;
    }
    fail_of[last_main] = true;
    failing("local_failure", true, main_of, fail_of);
    /* Every main fails: each keeps its own message; the others name the highest. */
    for (int r = 0; r < W; r++) fail_of[r] = main_of[r];
    failing("all_mains_fail", true, main_of, fail_of);
    comm->local_rank = saved_local;
    comm->local_world_size = saved_local_world;

    /* Nothing was left in flight: the communicator still works. */
    int64_t ones = 1;
    MUST(ct_comm_all_reduce_i64(comm, &ones, 1, CT_SUM));
    CHECK(ones == W, "final all_reduce: %lld, expected %d", (long long)ones, W);
    MUST(ct_comm_barrier(comm));
    if (R == 0) remove_dir(dir);
    int rc = ct_test_finish();
    ct_comm_free(comm);
    return rc;
}
