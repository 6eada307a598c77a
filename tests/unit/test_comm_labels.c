/* Every collective the Trainer makes says what it is for (ct_comm_set_label), so that a timeout names
 * the operation that waited ("gradient all-reduce (bucket 1 of 2) (all_reduce, rank 0/2): no answer
 * ...") rather than only the collective. Seen through a recording communicator that plays rank 0 of
 * 2 and mirrors itself as rank 1 (every SUM doubles, MIN/MAX and broadcasts keep the value, gathers
 * repeat this rank's part):
 *  - runs with data parallelism, evaluation with metrics, checkpoints (synchronous and save_async)
 *    and load_best_model_at_end make no collective without a label, and the labels name the
 *    operations (the gradient all-reduce, the step agreement, the checkpoint agreement, the metric
 *    states). (Prediction's gathers are left out: a mirrored rank cannot hold the other half of the
 *    dataset's sample indices.)
 *  - a collective that times out, chosen by its label (the gradient all-reduce, the step agreement,
 *    a checkpoint agreement, a metric's state, the parameter broadcast), fails the run with a message
 *    that names that operation, the collective and the rank. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testlib.h"
#include "trainer/trainer.h"
#include "trainer_fixture.h"

/* --- the recording mirror ------------------------------------------------------------------------ */

#define MAX_LABELS 64

typedef struct recorder {
    ct_comm base;
    int calls, unlabelled;
    char first_unlabelled[64];   /* the collective of the first call without a label */
    char labels[MAX_LABELS][96]; /* distinct labels seen, numbers and all */
    int n_labels;
    const char *fail_label; /* a call whose label contains this times out (once) */
    int failed;
} recorder;

struct ct_comm_request {
    ct_tensor t;
};

/* Notes the label of this call; true when the call is to time out. */
static bool record(ct_comm *c, const char *collective) {
    recorder *r = (recorder *)c;
    r->calls++;
    if (!c->label[0]) {
        if (!r->unlabelled++) snprintf(r->first_unlabelled, sizeof r->first_unlabelled, "%s", collective);
    } else {
        int i = 0;
        while (i < r->n_labels && strcmp(r->labels[i], c->label) != 0) i++;
        if (i == r->n_labels && r->n_labels < MAX_LABELS) snprintf(r->labels[r->n_labels++], 96, "%s", c->label);
    }
    if (r->fail_label && !r->failed && strstr(c->label, r->fail_label)) {
        r->failed = 1;
        return true;
    }
    return false;
}

static ct_status timeout(const ct_comm *c) {
    return ct_error(CT_ERR_STATE, "no answer from the other ranks within %g s (ddp_timeout)", c->timeout_s);
}

static ct_status r_all_reduce(ct_comm *c, ct_tensor *t, ct_reduce op) {
    if (record(c, "all_reduce")) return timeout(c);
    if (op == CT_SUM) ct_test_mirror_sum(t);
    return CT_OK;
}

static ct_status r_start(ct_comm *c, ct_tensor *t, ct_reduce op, ct_comm_request **req) {
    if (record(c, "all_reduce_start")) return timeout(c);
    if (op != CT_SUM) return ct_error(CT_ERR_INVALID_ARG, "recorder: sums only");
    *req = calloc(1, sizeof **req);
    CT_ASSERT(*req);
    (*req)->t = *t;
    return CT_OK;
}

static ct_status r_wait(ct_comm *c, ct_comm_request *req) {
    ct_tensor t = req->t;
    free(req);
    if (record(c, "wait")) return timeout(c);
    ct_test_mirror_sum(&t);
    return CT_OK;
}

static ct_status r_broadcast(ct_comm *c, ct_tensor *t, int root) {
    (void)t, (void)root;
    return record(c, "broadcast") ? timeout(c) : CT_OK;
}

static ct_status r_all_gather(ct_comm *c, const ct_tensor *in, ct_tensor *out) {
    if (record(c, "all_gather")) return timeout(c);
    size_t bytes = ct_tensor_nbytes(in);
    for (int q = 0; q < 2; q++)
        if ((char *)out->data + q * bytes != (char *)in->data) memmove((char *)out->data + q * bytes, in->data, bytes);
    return CT_OK;
}

static ct_status r_gather_v(ct_comm *c, const ct_tensor *in, int root, ct_tensor *out) {
    (void)root;
    *out = (ct_tensor){0};
    if (record(c, "gather_v")) return timeout(c);
    int64_t n = 2 * ct_tensor_numel(in);
    if (n == 0) return CT_OK;
    CT_TRY(ct_tensor_alloc(out, in->dtype, CT_CPU, 1, &n));
    size_t bytes = ct_tensor_nbytes(in);
    memcpy(out->data, in->data, bytes);
    memcpy((char *)out->data + bytes, in->data, bytes);
    return CT_OK;
}

static ct_status r_barrier(ct_comm *c) { return record(c, "barrier") ? timeout(c) : CT_OK; }

static const ct_comm_ops recorder_ops = {.size = sizeof(ct_comm_ops),
                                         .name = "recorder",
                                         .all_reduce = r_all_reduce,
                                         .all_reduce_start = r_start,
                                         .wait = r_wait,
                                         .broadcast = r_broadcast,
                                         .all_gather = r_all_gather,
                                         .gather_v = r_gather_v,
                                         .barrier = r_barrier};

static void recorder_init(recorder *r, const char *fail_label) {
    memset(r, 0, sizeof *r);
    r->base = (ct_comm){
        .ops = &recorder_ops, .rank = 0, .world_size = 2, .local_rank = 0, .local_world_size = 2, .timeout_s = 5};
    r->fail_label = fail_label;
}

static bool saw_label(const recorder *r, const char *part) {
    for (int i = 0; i < r->n_labels; i++)
        if (strstr(r->labels[i], part)) return true;
    return false;
}

/* --- runs ----------------------------------------------------------------------------------------- */

static const char *tmp_root;

/* 64 samples, batches of 8 per process (16 a step over the two): 4 steps an epoch; evaluation and a
 * checkpoint every 2 steps, the best model loaded at the end. */
static void run_args(ct_training_args *a, const char *name, bool save_async) {
    ct_fixture_args(a, tmp_root, name);
    ct_fixture_remove(a->output_dir);
    a->disable_tqdm = false; /* no printer: the progress bar, off a terminal, prints nothing */
    a->per_device_train_batch_size = 8;
    a->per_device_eval_batch_size = 8;
    a->max_steps = 6;
    a->logging_steps = 2;
    a->eval_strategy = CT_INTERVAL_STEPS;
    a->eval_steps = 2;
    a->save_strategy = CT_INTERVAL_STEPS;
    a->save_steps = 2;
    a->save_total_limit = 2;
    a->load_best_model_at_end = true;
    a->save_async = save_async;
}

static ct_fixture_run train(recorder *rec, const ct_training_args *a) {
    ct_dataset *data = ct_fixture_small_data(64, 1), *eval = ct_fixture_small_data(24, 2);
    ct_model m;
    ct_fixture_mlp mo = {.dim = 6, .classes = 3, .hidden = {8}, .max_batch = 16, .seed = 5};
    if (ct_fixture_mlp_build(&mo, &m) != CT_OK) abort();
    ct_trainer_setup setup = {.model = &m, .train_dataset = data, .n_eval = 1, .comm = &rec->base};
    setup.eval_datasets[0] = eval;
    ct_trainer t;
    ct_fixture_run r;
    if (ct_fixture_train(&t, NULL, a, &setup, NULL, &r)) ct_trainer_free(&t);
    ct_model_free(&m);
    ct_dataset_free(data);
    ct_dataset_free(eval);
    return r;
}

static void all_labelled(bool save_async) {
    const char *what = save_async ? "save_async" : "synchronous saves";
    recorder rec;
    recorder_init(&rec, NULL);
    ct_training_args a;
    run_args(&a, save_async ? "async" : "sync", save_async);
    ct_fixture_run r = train(&rec, &a);
    CHECK(r.status == CT_OK, "%s: the run failed: %s", what, r.message);
    CHECK(rec.calls > 20, "%s: only %d collectives", what, rec.calls);
    CHECK(rec.unlabelled == 0, "%s: %d of %d collectives without a label, the first a %s", what, rec.unlabelled,
          rec.calls, rec.first_unlabelled);
    static const char *const expected[] = {"parameter broadcast", "gradient all-reduce (bucket",
                                           "step agreement",      "checkpoint agreement",
                                           "metric 'loss'",       "output_dir lock"};
    for (size_t i = 0; i < sizeof expected / sizeof *expected; i++)
        CHECK(saw_label(&rec, expected[i]), "%s: no collective labelled '%s'", what, expected[i]);
    if (save_async) CHECK(saw_label(&rec, "save_async agreement"), "save_async: no 'save_async agreement'");
    ct_fixture_run_free(&r);
}

/* The collective whose label contains `label` times out: the run fails naming it. */
static void timeout_names(const char *label, bool save_async) {
    recorder rec;
    recorder_init(&rec, label);
    ct_training_args a;
    run_args(&a, "timeout", save_async);
    ct_fixture_run r = train(&rec, &a);
    CHECK(rec.failed, "no collective labelled '%s' ran", label);
    CHECK(r.status == CT_ERR_STATE && strstr(r.message, label) && strstr(r.message, ", rank 0/2): no answer"),
          "a timeout in '%s': %s: %s", label, ct_status_str(r.status), r.message);
    ct_fixture_run_free(&r);
}

int main(void) {
    ct_test_begin("test_comm_labels");
    if (!(tmp_root = ct_fixture_tmp_root("ct_test_comm_labels"))) return 1;
    all_labelled(false);
    all_labelled(true);
    timeout_names("parameter broadcast", false);
    timeout_names("gradient all-reduce (bucket 1 of", false);
    timeout_names("step agreement", false);
    timeout_names("metric 'loss'", false);
    timeout_names("checkpoint agreement", false);
    timeout_names("save_async agreement", true);
    ct_fixture_cleanup();
    return ct_test_finish();
}
