/* Memory reports (trainer/memory.h), HF's TrainerMemoryTracker semantics:
 *  - a block of a random size (fresh each run) allocated and touched inside a stage and kept shows
 *    in <stage>_mem_cpu_alloc_delta, not in peaked_delta; one allocated, touched and freed inside the
 *    stage shows in peaked_delta, not in alloc_delta; one freed inside the stage gives alloc_delta
 *    -size and peaked_delta +size (the stage's peak was its start); both peak methods (VmHWM reset
 *    through clear_refs, and the sampler thread), in bands of a few MiB;
 *  - init's keys and before_init_mem_cpu join the first stage that reports, once; a stage nested in
 *    another (evaluate inside train) adds nothing and is counted by the outer one; a failed stage
 *    is dropped; a NULL tracker (skip_memory_metrics) does nothing;
 *  - the Trainer: with skip_memory_metrics false, a short training with evaluations inside it, then
 *    evaluate and predict, give HF's key sets in the train output, the logged train metrics (not the
 *    evaluation logs), the eval and test metrics, and all_results.json; with the default (true) no
 *    memory key anywhere. (HF's own key set is checked against the CLI by oracle.test_memory_metrics.) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "core/rng.h"
#include "model/layers.h"
#include "testlib.h"
#include "trainer_fixture.h"
#include "trainer/memory.h"
#include "trainer/trainer_impl.h" /* the tracker is internal (priv) */

#define MiB ((int64_t)1 << 20)

static const char *tmp_root; /* the fixture's temporary root */
static ct_rng rng;

/* Resident bytes per byte a test block holds: 1 in ordinary builds (checked), more under TSan, whose
 * shadow memory grows with every byte written. Measured by test_rss. */
static double rss_per_byte = 1;

/* A block of `bytes` mapped and filled with non-zero data: resident. Blocks are mapped rather than
 * malloc'd so that what a test frees leaves the RSS whatever the allocator (glibc maps blocks this
 * big anyway; ASan's would keep freed ones in quarantine). */
typedef struct block {
    char *p;
    int64_t bytes;
} block;

static block touch_block(int64_t bytes) {
    char *p = mmap(NULL, (size_t)bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) abort();
    memset(p, (int)(1 + ct_rng_uniform(&rng) * 250), (size_t)bytes);
    return (block){p, bytes};
}

static void release(block *b) {
    if (b->p) munmap(b->p, (size_t)b->bytes);
    *b = (block){0};
}

/* Random sizes from 48 to 112 MiB. */
static int64_t random_size(void) { return (48 + (int64_t)(ct_rng_uniform(&rng) * 64)) * MiB; }

/* The RSS a block of `size` adds. */
static int64_t resident(int64_t size) { return (int64_t)((double)size * rss_per_byte); }

static void pause_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* |got - want| within 4 MiB + 1/32 of the block's resident size (page tables, the heap, and the
 * kernel's per-CPU RSS counter slack are far below that; a wrong unit or sign is far above). */
static bool near_bytes(int64_t got, int64_t want, int64_t size) {
    int64_t tol = 4 * MiB + resident(size) / 32;
    return llabs((long long)(got - want)) <= tol;
}

static int64_t get_int(const json_t *m, const char *key) {
    const json_t *v = json_object_get(m, key);
    return json_is_integer(v) ? (int64_t)json_integer_value(v) : INT64_MIN;
}

/* Keys of m that belong to the memory report, sorted and joined by spaces. */
static void memory_keys(const json_t *m, char *out, size_t cap) {
    const char *keys[64];
    int n = 0;
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)m, k, v) if ((strstr(k, "_mem_") || strncmp(k, "before_init_mem", 15) == 0) && n < 64)
        keys[n++] = k;
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && strcmp(keys[j - 1], keys[j]) > 0; j--) {
            const char *t = keys[j];
            keys[j] = keys[j - 1];
            keys[j - 1] = t;
        }
    out[0] = 0;
    for (int i = 0; i < n; i++) {
        size_t len = strlen(out);
        snprintf(out + len, cap - len, "%s%s", i ? " " : "", keys[i]);
    }
}

#define CHECK_KEYS(m, want, what)                                                                          \
    do {                                                                                                   \
        char got_[1024];                                                                                   \
        memory_keys((m), got_, sizeof got_);                                                               \
        CHECK(strcmp(got_, (want)) == 0, "%s: memory keys [%s], expected [%s]", (what), got_, (want));     \
    } while (0)

static const char *method_name(ct_mem_peak_method m) {
    return m == CT_MEM_PEAK_HWM ? "hwm" : m == CT_MEM_PEAK_SAMPLER ? "sampler" : "auto";
}

/* --- the tracker ---------------------------------------------------------------------------------- */

static void test_rss(void) {
    int64_t before = ct_mem_rss_bytes(), size = random_size();
    CHECK(before > 0, "ct_mem_rss_bytes() = %lld", (long long)before);
    block b = touch_block(size);
    int64_t after = ct_mem_rss_bytes();
#if defined(__SANITIZE_THREAD__)
    rss_per_byte = (double)(after - before) / (double)size;
    CHECK(rss_per_byte > 0.9, "RSS grew by %lld after touching %lld bytes", (long long)(after - before),
          (long long)size);
#else
    CHECK(near_bytes(after - before, size, size), "RSS grew by %lld after touching %lld bytes",
          (long long)(after - before), (long long)size);
#endif
    release(&b);
    CHECK(near_bytes(ct_mem_rss_bytes() - before, 0, size), "RSS did not come back after unmapping");
}

static ct_memory_tracker *tracker(ct_mem_peak_method method) {
    ct_memory_tracker *m = NULL;
    CHECK_OK(ct_memory_tracker_create(&(ct_memory_tracker_opts){.peak = method, .sample_interval_s = 1e-3}, &m));
    if (!m) abort();
    return m;
}

/* Kept, transient and released blocks inside one stage of a tracker using `method`. */
static void test_deltas(ct_mem_peak_method method) {
    ct_memory_tracker *m = tracker(method);
    ct_mem_peak_method used = ct_memory_tracker_peak_method(m);
    const char *label = method_name(used);
    CHECK(method == CT_MEM_PEAK_AUTO ? used != CT_MEM_PEAK_AUTO : used == method, "%s: peak method %s", label,
          method_name(used));
    /* The sampler sees a block only while it lives: hold it for many sampling periods. */
    int hold_ms = used == CT_MEM_PEAK_SAMPLER ? 200 : 0;

    /* kept: alloc_delta, not peaked_delta */
    int64_t size = random_size();
    json_t *mt = json_object();
    ct_memory_tracker_start(m, CT_MEM_TRAIN);
    block kept = touch_block(size);
    CHECK_OK(ct_memory_tracker_stop(m, CT_MEM_TRAIN, CT_OK, mt));
    int64_t alloc = get_int(mt, "train_mem_cpu_alloc_delta"), peaked = get_int(mt, "train_mem_cpu_peaked_delta");
    CHECK(near_bytes(alloc, resident(size), size), "%s: kept %lld bytes, train_mem_cpu_alloc_delta %lld", label,
          (long long)size, (long long)alloc);
    CHECK(peaked >= 0 && near_bytes(peaked, 0, size), "%s: kept %lld bytes, train_mem_cpu_peaked_delta %lld", label,
          (long long)size, (long long)peaked);
    /* The first stage to report carries init's keys; init never ran here, so only the stage's. */
    CHECK_KEYS(mt, "train_mem_cpu_alloc_delta train_mem_cpu_peaked_delta", label);
    json_decref(mt);

    /* released inside the stage: alloc_delta about -size; the stage's peak was its start, so
     * peaked_delta is about +size (alloc + peaked: the stage needed nothing beyond its start) */
    json_t *me = json_object();
    ct_memory_tracker_start(m, CT_MEM_EVAL);
    pause_ms(hold_ms);
    release(&kept);
    CHECK_OK(ct_memory_tracker_stop(m, CT_MEM_EVAL, CT_OK, me));
    alloc = get_int(me, "eval_mem_cpu_alloc_delta");
    peaked = get_int(me, "eval_mem_cpu_peaked_delta");
    CHECK(near_bytes(alloc, -resident(size), size), "%s: freed %lld bytes, eval_mem_cpu_alloc_delta %lld", label,
          (long long)size, (long long)alloc);
    CHECK(near_bytes(peaked, resident(size), size), "%s: freed %lld bytes, eval_mem_cpu_peaked_delta %lld", label,
          (long long)size, (long long)peaked);
    json_decref(me);

    /* transient: peaked_delta, not alloc_delta; and both at once */
    for (int round = 0; round < 2; round++) {
        int64_t keep_size = round ? random_size() : 0, gone_size = random_size();
        json_t *mp = json_object();
        ct_memory_tracker_start(m, CT_MEM_TEST);
        block k = keep_size ? touch_block(keep_size) : (block){0};
        block g = touch_block(gone_size);
        pause_ms(hold_ms);
        release(&g);
        pause_ms(hold_ms / 5);
        CHECK_OK(ct_memory_tracker_stop(m, CT_MEM_TEST, CT_OK, mp));
        alloc = get_int(mp, "test_mem_cpu_alloc_delta");
        peaked = get_int(mp, "test_mem_cpu_peaked_delta");
        CHECK(near_bytes(alloc, resident(keep_size), gone_size),
              "%s: kept %lld, freed %lld: test_mem_cpu_alloc_delta %lld", label, (long long)keep_size,
              (long long)gone_size, (long long)alloc);
        CHECK(near_bytes(peaked, resident(gone_size), gone_size),
              "%s: kept %lld, freed %lld: test_mem_cpu_peaked_delta %lld", label, (long long)keep_size,
              (long long)gone_size, (long long)peaked);
        release(&k);
        json_decref(mp);
    }
    /* every stage's reset of VmHWM took (else the tracker falls back to the sampler for good) */
    CHECK(ct_memory_tracker_peak_method(m) == used, "%s: the tracker fell back to %s", label,
          method_name(ct_memory_tracker_peak_method(m)));
    ct_memory_tracker_free(m);
}

static void test_stages(void) {
    ct_memory_tracker *m = tracker(CT_MEM_PEAK_AUTO);
    int64_t rss0 = ct_mem_rss_bytes();
    /* init reports nothing itself; its keys and before_init_mem_cpu join the first stage, once */
    ct_memory_tracker_start(m, CT_MEM_INIT);
    int64_t size = random_size();
    block init_block = touch_block(size);
    CHECK_OK(ct_memory_tracker_stop(m, CT_MEM_INIT, CT_OK, NULL));

    /* evaluate inside train: ignored; train counts its memory */
    json_t *mt = json_object(), *me = json_object();
    ct_memory_tracker_start(m, CT_MEM_TRAIN);
    ct_memory_tracker_start(m, CT_MEM_EVAL);
    int64_t size2 = random_size();
    block eval_block = touch_block(size2);
    CHECK_OK(ct_memory_tracker_stop(m, CT_MEM_EVAL, CT_OK, me));
    CHECK(json_object_size(me) == 0, "a nested evaluation got %zu memory keys", json_object_size(me));
    CHECK_OK(ct_memory_tracker_stop(m, CT_MEM_TRAIN, CT_OK, mt));
    CHECK_KEYS(mt, "before_init_mem_cpu init_mem_cpu_alloc_delta init_mem_cpu_peaked_delta "
                   "train_mem_cpu_alloc_delta train_mem_cpu_peaked_delta", "train after init");
    CHECK(near_bytes(get_int(mt, "init_mem_cpu_alloc_delta"), resident(size), size),
          "init_mem_cpu_alloc_delta %lld for %lld", (long long)get_int(mt, "init_mem_cpu_alloc_delta"),
          (long long)size);
    CHECK(near_bytes(get_int(mt, "train_mem_cpu_alloc_delta"), resident(size2), size2),
          "train_mem_cpu_alloc_delta %lld does not count the nested stage's %lld",
          (long long)get_int(mt, "train_mem_cpu_alloc_delta"), (long long)size2);
    CHECK(near_bytes(get_int(mt, "before_init_mem_cpu"), rss0, size), "before_init_mem_cpu %lld, RSS was %lld",
          (long long)get_int(mt, "before_init_mem_cpu"), (long long)rss0);
    json_decref(mt);
    json_decref(me);

    /* the next stage: its own keys only; the same stage nested in itself reports once, at the outer end */
    json_t *inner = json_object(), *outer = json_object();
    ct_memory_tracker_start(m, CT_MEM_EVAL);
    ct_memory_tracker_start(m, CT_MEM_EVAL);
    CHECK_OK(ct_memory_tracker_stop(m, CT_MEM_EVAL, CT_OK, inner));
    CHECK(json_object_size(inner) == 0, "an inner evaluate got memory keys");
    CHECK_OK(ct_memory_tracker_stop(m, CT_MEM_EVAL, CT_OK, outer));
    CHECK_KEYS(outer, "eval_mem_cpu_alloc_delta eval_mem_cpu_peaked_delta", "evaluate after train");
    json_decref(inner);
    json_decref(outer);

    /* a failed stage: its status comes back, nothing is added, and the tracker goes on */
    json_t *mf = json_object();
    ct_memory_tracker_start(m, CT_MEM_TEST);
    CHECK(ct_memory_tracker_stop(m, CT_MEM_TEST, CT_ERR_IO, mf) == CT_ERR_IO, "a failed stage's status is lost");
    CHECK(json_object_size(mf) == 0, "a failed stage reported memory");
    ct_memory_tracker_start(m, CT_MEM_TEST);
    CHECK_OK(ct_memory_tracker_stop(m, CT_MEM_TEST, CT_OK, mf));
    CHECK_KEYS(mf, "test_mem_cpu_alloc_delta test_mem_cpu_peaked_delta", "predict after a failed predict");
    /* a stop for a stage that is not running changes nothing */
    json_t *none = json_object();
    CHECK_OK(ct_memory_tracker_stop(m, CT_MEM_TRAIN, CT_OK, none));
    CHECK(json_object_size(none) == 0, "a stop without a start reported memory");
    json_decref(mf);
    json_decref(none);

    /* freeing a tracker in the middle of a stage ends its sampler */
    ct_memory_tracker *s = tracker(CT_MEM_PEAK_SAMPLER);
    ct_memory_tracker_start(s, CT_MEM_TRAIN);
    ct_memory_tracker_free(s);
    ct_memory_tracker_free(m);
    release(&init_block);
    release(&eval_block);

    /* skip_memory_metrics: no tracker, nothing happens */
    json_t *skip = json_object();
    ct_memory_tracker_start(NULL, CT_MEM_TRAIN);
    CHECK(ct_memory_tracker_stop(NULL, CT_MEM_TRAIN, CT_OK, skip) == CT_OK, "NULL tracker");
    CHECK(ct_memory_tracker_stop(NULL, CT_MEM_TRAIN, CT_ERR_IO, skip) == CT_ERR_IO, "NULL tracker loses a status");
    CHECK(json_object_size(skip) == 0, "a NULL tracker added keys");
    json_decref(skip);
    CHECK(strcmp(ct_mem_stage_name(CT_MEM_TEST), "test") == 0 && strcmp(ct_mem_stage_name(CT_MEM_INIT), "init") == 0,
          "stage names");
    ct_memory_tracker *bad = NULL;
    CHECK_ERR(ct_memory_tracker_create(&(ct_memory_tracker_opts){.sample_interval_s = -1}, &bad), CT_ERR_INVALID_ARG,
              "sample_interval_s");
}

/* --- the Trainer ---------------------------------------------------------------------------------- */

static ct_dataset *make_data(int64_t n, int64_t dim, int64_t classes, uint64_t seed) {
    return ct_fixture_dataset(&(ct_fixture_data){.n = n, .dim = dim, .classes = classes, .seed = seed});
}

static ct_status make_model(ct_model *m, int64_t dim, int64_t classes, int64_t max_batch) {
    ct_fixture_mlp o = {.dim = dim, .classes = classes, .hidden = {16}, .max_batch = max_batch, .seed = ct_test_seed};
    return ct_fixture_mlp_build(&o, m);
}

static json_t *load_json(const char *dir, const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    json_error_t err;
    json_t *v = json_load_file(path, 0, &err);
    CHECK(v != NULL, "%s: %s", path, err.text);
    return v ? v : json_object();
}

static void test_trainer(bool skip) {
    const char *label = skip ? "skip_memory_metrics true" : "skip_memory_metrics false";
    ct_training_args a;
    ct_training_args_default(&a);
    CHECK(a.skip_memory_metrics, "skip_memory_metrics does not default to true (HF's default)");
    snprintf(a.output_dir, sizeof a.output_dir, "%s/%s", tmp_root, skip ? "skip" : "report");
    a.skip_memory_metrics = skip;
    a.disable_tqdm = true;
    a.save_strategy = CT_INTERVAL_NO;
    a.logging_strategy = CT_INTERVAL_STEPS;
    a.logging_steps = 2;
    a.eval_strategy = CT_INTERVAL_EPOCH; /* evaluations nested in train */
    a.num_train_epochs = 2;
    a.per_device_train_batch_size = 8;
    a.per_device_eval_batch_size = 16;
    ct_dataset *train = make_data(40, 5, 3, ct_test_seed + 1), *eval = make_data(21, 5, 3, ct_test_seed + 2),
               *test = make_data(13, 5, 3, ct_test_seed + 3);
    ct_model model;
    CHECK_OK(make_model(&model, 5, 3, 16));
    ct_trainer_setup setup = {.model = &model, .train_dataset = train, .n_eval = 1};
    setup.eval_datasets[0] = eval;
    ct_trainer t;
    CHECK_OK(ct_trainer_init(&t, NULL, &a, &setup));
    CHECK((t.priv->memory != NULL) == !skip, "%s: tracker %p", label, (void *)t.priv->memory);
    ct_train_output out;
    CHECK_OK(ct_trainer_train(&t, NULL, &out));
    json_t *em = NULL;
    CHECK_OK(ct_trainer_evaluate(&t, NULL, "eval", &em));
    ct_prediction_output p;
    CHECK_OK(ct_trainer_predict(&t, test, "test", &p));
    /* the train stage's report joins the metrics before they are logged (the last log entry), the
     * evaluations' after: never in the log */
    const char *want_train = skip ? ""
                                  : "before_init_mem_cpu init_mem_cpu_alloc_delta init_mem_cpu_peaked_delta "
                                    "train_mem_cpu_alloc_delta train_mem_cpu_peaked_delta";
    const char *want_eval = skip ? "" : "eval_mem_cpu_alloc_delta eval_mem_cpu_peaked_delta";
    const char *want_test = skip ? "" : "test_mem_cpu_alloc_delta test_mem_cpu_peaked_delta";
    CHECK_KEYS(out.metrics, want_train, label);
    CHECK_KEYS(em, want_eval, label);
    CHECK_KEYS(p.metrics, want_test, label);
    json_t *hist = t.state.log_history;
    size_t n = json_array_size(hist), evals = 0, summaries = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(hist, i);
        if (json_object_get(e, "train_loss")) {
            summaries++;
            CHECK_KEYS(e, want_train, "the logged train summary");
        } else {
            evals += json_object_get(e, "eval_loss") != NULL;
            CHECK_KEYS(e, "", "a log entry other than the train summary");
        }
    }
    /* two during training (epochs), one after */
    CHECK(evals == 3 && summaries == 1, "%s: log_history has %zu evaluations and %zu train summaries", label, evals,
          summaries);
    if (!skip) {
        /* the values are bytes of a sane size: the model and data are tiny, RSS is not */
        int64_t before = get_int(out.metrics, "before_init_mem_cpu");
        CHECK(before > MiB && before < ((int64_t)1 << 40), "before_init_mem_cpu = %lld", (long long)before);
        const char *peaks[] = {"init_mem_cpu_peaked_delta", "train_mem_cpu_peaked_delta", NULL};
        for (int i = 0; peaks[i]; i++)
            CHECK(get_int(out.metrics, peaks[i]) >= 0 && get_int(out.metrics, peaks[i]) < 512 * MiB, "%s = %lld",
                  peaks[i], (long long)get_int(out.metrics, peaks[i]));
        CHECK(llabs((long long)get_int(em, "eval_mem_cpu_alloc_delta")) < 512 * MiB, "eval_mem_cpu_alloc_delta %lld",
              (long long)get_int(em, "eval_mem_cpu_alloc_delta"));
    }
    /* HF's example scripts: train_results.json (with init's keys), eval_results.json,
     * test_results.json and all of them in all_results.json */
    CHECK_OK(ct_trainer_save_metrics(&t, "train", out.metrics));
    CHECK_OK(ct_trainer_save_metrics(&t, "eval", em));
    CHECK_OK(ct_trainer_save_metrics(&t, "test", p.metrics));
    json_t *tr = load_json(a.output_dir, "train_results.json"), *all = load_json(a.output_dir, "all_results.json");
    CHECK_KEYS(tr, want_train, "train_results.json");
    char want_all[1024];
    snprintf(want_all, sizeof want_all, "%s%s%s%s%s", want_train, skip ? "" : " ", want_eval, skip ? "" : " ",
             want_test);
    /* sorted: before_init < eval < init < test < train */
    if (!skip)
        snprintf(want_all, sizeof want_all, "%s",
                 "before_init_mem_cpu eval_mem_cpu_alloc_delta eval_mem_cpu_peaked_delta init_mem_cpu_alloc_delta "
                 "init_mem_cpu_peaked_delta test_mem_cpu_alloc_delta test_mem_cpu_peaked_delta "
                 "train_mem_cpu_alloc_delta train_mem_cpu_peaked_delta");
    CHECK_KEYS(all, want_all, "all_results.json");
    CHECK(json_equal(json_object_get(all, "train_mem_cpu_alloc_delta"),
                     json_object_get(out.metrics, "train_mem_cpu_alloc_delta")) || skip,
          "all_results.json's train_mem_cpu_alloc_delta differs from the train output's");
    json_decref(tr);
    json_decref(all);
    json_decref(em);
    ct_prediction_output_free(&p);
    ct_train_output_free(&out);
    ct_trainer_free(&t);
    ct_model_free(&model);
    ct_dataset_free(train);
    ct_dataset_free(eval);
    ct_dataset_free(test);
    ct_training_args_free(&a);
}

/* A trainer that only evaluates (HF: init's report joins the eval metrics then). */
static void test_trainer_evaluate_only(void) {
    ct_training_args a;
    ct_training_args_default(&a);
    snprintf(a.output_dir, sizeof a.output_dir, "%s/eval_only", tmp_root);
    a.skip_memory_metrics = false;
    a.disable_tqdm = true;
    ct_dataset *eval = make_data(30, 4, 2, ct_test_seed + 4);
    ct_model model;
    CHECK_OK(make_model(&model, 4, 2, a.per_device_eval_batch_size));
    ct_trainer_setup setup = {.model = &model, .n_eval = 1};
    setup.eval_datasets[0] = eval;
    ct_trainer t;
    CHECK_OK(ct_trainer_init(&t, NULL, &a, &setup));
    json_t *m1 = NULL, *m2 = NULL;
    CHECK_OK(ct_trainer_evaluate(&t, NULL, "eval", &m1));
    CHECK_OK(ct_trainer_evaluate(&t, NULL, "eval", &m2));
    CHECK_KEYS(m1, "before_init_mem_cpu eval_mem_cpu_alloc_delta eval_mem_cpu_peaked_delta init_mem_cpu_alloc_delta "
                   "init_mem_cpu_peaked_delta", "the first evaluate of an evaluation-only trainer");
    CHECK_KEYS(m2, "eval_mem_cpu_alloc_delta eval_mem_cpu_peaked_delta", "its second evaluate");
    json_decref(m1);
    json_decref(m2);
    ct_trainer_free(&t);
    ct_model_free(&model);
    ct_dataset_free(eval);
    ct_training_args_free(&a);
}

int main(void) {
    ct_test_begin("test_memory");
    ct_rng_init(&rng, ct_test_seed, 0, CT_RNG_USER);
    if (!(tmp_root = ct_fixture_tmp_root("ct_test_memory"))) return 1;
    test_rss();
    test_deltas(CT_MEM_PEAK_AUTO);
    test_deltas(CT_MEM_PEAK_SAMPLER);
    ct_memory_tracker *probe = tracker(CT_MEM_PEAK_AUTO);
    bool hwm = ct_memory_tracker_peak_method(probe) == CT_MEM_PEAK_HWM;
    ct_memory_tracker_free(probe);
    if (hwm) test_deltas(CT_MEM_PEAK_HWM);
    else printf("note: VmHWM cannot be reset on this kernel: the sampler is the method in use\n");
    test_stages();
    test_trainer(false);
    test_trainer(true);
    test_trainer_evaluate_only();
    ct_fixture_cleanup();
    return ct_test_finish();
}
