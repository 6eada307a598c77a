/* ct_comm_main_process_first (dist/comm.h) in one process: with no communicator and the single
 * one, fn runs once and its status and message come back as they were; over a scripted
 * communicator that plays one rank of several (its all-reduce adds the other ranks' values given
 * by the test, its broadcast delivers a given payload), the order of fn and the collective on main
 * and other processes (local and global), the failure of a main reaching the others with its status
 * and message and without fn running, a main's own message surviving the collectives, the
 * fallback when the broadcast fails, and a timed-out wait. The same under MPI, with real
 * processes: tests/mpi/test_main_first.c. */
#include <string.h>

#include "dist/comm.h"
#include "testlib.h"

/* --- fn: counts its calls and notes when it ran ------------------------------------------------- */

typedef struct job {
    int calls;
    int order;       /* events so far when fn ran (0: before any collective) */
    ct_status ret;   /* what fn returns */
    const char *msg; /* its message when failing */
} job;

static int events; /* collectives made so far */

static ct_status fn(void *ctx) {
    job *j = ctx;
    j->calls++;
    j->order = events;
    if (j->ret != CT_OK) return ct_error(j->ret, "%s", j->msg);
    ct_error_clear();
    return CT_OK;
}

/* --- a scripted communicator -------------------------------------------------------------------- */

typedef struct scripted {
    ct_comm base;
    int64_t others_max;   /* the MAX of the other ranks' contributions */
    ct_status reduce_ret; /* != CT_OK: the all-reduce fails (timeout) */
    int64_t sent;         /* what this rank contributed */
    int bcast_root;       /* -1: no broadcast */
    uint8_t payload[4096];
    bool bcast_fails;
} scripted;

static ct_status s_all_reduce(ct_comm *c, ct_tensor *t, ct_reduce op) {
    scripted *s = (scripted *)c;
    events++;
    CT_ASSERT(t->dtype == CT_I64 && ct_tensor_numel(t) == 1 && op == CT_MAX);
    int64_t *v = t->data;
    s->sent = *v;
    if (s->reduce_ret != CT_OK) return ct_error(s->reduce_ret, "no answer from the other ranks within 3 s (ddp_timeout)");
    if (s->others_max > *v) *v = s->others_max;
    ct_error(CT_ERR_IO, "scribbled over by the all-reduce"); /* a message left behind on success */
    return CT_OK;
}

static ct_status s_broadcast(ct_comm *c, ct_tensor *t, int root) {
    scripted *s = (scripted *)c;
    events++;
    s->bcast_root = root;
    if (s->bcast_fails) return ct_error(CT_ERR_STATE, "no answer from the other ranks within 3 s (ddp_timeout)");
    size_t n = ct_tensor_nbytes(t);
    CT_ASSERT(n <= sizeof s->payload);
    if (root == c->rank) memcpy(s->payload, t->data, n); /* what this rank sends */
    else memcpy(t->data, s->payload, n);
    return CT_OK;
}

static const ct_comm_ops scripted_ops = {
    .size = sizeof(ct_comm_ops), .name = "scripted", .all_reduce = s_all_reduce, .broadcast = s_broadcast};

static scripted make(int rank, int world, int local_rank, int64_t others_max) {
    scripted s;
    memset(&s, 0, sizeof s);
    s.base = (ct_comm){.ops = &scripted_ops, .rank = rank, .world_size = world, .local_rank = local_rank,
                       .local_world_size = 2, .timeout_s = 3};
    s.others_max = others_max;
    s.bcast_root = -1;
    return s;
}

/* A failed main's payload: its status, then its message. */
static void set_payload(scripted *s, ct_status st, const char *msg) {
    int32_t v = (int32_t)st;
    memcpy(s->payload, &v, sizeof v);
    snprintf((char *)s->payload + sizeof v, sizeof s->payload - sizeof v, "%s", msg);
}

static ct_status run(scripted *s, bool local, job *j) {
    events = 0;
    return ct_comm_main_process_first(&s->base, local, "building datasets", fn, j);
}

/* --- tests -------------------------------------------------------------------------------------- */

static void test_one_process(void) {
    ct_comm *single;
    CHECK_OK(ct_comm_single_create(&single));
    ct_comm *comms[2] = {NULL, single};
    for (int k = 0; k < 2; k++) {
        for (int local = 0; local < 2; local++) {
            job j = {0};
            CHECK_OK(ct_comm_main_process_first(comms[k], local, "building datasets", fn, &j));
            CHECK(j.calls == 1, "%s: fn ran %d times", k ? "single" : "NULL", j.calls);
            job f = {.ret = CT_ERR_IO, .msg = "data.train.cache: /x.h5: cannot build"};
            CHECK_ERR(ct_comm_main_process_first(comms[k], local, "building datasets", fn, &f), CT_ERR_IO,
                      "data.train.cache: /x.h5: cannot build");
            CHECK(f.calls == 1 && strcmp(ct_last_error(), "data.train.cache: /x.h5: cannot build") == 0,
                  "%s: the message was changed: %s", k ? "single" : "NULL", ct_last_error());
        }
    }
    ct_comm_free(single);
}

static void test_order(void) {
    /* Rank 0 (global main): fn first, then the barrier; nothing broadcast. */
    scripted s = make(0, 3, 0, 0);
    job j = {0};
    CHECK_OK(run(&s, false, &j));
    CHECK(j.calls == 1 && j.order == 0 && s.sent == 0 && s.bcast_root == -1, "main: fn after %d collectives", j.order);
    /* Rank 1: waits, then fn. */
    s = make(1, 3, 1, 0);
    j = (job){0};
    CHECK_OK(run(&s, false, &j));
    CHECK(j.calls == 1 && j.order == 1, "other: fn ran %d times after %d collectives", j.calls, j.order);
    /* Local: local rank 0 of its node is a main even when its rank is not 0. */
    s = make(2, 4, 0, 0);
    j = (job){0};
    CHECK_OK(run(&s, true, &j));
    CHECK(j.calls == 1 && j.order == 0, "local main: fn after %d collectives", j.order);
    /* ... and is not one globally. */
    s = make(2, 4, 0, 0);
    j = (job){0};
    CHECK_OK(run(&s, false, &j));
    CHECK(j.calls == 1 && j.order == 1, "rank 2 globally: fn after %d collectives", j.order);
    /* With local, only the local rank counts (rank 0 on a node whose first process is another). */
    s = make(0, 4, 1, 0);
    j = (job){0};
    CHECK_OK(run(&s, true, &j));
    CHECK(j.calls == 1 && j.order == 1, "rank 0 / local rank 1 with local: fn after %d collectives", j.order);
}

static void test_failure_shared(void) {
    /* The main fails: its own status and message (not the collective's leftovers); it sends both. */
    scripted s = make(0, 2, 0, 0);
    job j = {.ret = CT_ERR_CONFIG, .msg = "run.json:7:12: data.train.cache: /d/c.h5: not a dataset cache"};
    CHECK_ERR(run(&s, false, &j), CT_ERR_CONFIG, "run.json:7:12: data.train.cache");
    CHECK(strcmp(ct_last_error(), j.msg) == 0, "the main's message became '%s'", ct_last_error());
    CHECK(s.sent == 1 && s.bcast_root == 0, "the main contributed %lld and broadcast from %d", (long long)s.sent,
          s.bcast_root);
    int32_t st;
    memcpy(&st, s.payload, sizeof st);
    CHECK(st == CT_ERR_CONFIG && strcmp((char *)s.payload + 4, j.msg) == 0, "the payload: %d '%s'", st,
          (char *)s.payload + 4);

    /* Another process learns it: the main's status and message, and fn does not run. */
    s = make(1, 2, 1, 1);
    set_payload(&s, CT_ERR_CONFIG, "run.json:7:12: data.train.cache: /d/c.h5: not a dataset cache");
    j = (job){0};
    CHECK_ERR(run(&s, false, &j), CT_ERR_CONFIG,
              "building datasets: the main process (rank 0) failed: run.json:7:12: data.train.cache: /d/c.h5");
    CHECK(j.calls == 0 && s.bcast_root == 0, "fn ran %d times; broadcast root %d", j.calls, s.bcast_root);

    /* Local mains on two nodes, rank 3 failed: rank 2, a main that succeeded, fails too, naming it;
     * rank 1 (not a main) does not run fn. */
    s = make(2, 4, 0, 4);
    set_payload(&s, CT_ERR_IO, "no space left on device");
    j = (job){0};
    CHECK_ERR(run(&s, true, &j), CT_ERR_IO, "building datasets: the main process (rank 3) failed: no space left");
    CHECK(j.calls == 1 && s.bcast_root == 3, "a main that succeeded: fn ran %d times; root %d", j.calls, s.bcast_root);
    s = make(1, 4, 1, 4);
    set_payload(&s, CT_ERR_IO, "no space left on device");
    j = (job){0};
    CHECK_ERR(run(&s, true, &j), CT_ERR_IO, "(rank 3) failed: no space left on device");
    CHECK(j.calls == 0, "fn ran on a process after its main failed");
    /* Two mains failed (ranks 0 and 3): the lower one keeps its own message, and receives. */
    s = make(0, 4, 0, 4);
    set_payload(&s, CT_ERR_IO, "rank 3's reason");
    j = (job){.ret = CT_ERR_FORMAT, .msg = "rank 0's reason"};
    CHECK_ERR(run(&s, true, &j), CT_ERR_FORMAT, "rank 0's reason");
    CHECK(s.bcast_root == 3 && strcmp(ct_last_error(), "rank 0's reason") == 0, "root %d, message %s", s.bcast_root,
          ct_last_error());

    /* A payload that is not a status (a broken peer): CT_ERR_STATE, still with the message. */
    s = make(1, 2, 1, 1);
    set_payload(&s, (ct_status)5, "odd");
    j = (job){0};
    CHECK_ERR(run(&s, false, &j), CT_ERR_STATE, "(rank 0) failed: odd");

    /* The broadcast fails: the message says where to look. */
    s = make(1, 2, 1, 1);
    s.bcast_fails = true;
    j = (job){0};
    CHECK_ERR(run(&s, false, &j), CT_ERR_STATE, "building datasets: the main process (rank 0) failed; see its message");
    CHECK(j.calls == 0, "fn ran after its main failed");
}

static void test_timeout(void) {
    /* Waiting gives up at the timeout: the collective's error under desc, and fn does not run. */
    scripted s = make(1, 2, 1, 0);
    s.reduce_ret = CT_ERR_STATE;
    job j = {0};
    CHECK_ERR(run(&s, false, &j), CT_ERR_STATE,
              "building datasets: the main processes' outcome (all_reduce, rank 1/2): no answer");
    CHECK(j.calls == 0, "fn ran after the wait failed");
    /* A failing main whose barrier then fails reports its own failure. */
    s = make(0, 2, 0, 0);
    s.reduce_ret = CT_ERR_STATE;
    j = (job){.ret = CT_ERR_IO, .msg = "cannot write /d/c.h5"};
    CHECK_ERR(run(&s, false, &j), CT_ERR_IO, "cannot write /d/c.h5");
    CHECK(strcmp(ct_last_error(), "cannot write /d/c.h5") == 0, "message %s", ct_last_error());
    /* A main that succeeded, then timed out waiting for the others. */
    s = make(0, 2, 0, 0);
    s.reduce_ret = CT_ERR_STATE;
    j = (job){0};
    CHECK_ERR(run(&s, false, &j), CT_ERR_STATE,
              "building datasets: the main processes' outcome (all_reduce, rank 0/2)");
    CHECK(j.calls == 1, "fn ran %d times", j.calls);
}

int main(void) {
    ct_test_begin("test_main_first");
    test_one_process();
    test_order();
    test_failure_shared();
    test_timeout();
    return ct_test_finish();
}
