/* The optimizer step's one agreement (trainer/step_agree.c) and the collectives a training step makes:
 *  - the encoding: W in-process ranks (threads over a communicator of their own, summing in rank
 *    order) agree through ct_step_agree on the loss sum, count and flops (exactly the rank-order
 *    sums), on the first rank whose own loss was not finite (bits packed 48 to a double: W up to 800
 *    crosses words and the 768 ranks the step keeps on the stack) and on the stop signal (SIGTERM over SIGINT, as a MAX gave), the same on every
 *    rank; the verdict names the loss before the gradient norm;
 *  - the count: through a communicator that plays rank 0 of 2 and counts every collective with the
 *    label it was called under, a data-parallel step (ddp, and zero1) makes exactly ONE blocking
 *    all-reduce of its own, the step agreement (before: the loss totals, the nan_inf verdict and the
 *    stop signal were three); ddp's other collectives are its gradient buckets, each started and
 *    waited once per step;
 *  - eval_async: the number of results to take travels in the step agreement (no collective of its
 *    own in a step), and each result reaches the other ranks in one broadcast; ct_trainer_share_json
 *    delivers texts of every size around its one-broadcast block whole to 3 thread ranks;
 *  - the labels: a gradient bucket whose wait fails says "gradient all-reduce (bucket b of n)
 *    (all_reduce, rank 0/2): ...", and a failing step agreement names itself and the step. */
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/rng.h"
#include "model/layers.h"
#include "testlib.h"
#include "trainer/trainer_impl.h" /* ct_step_agree, ct_nan_inf_verdict */

/* --- W ranks as threads ------------------------------------------------------------------------ */

#define MAX_W 800

typedef struct thread_world {
    int W;
    pthread_barrier_t barrier;
    const ct_tensor *slot[MAX_W];
} thread_world;

typedef struct thread_comm {
    ct_comm base;
    thread_world *world;
} thread_comm;

/* Every rank publishes its buffer; each adds them up in rank order (the same bits everywhere). */
static ct_status th_all_reduce(ct_comm *c, ct_tensor *t, ct_reduce op) {
    thread_comm *tc = (thread_comm *)c;
    thread_world *w = tc->world;
    if (op != CT_SUM || t->dtype != CT_F64) return ct_error(CT_ERR_INVALID_ARG, "thread comm: f64 sums only");
    int64_t n = ct_tensor_numel(t);
    double *sum = calloc((size_t)n, sizeof *sum);
    w->slot[c->rank] = t;
    pthread_barrier_wait(&w->barrier);
    for (int r = 0; r < w->W; r++)
        for (int64_t i = 0; i < n; i++) sum[i] = r ? sum[i] + ((const double *)w->slot[r]->data)[i]
                                                   : ((const double *)w->slot[r]->data)[i];
    pthread_barrier_wait(&w->barrier);
    memcpy(t->data, sum, (size_t)n * sizeof *sum);
    free(sum);
    return CT_OK;
}

/* Every rank copies the root's buffer. */
static ct_status th_broadcast(ct_comm *c, ct_tensor *t, int root) {
    thread_world *w = ((thread_comm *)c)->world;
    w->slot[c->rank] = t;
    pthread_barrier_wait(&w->barrier);
    size_t bytes = (size_t)ct_tensor_numel(t) * ct_dtype_size(t->dtype);
    if (c->rank != root) memcpy(t->data, w->slot[root]->data, bytes);
    pthread_barrier_wait(&w->barrier);
    return CT_OK;
}

static const ct_comm_ops thread_ops = {.size = sizeof(ct_comm_ops), .name = "threads", .all_reduce = th_all_reduce,
                                       .broadcast = th_broadcast};

typedef struct rank_case {
    thread_comm comm;
    ct_loss_value loss;
    double flos;
    int signal;
    ct_step_totals got;
    ct_status status;
} rank_case;

static void *rank_main(void *arg) {
    rank_case *rc = arg;
    ct_trainer t;
    memset(&t, 0, sizeof t);
    t.comm = &rc->comm.base;
    t.rank = rc->comm.base.rank;
    t.world_size = rc->comm.base.world_size;
    t.state.global_step = 41;
    rc->status = ct_step_agree(&t, rc->loss, rc->flos, rc->signal, &rc->got);
    return NULL;
}

static void test_encoding(void) {
    ct_rng rng;
    ct_rng_init(&rng, 20261127, 0, CT_RNG_USER);
    static const int worlds[] = {1, 2, 3, 5, 47, 48, 49, 100, 800}; /* 800: past the 768 on the stack */
    static rank_case rc[MAX_W];
    for (size_t k = 0; k < sizeof worlds / sizeof *worlds; k++) {
        for (int round = 0; round < 6; round++) {
            int W = worlds[k];
            thread_world world = {.W = W};
            pthread_barrier_init(&world.barrier, NULL, (unsigned)W);
            int want_bad = -1, want_sig = 0;
            double want_sum = 0, want_count = 0, want_flos = 0;
            for (int r = 0; r < W; r++) {
                memset(&rc[r], 0, sizeof rc[r]);
                rc[r].comm.base = (ct_comm){.ops = &thread_ops, .rank = r, .world_size = W, .timeout_s = 60};
                rc[r].comm.world = &world;
                double u = ct_rng_uniform(&rng);
                /* round 0: all finite, no signal; later rounds poison a few ranks and signal some; the
                 * last one only the last rank, whose bit is in the last word */
                bool bad = round == 5 ? r == W - 1 : round > 0 && u < (round == 1 ? 0.5 : 0.15);
                rc[r].loss = (ct_loss_value){bad ? (u < 0.05 ? NAN : INFINITY) : ct_rng_uniform(&rng) * 10,
                                             (double)(int)(ct_rng_uniform(&rng) * 32)};
                rc[r].flos = ct_rng_uniform(&rng) * 1e9;
                double v = ct_rng_uniform(&rng);
                rc[r].signal = round > 1 && v < 0.1 ? SIGTERM : round > 1 && v < 0.2 ? SIGINT : 0;
                if (bad && want_bad < 0) want_bad = r;
                if (rc[r].signal == SIGTERM || (rc[r].signal == SIGINT && want_sig == 0)) want_sig = rc[r].signal;
                want_sum = r ? want_sum + rc[r].loss.sum : rc[r].loss.sum;
                want_count = r ? want_count + rc[r].loss.count : rc[r].loss.count;
                want_flos = r ? want_flos + rc[r].flos : rc[r].flos;
            }
            pthread_t th[MAX_W];
            for (int r = 0; r < W; r++) pthread_create(&th[r], NULL, rank_main, &rc[r]);
            for (int r = 0; r < W; r++) pthread_join(th[r], NULL);
            pthread_barrier_destroy(&world.barrier);
            bool ok = true, same = true;
            for (int r = 0; r < W; r++) {
                const ct_step_totals *g = &rc[r].got;
                ok = ok && rc[r].status == CT_OK && g->bad_rank == want_bad && g->signal == want_sig &&
                     g->loss.count == want_count && g->flos == want_flos &&
                     (isfinite(want_sum) ? g->loss.sum == want_sum : !isfinite(g->loss.sum));
                same = same && memcmp(g, &rc[0].got, sizeof *g) == 0;
            }
            CHECK(ok, "W %d round %d: agreed bad rank %d (want %d), signal %d (want %d), count %g (want %g)", W, round,
                  rc[0].got.bad_rank, want_bad, rc[0].got.signal, want_sig, rc[0].got.loss.count, want_count);
            CHECK(same, "W %d round %d: every rank holds the same totals", W, round);
            ct_step_check c = ct_nan_inf_verdict(&rc[0].got, true, 1.0);
            CHECK(c.bad == (want_bad >= 0) && (!c.bad || (c.loss && c.rank == want_bad)),
                  "W %d round %d: the verdict names rank %d", W, round, c.rank);
        }
    }
    /* The verdict's order: the loss decides first; finite sums that overflowed together; the norm. */
    ct_step_totals a = {.loss = {1, 2}, .bad_rank = -1};
    ct_step_check c = ct_nan_inf_verdict(&a, true, 3.0);
    CHECK(!c.bad, "finite loss and norm: good");
    c = ct_nan_inf_verdict(&a, true, INFINITY);
    CHECK(c.bad && !c.loss && c.value == INFINITY, "an inf norm with a finite loss");
    c = ct_nan_inf_verdict(&a, false, INFINITY);
    CHECK(!c.bad, "a norm not known is not judged");
    a.loss.sum = INFINITY;
    c = ct_nan_inf_verdict(&a, true, NAN);
    CHECK(c.bad && c.loss && c.rank == -1, "finite sums that overflowed: the loss, no rank");
}

/* --- rank 0's metrics to every rank (ct_trainer_share_json) ---------------------------------------- */

typedef struct share_case {
    thread_comm comm;
    json_t *msg;
    ct_status status;
    int broadcasts;
} share_case;

static void *share_main(void *arg) {
    share_case *sc = arg;
    ct_trainer t;
    memset(&t, 0, sizeof t);
    t.comm = &sc->comm.base;
    t.rank = sc->comm.base.rank;
    t.world_size = sc->comm.base.world_size;
    sc->status = ct_trainer_share_json(&t, &sc->msg);
    return NULL;
}

/* A message of every size around the one-broadcast block (4096 bytes with its length) reaches every
 * rank whole: what rank 0 holds replaces what the others had. */
static void test_share_json(void) {
    enum { W = 3 };
    static const int sizes[] = {10, 4000, 4080, 4086, 4087, 4088, 4089, 4100, 20000};
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        char *text = malloc((size_t)sizes[k] + 1);
        for (int i = 0; i < sizes[k]; i++) text[i] = (char)('a' + i % 26);
        text[sizes[k]] = 0;
        thread_world world = {.W = W};
        pthread_barrier_init(&world.barrier, NULL, W);
        share_case sc[W];
        for (int r = 0; r < W; r++) {
            sc[r] = (share_case){.comm = {.base = {.ops = &thread_ops, .rank = r, .world_size = W, .timeout_s = 60},
                                          .world = &world}};
            sc[r].msg = r == 0 ? json_pack("{s:s, s:f}", "text", text, "eval_loss", 0.1) : json_pack("{s:i}", "old", r);
        }
        pthread_t th[W];
        for (int r = 0; r < W; r++) pthread_create(&th[r], NULL, share_main, &sc[r]);
        for (int r = 0; r < W; r++) pthread_join(th[r], NULL);
        pthread_barrier_destroy(&world.barrier);
        for (int r = 0; r < W; r++) {
            json_t *got = json_object_get(sc[r].msg, "text");
            CHECK(sc[r].status == CT_OK && got && !strcmp(json_string_value(got), text) &&
                      json_real_value(json_object_get(sc[r].msg, "eval_loss")) == 0.1 && !json_object_get(sc[r].msg, "old"),
                  "a text of %d bytes reaches rank %d whole (%s)", sizes[k], r,
                  sc[r].status == CT_OK ? "" : ct_last_error());
            json_decref(sc[r].msg);
        }
        free(text);
    }
}

/* --- counting a training step's collectives ------------------------------------------------------- */

#define MAX_CALLS 4096

struct ct_comm_request {
    ct_tensor view;
};

typedef struct counting {
    ct_comm base;
    int n;
    char kind[MAX_CALLS][16];
    char label[MAX_CALLS][96];
    int fail_wait_at;      /* >= 1: the n-th wait fails */
    int fail_agreement_at; /* >= 1: the n-th step agreement fails */
    int waits, agreements;
} counting;

static void note(counting *m, const char *kind) {
    if (m->n < MAX_CALLS) {
        snprintf(m->kind[m->n], sizeof m->kind[m->n], "%s", kind);
        snprintf(m->label[m->n], sizeof m->label[m->n], "%s", m->base.label);
    }
    m->n++;
}

static ct_status k_all_reduce(ct_comm *c, ct_tensor *t, ct_reduce op) {
    counting *m = (counting *)c;
    note(m, "all_reduce");
    if (strncmp(c->label, "step agreement", 14) == 0 && ++m->agreements == m->fail_agreement_at)
        return ct_error(CT_ERR_STATE, "no answer from the other ranks within 1 s (ddp_timeout)");
    /* The other rank adds what this one has, except to the step agreement: there it adds nothing (no
     * samples of its own, no evaluator), or the eval_async results process zero has ready would be
     * counted twice. */
    if (op == CT_SUM && strncmp(c->label, "step agreement", 14) != 0) ct_test_mirror_sum(t);
    return CT_OK;
}

static ct_status k_start(ct_comm *c, ct_tensor *t, ct_reduce op, ct_comm_request **req) {
    (void)op;
    note((counting *)c, "start");
    *req = calloc(1, sizeof **req);
    (*req)->view = *t;
    return CT_OK;
}

static ct_status k_wait(ct_comm *c, ct_comm_request *r) {
    counting *m = (counting *)c;
    note(m, "wait");
    ct_tensor v = r->view;
    free(r);
    if (++m->waits == m->fail_wait_at)
        return ct_error(CT_ERR_STATE, "no answer from the other ranks within 1 s (ddp_timeout)");
    ct_test_mirror_sum(&v);
    return CT_OK;
}

static ct_status k_broadcast(ct_comm *c, ct_tensor *t, int root) {
    (void)t, (void)root;
    note((counting *)c, "broadcast");
    return CT_OK;
}

static ct_status k_all_gather(ct_comm *c, const ct_tensor *in, ct_tensor *out) {
    note((counting *)c, "all_gather");
    size_t bytes = (size_t)ct_tensor_numel(in) * ct_dtype_size(in->dtype);
    for (int r = 0; r < 2; r++)
        if ((char *)out->data + r * bytes != (char *)in->data) memmove((char *)out->data + r * bytes, in->data, bytes);
    return CT_OK;
}

/* Rank 0's block of the doubled sum. */
static ct_status k_reduce_scatter(ct_comm *c, const ct_tensor *in, ct_tensor *out, ct_reduce op) {
    note((counting *)c, "reduce_scatter");
    memcpy(out->data, in->data, (size_t)ct_tensor_numel(out) * ct_dtype_size(out->dtype));
    if (op == CT_SUM) ct_test_mirror_sum(out);
    return CT_OK;
}

static ct_status k_barrier(ct_comm *c) {
    note((counting *)c, "barrier");
    return CT_OK;
}

static const ct_comm_ops counting_ops = {.size = sizeof(ct_comm_ops), .name = "counting", .all_reduce = k_all_reduce,
                                         .all_reduce_start = k_start, .wait = k_wait, .broadcast = k_broadcast,
                                         .all_gather = k_all_gather, .reduce_scatter = k_reduce_scatter,
                                         .barrier = k_barrier};

static char tmp_root[256];

static ct_dataset *make_data(int64_t n, int64_t dim, int64_t classes) {
    ct_rng rng;
    ct_rng_init(&rng, 7, 0, CT_RNG_USER);
    ct_tensor x, y;
    int64_t xs[2] = {n, dim}, ys[1] = {n};
    if (ct_tensor_alloc(&x, CT_F32, CT_CPU, 2, xs) != CT_OK || ct_tensor_alloc(&y, CT_I64, CT_CPU, 1, ys) != CT_OK)
        abort();
    for (int64_t i = 0; i < n * dim; i++) ((float *)x.data)[i] = (float)(ct_rng_uniform(&rng) * 2 - 1);
    for (int64_t i = 0; i < n; i++) ((int64_t *)y.data)[i] = (int64_t)(ct_rng_uniform(&rng) * (double)classes);
    ct_dataset *ds;
    if (ct_tensor_dataset_create(&x, &y, classes, &ds) != CT_OK) abort();
    ct_tensor_free(&x);
    ct_tensor_free(&y);
    return ds;
}

static ct_status make_model(ct_model *m, int64_t dim, int64_t classes) {
    json_t *spec = json_pack("{s:s, s:[i,i], s:I}", "type", "mlp", "hidden", 768, 768, "num_classes",
                             (json_int_t)classes);
    ct_module *root;
    ct_status s = ct_module_from_json(spec, "model", &root);
    json_decref(spec);
    CT_TRY(s);
    ct_shape in = {.ndim = 1, .dims = {dim}};
    ct_model_options o = {.dtype = CT_F32, .device = CT_CPU, .max_batch = 16, .seed = 3};
    return ct_model_build(m, root, &in, &o);
}

/* The replica eval_async evaluates on. */
static ct_status make_replica(void *ctx, int64_t max_batch, ct_device device, ct_model *out) {
    (void)ctx, (void)max_batch, (void)device;
    return make_model(out, 32, 4);
}

typedef struct run_opts {
    const char *sharding;
    int64_t steps, ga;
    int fail_wait_at, fail_agreement_at;
    ct_dataset *eval_async; /* non-NULL: evaluated asynchronously every step */
} run_opts;

/* Trains o->steps steps (one epoch holds them all); m receives the collectives of the training
 * (those of ct_trainer_init, the config check, are not counted). */
static ct_status run(const run_opts *o, ct_dataset *train, counting *m, char *error, size_t cap) {
    ct_model model;
    if (make_model(&model, 32, 4) != CT_OK) abort();
    memset(m, 0, sizeof *m);
    m->base = (ct_comm){.ops = &counting_ops, .rank = 0, .world_size = 2, .local_rank = 0, .local_world_size = 2,
                        .timeout_s = 1};
    ct_training_args a;
    ct_training_args_default(&a);
    snprintf(a.output_dir, sizeof a.output_dir, "%s/run", tmp_root);
    a.disable_tqdm = true;
    a.save_strategy = CT_INTERVAL_NO;
    a.logging_strategy = CT_INTERVAL_NO;
    a.learning_rate = 1e-2;
    a.per_device_train_batch_size = 4;
    a.gradient_accumulation_steps = o->ga;
    a.max_steps = o->steps;
    a.ddp_bucket_cap_mb = 1; /* several buckets */
    snprintf(a.optimizer_sharding, sizeof a.optimizer_sharding, "%s", o->sharding);
    ct_trainer_setup setup = {.model = &model, .train_dataset = train, .comm = &m->base};
    if (o->eval_async) {
        a.eval_async = true;
        a.eval_strategy = CT_INTERVAL_STEPS;
        a.eval_steps = 1;
        setup.n_eval = 1;
        setup.eval_datasets[0] = o->eval_async;
        setup.make_model = make_replica;
    }
    ct_trainer t;
    ct_status s = ct_trainer_init(&t, NULL, &a, &setup);
    if (s == CT_OK) {
        m->n = 0;
        m->fail_wait_at = o->fail_wait_at;
        m->fail_agreement_at = o->fail_agreement_at;
        ct_train_output out;
        ct_error_clear();
        s = ct_trainer_train(&t, NULL, &out);
        if (s == CT_OK) ct_train_output_free(&out);
        ct_trainer_free(&t);
    }
    snprintf(error, cap, "%s", s == CT_OK ? "" : ct_last_error());
    ct_training_args_free(&a);
    ct_model_free(&model);
    return s;
}

typedef struct tally {
    int blocking, agreements, starts, waits, other, async_ready, metrics_broadcasts;
} tally;

static tally count(const counting *m) {
    tally t = {0};
    for (int i = 0; i < m->n && i < MAX_CALLS; i++) {
        if (!strcmp(m->kind[i], "all_reduce")) {
            t.blocking++;
            t.agreements += strncmp(m->label[i], "step agreement", 14) == 0;
            t.async_ready += strncmp(m->label[i], "asynchronous evaluation results", 31) == 0;
        } else if (!strcmp(m->kind[i], "start")) {
            t.starts++;
        } else if (!strcmp(m->kind[i], "wait")) {
            t.waits++;
        } else {
            t.other++;
            t.metrics_broadcasts += !strcmp(m->kind[i], "broadcast") && !strcmp(m->label[i], "metrics from rank 0");
        }
    }
    return t;
}

static void test_counts(ct_dataset *train) {
    static counting m;
    char err[1024];
    const char *shardings[] = {"none", "zero1"};
    for (int k = 0; k < 2; k++) {
        const char *name = k ? "zero1" : "ddp";
        for (int64_t ga = 1; ga <= 2; ga++) {
            /* The difference between 6 and 3 steps is what 3 steps cost: the start and the end of the
             * run (broadcasts, the epoch end's stop agreement) cancel out. */
            tally t6, t3;
            CHECK_OK(run(&(run_opts){.sharding = shardings[k], .steps = 6, .ga = ga}, train, &m, err, sizeof err));
            t6 = count(&m);
            CHECK_OK(run(&(run_opts){.sharding = shardings[k], .steps = 3, .ga = ga}, train, &m, err, sizeof err));
            t3 = count(&m);
            int agreements = t6.agreements - t3.agreements, buckets = (t6.starts - t3.starts) / 3;
            CHECK(agreements == 3, "%s, accumulation %lld: %d step agreements in 3 steps", name, (long long)ga,
                  agreements);
            CHECK(t6.agreements == 6, "%s, accumulation %lld: %d step agreements in 6 steps", name, (long long)ga,
                  t6.agreements);
            if (k == 0) {
                /* ddp: the one agreement is the step's only blocking collective; the rest are buckets */
                CHECK(t6.blocking - t3.blocking == 3 && t6.other == t3.other,
                      "ddp, accumulation %lld: %d blocking all-reduces and %d others in 3 steps (want 3 and 0)",
                      (long long)ga, t6.blocking - t3.blocking, t6.other - t3.other);
                CHECK(buckets > 1 && t6.starts - t3.starts == 3 * buckets && t6.waits == t6.starts,
                      "ddp, accumulation %lld: %d buckets a step, each started and waited once", (long long)ga,
                      buckets);
                printf("ddp, accumulation %lld: per optimizer step 1 blocking all-reduce (the step agreement) + %d "
                       "gradient buckets\n", (long long)ga, buckets);
            } else {
                CHECK(t6.starts == 0, "zero1: no gradient buckets (%d starts)", t6.starts);
                /* zero1's own collectives (reduce-scatter, norm, all-gather) plus the one agreement */
                printf("zero1, accumulation %lld: per optimizer step 1 step agreement + %d all-reduces (the global "
                       "norm) + %d other collectives of the ZeRO-1 step\n", (long long)ga,
                       (t6.blocking - t3.blocking - 3) / 3, (t6.other - t3.other) / 3);
            }
        }
    }
    /* eval_async: the step agreement also counts the results ready, so a step takes them without a
     * collective of its own (only the end of the epoch and of training ask apart); each result comes
     * over one broadcast. */
    ct_dataset *eval = make_data(16, 32, 4);
    tally t6, t3;
    CHECK_OK(run(&(run_opts){.sharding = "none", .steps = 6, .ga = 1, .eval_async = eval}, train, &m, err, sizeof err));
    t6 = count(&m);
    CHECK_OK(run(&(run_opts){.sharding = "none", .steps = 3, .ga = 1, .eval_async = eval}, train, &m, err, sizeof err));
    t3 = count(&m);
    /* How many evaluations finish within the steps depends on the evaluator thread's pace, so the
     * counts are per kind: no blocking collective in a step but its agreement, and nothing else but
     * one broadcast per result. */
    CHECK(t6.agreements - t3.agreements == 3 && t6.blocking - t3.blocking == 3 && t6.async_ready == t3.async_ready &&
              t6.async_ready > 0,
          "eval_async: %d blocking all-reduces, %d agreements in 3 steps (want 3 and 3); results-ready all-reduces "
          "%d and %d (want equal, outside the steps)", t6.blocking - t3.blocking, t6.agreements - t3.agreements,
          t6.async_ready, t3.async_ready);
    CHECK(t6.metrics_broadcasts > 0 && t6.other - t6.metrics_broadcasts == t3.other - t3.metrics_broadcasts,
          "eval_async: steps add no collective but one broadcast per result (%d other collectives, %d of them "
          "results; %d and %d in the 3-step run)", t6.other, t6.metrics_broadcasts, t3.other, t3.metrics_broadcasts);
    ct_dataset_free(eval);
    /* Labels: a bucket's failed wait and a failed agreement say what they were. */
    ct_status s =
        run(&(run_opts){.sharding = "none", .steps = 3, .ga = 1, .fail_wait_at = 4}, train, &m, err, sizeof err);
    CHECK(s == CT_ERR_STATE && strstr(err, "gradient all-reduce (bucket 2 of ") &&
              strstr(err, "(all_reduce, rank 0/2): no answer from the other ranks within 1 s (ddp_timeout)"),
          "a bucket's timeout names it: %s", err);
    s = run(&(run_opts){.sharding = "none", .steps = 3, .ga = 1, .fail_agreement_at = 2}, train, &m, err, sizeof err);
    CHECK(s == CT_ERR_STATE && strstr(err, "step agreement (loss, nan_inf_policy, stop signal, eval_async) of "
                                           "optimizer step 2 (all_reduce, rank 0/2): no answer"),
          "the step agreement's timeout names it: %s", err);
    /* A label is used up by the call it was set for. */
    m.base.label[0] = 0;
    ct_comm_set_label(&m.base, "first %d", 1);
    int64_t v = 1;
    CHECK_OK(ct_comm_all_reduce_i64(&m.base, &v, 1, CT_MAX));
    CHECK(m.base.label[0] == 0, "the label is used up: '%s'", m.base.label);
}

int main(void) {
    snprintf(tmp_root, sizeof tmp_root, "/tmp/ct_step_agree_%d", (int)getpid());
    test_encoding();
    test_share_json();
    ct_dataset *train = make_data(256, 32, 4); /* 32 global batches: one epoch holds every run */
    test_counts(train);
    ct_dataset_free(train);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp_root);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp_root);
    return ct_test_finish();
}
