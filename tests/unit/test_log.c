/* The logger (core/log.h) and the log levels of a data-parallel run, as Hugging Face sets them:
 *  - the threshold: warning at start (transformers' default); a message prints iff its level is at
 *    least the threshold, for every level and a random threshold (Python numbers in between too);
 *    passive changes nothing;
 *  - the line: "warning: " etc. (nothing for info), "[rank R/W] " before it when W > 1, one newline,
 *    long messages cut with "..."; lines from 4 threads at once come out whole;
 *  - HF's TrainingArguments.should_log and get_process_log_level over every combination of rank,
 *    local rank, log_on_each_node, log_level and log_level_replica (passive on both sides) and the
 *    current threshold, first as literals for a few rows, then by the rule for the whole table;
 *  - ct_trainer_init applies it (a communicator of 4 ranks faked for one process) and sets the
 *    rank prefix; ct_trainer_log_run_summary prints HF's "***** Running training *****" block at
 *    info level, with HF's thousands separators, and nothing at warning.
 * stderr is captured by pointing file descriptor 2 at a temporary file (dup2). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/log.h"
#include "core/rng.h"
#include "model/layers.h"
#include "testlib.h"
#include "trainer_fixture.h"
#include "trainer/trainer.h"

/* --- capturing stderr ------------------------------------------------------------------------------ */

static FILE *cap_file;
static int cap_saved = -1;

static void capture_begin(void) {
    fflush(stderr);
    cap_file = tmpfile();
    if (!cap_file) abort();
    cap_saved = dup(2);
    dup2(fileno(cap_file), 2);
}

/* What was written to stderr since capture_begin (the caller frees it). */
static char *capture_end(void) {
    fflush(stderr);
    dup2(cap_saved, 2);
    close(cap_saved);
    long len = lseek(fileno(cap_file), 0, SEEK_END);
    char *out = calloc(1, (size_t)(len > 0 ? len : 0) + 1);
    if (len > 0 && pread(fileno(cap_file), out, (size_t)len, 0) != len) out[0] = 0;
    fclose(cap_file);
    return out;
}

static const int levels[] = {CT_LOG_LEVEL_DEBUG, CT_LOG_LEVEL_INFO, CT_LOG_LEVEL_WARNING, CT_LOG_LEVEL_ERROR,
                             CT_LOG_LEVEL_CRITICAL};
static const char *const level_prefixes[] = {"debug: ", "", "warning: ", "error: ", "critical: "};

static void log_at(int i, const char *msg) {
    switch (i) {
    case 0: ct_log_debug("%s", msg); break;
    case 1: ct_log_info("%s", msg); break;
    case 2: ct_log_warning("%s", msg); break;
    case 3: ct_log_error("%s", msg); break;
    default: ct_log_critical("%s", msg); break;
    }
}

/* --- threshold and line format ------------------------------------------------------------------------ */

static void threshold(ct_rng *rng) {
    CHECK(ct_log_get_level() == CT_LOG_LEVEL_WARNING, "default threshold %d, expected warning (30)",
          ct_log_get_level());
    capture_begin();
    for (int i = 0; i < 5; i++) log_at(i, "default");
    char *out = capture_end();
    CHECK(strcmp(out, "warning: default\nerror: default\ncritical: default\n") == 0, "at the default: '%s'", out);
    free(out);

    /* Every threshold, a named one or one in between (Python accepts any number). */
    for (int trial = 0; trial < 40; trial++) {
        int t = trial < 5 ? levels[trial] : 5 + (int)ct_rng_below(rng, 50);
        ct_log_set_level(t);
        CHECK(ct_log_get_level() == t, "set %d, got %d", t, ct_log_get_level());
        ct_log_set_level(CT_LOG_LEVEL_PASSIVE);
        CHECK(ct_log_get_level() == t, "passive changed %d to %d", t, ct_log_get_level());
        char want[512] = "", msg[64];
        size_t used = 0;
        capture_begin();
        for (int i = 0; i < 5; i++) {
            snprintf(msg, sizeof msg, "message %d at %d (%llu)", i, t, (unsigned long long)ct_rng_u64(rng));
            log_at(i, msg);
            CHECK(ct_log_enabled(levels[i]) == (levels[i] >= t), "enabled(%d) at threshold %d", levels[i], t);
            if (levels[i] >= t) used += (size_t)snprintf(want + used, sizeof want - used, "%s%s\n", level_prefixes[i], msg);
        }
        out = capture_end();
        CHECK(strcmp(out, want) == 0, "threshold %d:\n got '%s'\nwant '%s'", t, out, want);
        free(out);
    }

    /* ct_log at a level of its own; a trailing newline is not a second line; printf formatting. */
    ct_log_set_level(CT_LOG_LEVEL_DEBUG);
    capture_begin();
    ct_log(25, "between %s and %s", "info", "warning");
    ct_log_info("ends in a newline\n");
    ct_log_info("%s", "");
    ct_log(5, "below debug");
    out = capture_end();
    CHECK(strcmp(out, "between info and warning\nends in a newline\n\n") == 0, "levels in between: '%s'", out);
    free(out);
    ct_log_set_level(CT_LOG_LEVEL_WARNING);
}

static void rank_prefix(ct_rng *rng) {
    ct_log_set_level(CT_LOG_LEVEL_INFO);
    for (int trial = 0; trial < 20; trial++) {
        int world = 2 + (int)ct_rng_below(rng, 300), rank = (int)ct_rng_below(rng, (uint64_t)world);
        ct_log_set_rank(rank, world);
        capture_begin();
        ct_log_info("step %d", trial);
        ct_log_warning("careful");
        ct_log_debug("hidden");
        char *out = capture_end();
        char want[256];
        snprintf(want, sizeof want, "[rank %d/%d] step %d\n[rank %d/%d] warning: careful\n", rank, world, trial, rank,
                 world);
        CHECK(strcmp(out, want) == 0, "rank %d of %d:\n got '%s'\nwant '%s'", rank, world, out, want);
        free(out);
    }
    /* One process: no prefix. */
    ct_log_set_rank(0, 1);
    capture_begin();
    ct_log_error("alone");
    char *out = capture_end();
    CHECK(strcmp(out, "error: alone\n") == 0, "world 1: '%s'", out);
    free(out);

    /* A message longer than a line: cut, marked, still one line. */
    ct_log_set_rank(3, 8);
    char *big = malloc(3 * CT_LOG_LINE_MAX);
    memset(big, 'x', 3 * CT_LOG_LINE_MAX - 1);
    big[3 * CT_LOG_LINE_MAX - 1] = 0;
    capture_begin();
    ct_log_warning("%s", big);
    out = capture_end();
    size_t n = strlen(out);
    CHECK(n == CT_LOG_LINE_MAX - 1 && strncmp(out, "[rank 3/8] warning: xxx", 23) == 0 &&
              strcmp(out + n - 5, "x...\n") == 0 && strchr(out, '\n') == out + n - 1,
          "long message: %zu bytes, ends '%s'", n, n >= 8 ? out + n - 8 : out);
    free(out);
    free(big);
    ct_log_set_rank(0, 1);
    ct_log_set_level(CT_LOG_LEVEL_WARNING);
}

/* Four threads log at once: every line arrives whole (one write per line). */
#define THREADS 4
#define LINES 300

static void *chatter(void *arg) {
    int id = (int)(intptr_t)arg;
    char pad[200];
    memset(pad, 'a' + id, sizeof pad - 1);
    pad[sizeof pad - 1] = 0;
    for (int i = 0; i < LINES; i++) ct_log_warning("thread %d line %d %s", id, i, pad + (i % 150));
    return NULL;
}

static void threads(void) {
    capture_begin();
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++) pthread_create(&th[i], NULL, chatter, (void *)(intptr_t)i);
    for (int i = 0; i < THREADS; i++) pthread_join(th[i], NULL);
    char *out = capture_end();
    int seen[THREADS] = {0}, bad = 0;
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
        int id, i, used = 0;
        if (sscanf(line, "warning: thread %d line %d %n", &id, &i, &used) != 2 || id < 0 || id >= THREADS ||
            i != seen[id]) {
            bad++;
            continue;
        }
        const char *pad = line + used;
        size_t want_len = 199 - (size_t)(i % 150);
        bool whole = strlen(pad) == want_len;
        for (size_t k = 0; whole && k < want_len; k++) whole = pad[k] == 'a' + id;
        bad += !whole;
        seen[id]++;
    }
    CHECK(bad == 0, "%d lines from threads arrived broken or out of order", bad);
    for (int i = 0; i < THREADS; i++) CHECK(seen[i] == LINES, "thread %d: %d of %d lines", i, seen[i], LINES);
    free(out);
}

/* --- Hugging Face's process log level ---------------------------------------------------------------- */

static const int arg_levels[] = {CT_LOG_PASSIVE, CT_LOG_DEBUG, CT_LOG_INFO, CT_LOG_WARNING, CT_LOG_ERROR,
                                 CT_LOG_CRITICAL};

/* transformers' TrainingArguments: should_log, then get_process_log_level. */
static int hf_process_level(int rank, int local_rank, bool each_node, int log_level, int replica, int current) {
    bool should_log = each_node ? local_rank == 0 : rank == 0;
    int main_node = log_level == -1 ? current : log_level;
    int replica_node = replica == -1 ? current : replica;
    return should_log ? main_node : replica_node;
}

static void hf_table(void) {
    /* A few rows by hand: {rank, local rank, log_on_each_node, log_level, replica, current, expected}. */
    static const int rows[][7] = {
        {0, 0, 1, -1, 30, 20, 20}, /* the main process, passive: keeps the script's info */
        {1, 1, 1, -1, 30, 20, 30}, /* a replica: warning */
        {2, 0, 1, -1, 30, 20, 20}, /* a second node's main process logs too */
        {2, 0, 0, -1, 30, 20, 30}, /* ... but not without log_on_each_node */
        {0, 0, 0, 40, 10, 30, 40}, /* log_level error on the main process */
        {3, 1, 0, 40, 10, 30, 10}, /* log_level_replica debug elsewhere */
        {1, 1, 1, 10, -1, 50, 50}, /* a passive replica keeps the current threshold */
        {0, 0, 1, 50, -1, 10, 50},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const int *r = rows[i];
        ct_log_set_level(r[5]);
        int got = ct_log_process_level(ct_log_should_log(r[0], r[1], r[2]), r[3], r[4]);
        CHECK(got == r[6], "row %zu (rank %d, local %d, each node %d, %d/%d, current %d): %d, expected %d", i, r[0],
              r[1], r[2], r[3], r[4], r[5], got, r[6]);
    }
    /* The whole table. */
    static const int currents[] = {10, 20, 30, 40, 50};
    int checked = 0, wrong = 0;
    for (int rank = 0; rank < 4; rank++)
        for (int local = 0; local <= rank && local < 2; local++)
            for (int each = 0; each < 2; each++)
                for (int li = 0; li < 6; li++)
                    for (int ri = 0; ri < 6; ri++)
                        for (int ci = 0; ci < 5; ci++) {
                            ct_log_set_level(currents[ci]);
                            int want = hf_process_level(rank, local, each, arg_levels[li], arg_levels[ri], currents[ci]);
                            int got = ct_log_process_level(ct_log_should_log(rank, local, each), arg_levels[li],
                                                           arg_levels[ri]);
                            checked++;
                            if (got != want && wrong++ < 5)
                                CHECK(false, "rank %d local %d each %d levels %d/%d current %d: %d, expected %d", rank,
                                      local, each, arg_levels[li], arg_levels[ri], currents[ci], got, want);
                        }
    CHECK(wrong == 0 && checked == 7 * 2 * 6 * 6 * 5, "%d of %d rows wrong", wrong, checked);
    ct_log_set_level(CT_LOG_LEVEL_WARNING);
}

/* --- the Trainer applies it ------------------------------------------------------------------------ */

/* One rank of a pretend 4-process job: the only collective ct_trainer_init makes is the config
 * hash's all-gather, answered with this process's value on every rank. */
static ct_status lone_all_gather(ct_comm *c, const ct_tensor *in, ct_tensor *out) {
    size_t n = (size_t)ct_tensor_numel(in) * ct_dtype_size(in->dtype);
    for (int r = 0; r < c->world_size; r++) memcpy((char *)out->data + (size_t)r * n, in->data, n);
    return CT_OK;
}
static const ct_comm_ops lone_ops = {.size = sizeof(ct_comm_ops), .name = "lone", .all_gather = lone_all_gather};

static ct_dataset *make_data(int64_t n, int64_t dim) {
    return ct_fixture_dataset(&(ct_fixture_data){.kind = CT_FIXTURE_PATTERN, .n = n, .dim = dim, .classes = 4});
}

/* Training arguments whose output_dir is in the fixture's temporary root, not the default
 * "trainer_output" of whatever directory the test runs in. */
static void trainer_args(ct_training_args *a) {
    ct_training_args_default(a);
    snprintf(a->output_dir, sizeof a->output_dir, "%s/trainer_output", ct_fixture_tmp_root("ct_test_log"));
}

static ct_status make_model(ct_model *m, int64_t dim, int64_t hidden, int64_t max_batch) {
    ct_fixture_mlp o = {.dim = dim, .classes = 4, .hidden = {hidden}, .max_batch = max_batch, .seed = 7};
    return ct_fixture_mlp_build(&o, m);
}

static void trainer_levels(ct_rng *rng) {
    ct_model m;
    CHECK_OK(make_model(&m, 6, 16, 8));
    ct_dataset *ds = make_data(40, 6);
    int rows = 0, wrong = 0;
    for (int rank = 0; rank < 4; rank++)
        for (int local = 0; local < 2; local++)
            for (int each = 0; each < 2; each++) {
                /* Two random argument pairs per placement, passive among them often. */
                for (int k = 0; k < 2; k++) {
                    ct_training_args a;
                    trainer_args(&a);
                    a.disable_tqdm = true;
                    a.per_device_train_batch_size = 8;
                    a.log_level = (ct_log_level)arg_levels[ct_rng_below(rng, 6)];
                    a.log_level_replica = (ct_log_level)arg_levels[ct_rng_below(rng, 6)];
                    a.log_on_each_node = each;
                    int current = levels[ct_rng_below(rng, 5)];
                    ct_log_set_level(current);
                    ct_comm comm = {.ops = &lone_ops, .rank = rank, .world_size = 4, .local_rank = local,
                                    .local_world_size = 2, .timeout_s = 60};
                    ct_trainer_setup setup = {.model = &m, .train_dataset = ds, .comm = &comm};
                    ct_trainer t;
                    CHECK_OK(ct_trainer_init(&t, NULL, &a, &setup));
                    int want = hf_process_level(rank, local, each, a.log_level, a.log_level_replica, current);
                    rows++;
                    if (ct_log_get_level() != want || ct_trainer_should_log(&t) != (each ? local == 0 : rank == 0))
                        if (wrong++ < 5)
                            CHECK(false, "trainer on rank %d (local %d, each node %d, %s/%s, was %d): level %d, expected %d",
                                  rank, local, each, ct_log_level_name(a.log_level),
                                  ct_log_level_name(a.log_level_replica), current, ct_log_get_level(), want);
                    /* The rank prefix is set. */
                    ct_log_set_level(CT_LOG_LEVEL_WARNING);
                    capture_begin();
                    ct_log_warning("from the trainer");
                    char *out = capture_end();
                    char expect[64];
                    snprintf(expect, sizeof expect, "[rank %d/4] warning: from the trainer\n", rank);
                    CHECK(strcmp(out, expect) == 0, "prefix after ct_trainer_init: '%s'", out);
                    free(out);
                    ct_trainer_free(&t);
                    ct_training_args_free(&a);
                }
            }
    CHECK(wrong == 0, "%d of %d trainers set the wrong level", wrong, rows);
    ct_model_free(&m);
    ct_dataset_free(ds);
    ct_log_set_rank(0, 1);
    ct_log_set_level(CT_LOG_LEVEL_WARNING);
}

static void run_summary(void) {
    /* 6 -> 300 -> 4: 6*300 + 300 + 300*4 + 4 = 3,304 trainable parameters. */
    ct_model m;
    CHECK_OK(make_model(&m, 6, 300, 8));
    ct_dataset *ds = make_data(1003, 6);
    ct_training_args a;
    trainer_args(&a);
    a.disable_tqdm = true;
    a.per_device_train_batch_size = 8;
    a.gradient_accumulation_steps = 3;
    ct_trainer_setup setup = {.model = &m, .train_dataset = ds};
    ct_trainer t;
    CHECK_OK(ct_trainer_init(&t, NULL, &a, &setup));
    CHECK(ct_log_get_level() == CT_LOG_LEVEL_WARNING, "one process, passive: level %d", ct_log_get_level());

    capture_begin();
    ct_trainer_log_run_summary(&t, 1234567, 1000);
    char *out = capture_end();
    CHECK(out[0] == 0, "at warning the summary printed: '%s'", out);
    free(out);

    ct_log_set_level(CT_LOG_LEVEL_INFO);
    capture_begin();
    ct_trainer_log_run_summary(&t, 1234567, 1000);
    out = capture_end();
    const char *want = "***** Running training *****\n"
                       "  Num examples = 1,003\n"
                       "  Num Epochs = 1,000\n"
                       "  Instantaneous batch size per device = 8\n"
                       "  Total train batch size (w. parallel, distributed & accumulation) = 24\n"
                       "  Gradient Accumulation steps = 3\n"
                       "  Total optimization steps = 1,234,567\n"
                       "  Number of trainable parameters = 3,304\n";
    CHECK(strcmp(out, want) == 0, "summary:\n got '%s'\nwant '%s'", out, want);
    free(out);

    /* In a job of 4: the world multiplies the total batch and every line carries the rank. */
    t.world_size = 4;
    ct_log_set_rank(2, 4);
    capture_begin();
    ct_trainer_log_run_summary(&t, 999, 7);
    out = capture_end();
    CHECK(strstr(out, "[rank 2/4] ***** Running training *****\n") == out &&
              strstr(out, "\n[rank 2/4]   Total train batch size (w. parallel, distributed & accumulation) = 96\n") &&
              strstr(out, "\n[rank 2/4]   Total optimization steps = 999\n") &&
              strstr(out, "\n[rank 2/4]   Num Epochs = 7\n"),
          "summary of rank 2/4: '%s'", out);
    free(out);
    t.world_size = 1;
    ct_log_set_rank(0, 1);
    ct_log_set_level(CT_LOG_LEVEL_WARNING);
    ct_trainer_free(&t);
    ct_training_args_free(&a);
    ct_model_free(&m);
    ct_dataset_free(ds);
}

int main(void) {
    ct_test_begin("test_log");
    ct_rng rng;
    ct_rng_init(&rng, ct_test_seed, 0, CT_RNG_USER);
    if (!ct_fixture_tmp_root("ct_test_log")) return 1;
    threshold(&rng); /* first: it checks the default */
    rank_prefix(&rng);
    threads();
    hf_table();
    trainer_levels(&rng);
    run_summary();
    ct_fixture_cleanup();
    return ct_test_finish();
}
