/* The data loader, with 0, 1 and 3 workers, over a synthetic dataset defined here through the
 * dataset vtable (which also shows that applications can subclass ct_dataset): batches equal the
 * sampler's indices and the dataset's samples for those indices (fetched with the loader's seed and
 * epoch); ranks of a world step in lockstep, with empty batches where a rank has no samples;
 * evaluation batches carry masks; a position saved mid-epoch and set on a new loader (other worker
 * count too) yields byte-for-byte the batches of an uninterrupted run, across an epoch boundary;
 * repositioning while fetches are in flight; a fetch failing at batch 5 is reported at batch 5 with
 * its message, again on the next call, and the loader goes on after repositioning; freeing with busy
 * workers returns; datasets that are not thread-safe are never fetched concurrently; workers fetch
 * ahead of the consumer. Finally one shuffled epoch of Fashion-MNIST when it is installed. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/util.h"
#include "data/loader.h"
#include "data/sampler.h"
#include "testlib.h"

/* ---- a synthetic dataset: sample i has features [2, 3] = 8i + j + (epoch % 4) / 4 and label
 * 1000 i + seed % 997, so every value says which sample, epoch and seed it was fetched for. */

typedef struct synth {
    ct_dataset base;
    int64_t n;
    long delay_us;           /* sleep in every fetch, to keep workers busy */
    bool vary_delay;         /* sleep delay_us times 1..4, by the first sample: fetches overtake each other */
    int64_t fail_sample;     /* a fetch containing this sample in fail_epoch fails (-1: never) */
    int64_t fail_epoch;
    atomic_int active, max_active;
    atomic_long calls;
} synth;

static synth *synth_of(ct_dataset *ds) { return ct_container_of(ds, synth, base); }

static int64_t synth_length(ct_dataset *ds) { return synth_of(ds)->n; }

static float feature_value(int64_t i, int64_t j, uint64_t epoch) {
    return (float)(8 * i + j) + (float)(epoch % 4) * 0.25f;
}
static int64_t label_value(int64_t i, uint64_t seed) { return 1000 * i + (int64_t)(seed % 997); }

static void sleep_us(long us) {
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

static ct_status synth_get_batch(ct_dataset *ds, const int64_t *indices, int64_t n, const ct_fetch_ctx *ctx,
                                 ct_tensor *features, ct_tensor *labels) {
    synth *d = synth_of(ds);
    atomic_fetch_add(&d->calls, 1);
    int now = atomic_fetch_add(&d->active, 1) + 1, max = atomic_load(&d->max_active);
    while (now > max && !atomic_compare_exchange_weak(&d->max_active, &max, now)) {
    }
    if (d->delay_us) sleep_us(d->delay_us * (d->vary_delay && n > 0 ? 1 + indices[0] % 4 : 1));
    ct_status s = CT_OK;
    float *f = features->data;
    int64_t *l = labels->data;
    for (int64_t r = 0; r < n; r++) {
        if (indices[r] == d->fail_sample && (int64_t)ctx->epoch == d->fail_epoch) {
            s = ct_error(CT_ERR_IO, "synthetic failure reading sample %lld", (long long)indices[r]);
            break;
        }
        for (int64_t j = 0; j < 6; j++) f[r * 6 + j] = feature_value(indices[r], j, ctx->epoch);
        l[r] = label_value(indices[r], ctx->seed);
    }
    atomic_fetch_sub(&d->active, 1);
    return s;
}

static const ct_dataset_ops synth_ops = {
    .size = sizeof(ct_dataset_ops), .name = "synthetic", .length = synth_length, .get_batch = synth_get_batch};

static synth *synth_create(int64_t n, bool thread_safe) {
    synth *d = calloc(1, sizeof *d);
    ct_dataset_base_init(&d->base, &synth_ops);
    d->base.spec.feature_shape = (ct_shape){2, {2, 3}};
    d->base.spec.label_shape.ndim = 0;
    d->base.thread_safe = thread_safe;
    snprintf(d->base.source, sizeof d->base.source, "synthetic(%lld)", (long long)n);
    d->n = n;
    d->fail_sample = -1;
    return d;
}

/* A loader every later check needs: without it the test cannot go on. */
static ct_loader *must_create(ct_dataset *ds, const ct_loader_config *c) {
    ct_loader *l;
    ct_status s = ct_loader_create(ds, c, &l);
    if (s == CT_OK) return l;
    ct_test_fail(__FILE__, __LINE__, "ct_loader_create: %s", ct_last_error());
    exit(ct_test_finish());
}

/* ---- checking batches against the sampler ------------------------------------------------- */

static ct_rng rng;
static int64_t randint(int64_t lo, int64_t hi) { return lo + (int64_t)ct_rng_below(&rng, (uint64_t)(hi - lo + 1)); }

/* Checks batch b is global batch g of epoch e of this configuration; returns false on a mismatch. */
static bool batch_matches(const char *label, const ct_batch *b, const ct_loader_config *c, int64_t n, int64_t e,
                          int64_t g) {
    int64_t want_idx[64];
    uint8_t want_mask[64];
    int64_t rows;
    if (c->eval) {
        ct_eval_sampler s;
        ct_eval_sampler_init(&s, n, c->batch_size, c->rank, c->world_size);
        rows = ct_eval_sampler_batch(&s, g, want_idx, want_mask);
    } else {
        ct_train_sampler s;
        ct_train_sampler_init(&s, n, c->batch_size, c->rank, c->world_size, c->seed, c->shuffle, c->drop_last);
        rows = ct_train_sampler_batch(&s, e, g, want_idx);
        memset(want_mask, 1, sizeof want_mask);
        ct_train_sampler_free(&s);
    }
    int64_t valid = 0;
    for (int64_t i = 0; i < rows; i++) valid += want_mask[i];
    bool ok = b->epoch == e && b->index == g && b->rows == rows && b->valid == valid &&
              b->features.ndim == 3 && b->features.shape[0] == rows && b->features.shape[1] == 2 &&
              b->features.shape[2] == 3 && b->labels.ndim == 1 && b->labels.shape[0] == rows &&
              b->mask.dtype == CT_U8 && b->mask.shape[0] == rows;
    const float *f = b->features.data;
    const int64_t *l = b->labels.data;
    const uint8_t *m = b->mask.data;
    for (int64_t i = 0; ok && i < rows; i++) {
        ok = b->indices[i] == want_idx[i] && m[i] == want_mask[i] && l[i] == label_value(want_idx[i], c->seed);
        for (int64_t j = 0; ok && j < 6; j++) ok = f[i * 6 + j] == feature_value(want_idx[i], j, (uint64_t)e);
    }
    CHECK(ok, "%s: batch (epoch %lld, index %lld, %lld rows, %lld valid) is not global batch %lld of epoch %lld "
          "(%lld rows, %lld valid)", label, (long long)b->epoch, (long long)b->index, (long long)b->rows,
          (long long)b->valid, (long long)g, (long long)e, (long long)rows, (long long)valid);
    return ok;
}

/* Runs epochs [e0, e0 + epochs) and checks every batch; returns false after the first mismatch. */
static bool run_epochs(const char *label, ct_loader *l, const ct_loader_config *c, int64_t n, int64_t e0, int epochs) {
    int64_t nb = ct_loader_num_batches(l);
    for (int64_t e = e0; e < e0 + epochs; e++) {
        CHECK_OK(ct_loader_start_epoch(l, e));
        for (int64_t g = 0; g <= nb; g++) {
            ct_batch *b;
            ct_status s = ct_loader_next(l, &b);
            CHECK(s == CT_OK, "%s: next failed: %s", label, ct_last_error());
            if (s != CT_OK) return false;
            if (g == nb) {
                CHECK(b == NULL, "%s: a batch past the end of epoch %lld", label, (long long)e);
                /* And again: the end stays the end. */
                CHECK(ct_loader_next(l, &b) == CT_OK && b == NULL, "%s: end of epoch not sticky", label);
            } else {
                CHECK(b != NULL, "%s: epoch %lld ended after %lld of %lld batches", label, (long long)e, (long long)g,
                      (long long)nb);
                if (!b || !batch_matches(label, b, c, n, e, g)) return false;
            }
        }
    }
    return true;
}

static void basic(void) {
    int workers[] = {0, 1, 3};
    for (int wi = 0; wi < 3; wi++)
        for (int ts = 0; ts < 2; ts++)
            for (int w = 1; w <= 3; w += 2)
                for (int drop_last = 0; drop_last < 2; drop_last++) {
                    int64_t n = randint(20, 90), bs = randint(1, 9);
                    synth *d = synth_create(n, ts);
                    int64_t batches0 = -1;
                    uint64_t seed = ct_rng_u64(&rng); /* the same on every rank */
                    for (int r = 0; r < w; r++) {
                        ct_loader_config c = {.batch_size = bs, .shuffle = true, .drop_last = drop_last,
                                              .seed = seed, .rank = r, .world_size = w,
                                              .num_workers = workers[wi], .prefetch = (int)randint(0, 3)};
                        ct_loader *l;
                        l = must_create(&d->base, &c);
                        char label[160];
                        snprintf(label, sizeof label,
                                 "n %lld B %lld W %d rank %d workers %d thread-safe %d drop_last %d",
                                 (long long)n, (long long)bs, w, r, c.num_workers, ts, drop_last);
                        int64_t nb = ct_loader_num_batches(l), g_size = bs * w;
                        CHECK(nb == (drop_last ? n / g_size : (n + g_size - 1) / g_size), "%s: %lld batches", label,
                              (long long)nb);
                        if (r == 0) batches0 = nb;
                        CHECK(nb == batches0, "%s: %lld batches but rank 0 has %lld", label, (long long)nb,
                              (long long)batches0);
                        run_epochs(label, l, &c, n, randint(0, 5), 2);
                        ct_loader_free(l);
                    }
                    free(d);
                }

    /* Ranks in lockstep: a rank without samples in the last global batch still gets it, empty. */
    synth *d = synth_create(20, true);
    for (int wk = 0; wk < 2; wk++) {
        ct_loader_config c = {.batch_size = 4, .shuffle = true, .seed = 7, .rank = 2, .world_size = 3,
                              .num_workers = wk};
        ct_loader *l;
        l = must_create(&d->base, &c);
        CHECK(ct_loader_num_batches(l) == 2, "20 samples, 3 x 4: %lld batches", (long long)ct_loader_num_batches(l));
        ct_batch *b;
        CHECK_OK(ct_loader_next(l, &b));
        CHECK(b && b->rows == 4, "rank 2, batch 0: %lld rows", b ? (long long)b->rows : -1LL);
        CHECK_OK(ct_loader_next(l, &b));
        CHECK(b && b->rows == 0 && b->valid == 0 && b->index == 1 && b->features.shape[0] == 0,
              "rank 2, batch 1: %lld rows (expected an empty batch)", b ? (long long)b->rows : -1LL);
        CHECK_OK(ct_loader_next(l, &b));
        CHECK(b == NULL, "rank 2: a third batch");
        ct_loader_free(l);
    }
    free(d);
}

static void eval_mode(void) {
    int workers[] = {0, 1, 3};
    for (int wi = 0; wi < 3; wi++)
        for (int w = 1; w <= 4; w++) {
            int64_t n = randint(5, 40), bs = randint(1, 6);
            synth *d = synth_create(n, true);
            int *seen = calloc((size_t)n, sizeof *seen);
            for (int r = 0; r < w; r++) {
                ct_loader_config c = {.batch_size = bs, .eval = true, .shuffle = true, .seed = 3, .rank = r,
                                      .world_size = w, .num_workers = workers[wi]};
                ct_loader *l;
                l = must_create(&d->base, &c);
                char label[128];
                snprintf(label, sizeof label, "eval n %lld B %lld W %d rank %d workers %d", (long long)n, (long long)bs,
                         w, r, c.num_workers);
                CHECK(ct_loader_num_batches(l) == ((n + w - 1) / w + bs - 1) / bs, "%s: %lld batches", label,
                      (long long)ct_loader_num_batches(l));
                run_epochs(label, l, &c, n, 0, 1);
                /* Collect the real rows of epoch 1. */
                CHECK_OK(ct_loader_start_epoch(l, 1));
                ct_batch *b;
                while (ct_loader_next(l, &b) == CT_OK && b) {
                    const uint8_t *m = b->mask.data;
                    for (int64_t i = 0; i < b->rows; i++)
                        if (m[i]) seen[b->indices[i]]++;
                }
                ct_loader_free(l);
            }
            int64_t once = 0;
            for (int64_t i = 0; i < n; i++) once += seen[i] == 1;
            CHECK(once == n, "eval n %lld W %d workers %d: %lld of %lld samples seen once with mask 1", (long long)n, w,
                  workers[wi], (long long)once, (long long)n);
            free(seen);
            free(d);
        }
}

/* ---- resumption: byte-equal continuation ----------------------------------------------------- */

typedef struct record {
    int64_t epoch, index, rows;
    int64_t idx[16], labels[16];
    float features[16 * 6];
} record;

static void take(record *r, const ct_batch *b) {
    memset(r, 0, sizeof *r);
    r->epoch = b->epoch;
    r->index = b->index;
    r->rows = b->rows;
    memcpy(r->idx, b->indices, (size_t)b->rows * sizeof *r->idx);
    memcpy(r->labels, b->labels.data, (size_t)b->rows * sizeof *r->labels);
    memcpy(r->features, b->features.data, (size_t)b->rows * 6 * sizeof(float));
}

/* Produces batches from the loader's position on, moving to the next epoch at each end, until
 * `count` records are written or an error. */
static int64_t produce(ct_loader *l, record *out, int64_t count) {
    int64_t k = 0;
    while (k < count) {
        ct_batch *b;
        if (ct_loader_next(l, &b) != CT_OK) break;
        if (!b) {
            if (ct_loader_start_epoch(l, ct_loader_get_position(l).epoch + 1) != CT_OK) break;
            continue;
        }
        take(&out[k++], b);
    }
    return k;
}

static void resume(void) {
    int workers[] = {0, 1, 3};
    int64_t n = randint(30, 70), bs = randint(3, 8);
    synth *d = synth_create(n, randint(0, 1));
    ct_loader_config c = {.batch_size = bs, .shuffle = true, .drop_last = randint(0, 1), .seed = ct_rng_u64(&rng),
                          .rank = 1, .world_size = 2, .num_workers = 0};
    ct_loader *l;
    l = must_create(&d->base, &c);
    int64_t nb = ct_loader_num_batches(l), total = 2 * nb + 3;
    record *ref = malloc((size_t)total * sizeof *ref), *got = malloc((size_t)total * sizeof *got);
    int64_t e0 = randint(0, 3);
    CHECK_OK(ct_loader_start_epoch(l, e0));
    CHECK(produce(l, ref, total) == total, "uninterrupted run stopped early: %s", ct_last_error());
    ct_loader_free(l);

    /* Interruptions at the start, mid-epoch, just before and at the end of an epoch, and in the next. */
    int64_t stops[] = {0, 1, nb / 2, nb - 1, nb, nb + 1, nb + randint(2, nb)};
    for (size_t si = 0; si < sizeof stops / sizeof *stops; si++)
        for (int wa = 0; wa < 3; wa++) {
            int64_t k = stops[si];
            c.num_workers = workers[wa];
            l = must_create(&d->base, &c);
            CHECK_OK(ct_loader_start_epoch(l, e0));
            int64_t done = produce(l, got, k);
            /* produce() moves on to the next epoch only when asked for a batch past the end, so stopping
             * after the last batch of an epoch saves (e, nb) — its end — as a checkpoint would. */
            ct_loader_position pos = ct_loader_get_position(l);
            CHECK(done == k && memcmp(got, ref, (size_t)k * sizeof *got) == 0, "resume: first %lld batches differ",
                  (long long)k);
            ct_loader_free(l); /* with workers still prefetching */

            c.num_workers = workers[(wa + 1 + si) % 3]; /* resume with another worker count */
            l = must_create(&d->base, &c);
            CHECK_OK(ct_loader_set_position(l, pos));
            int64_t rest = produce(l, got + k, total - k);
            bool same = rest == total - k;
            for (int64_t i = k; same && i < total; i++) same = memcmp(&got[i], &ref[i], sizeof *got) == 0;
            CHECK(same, "resume at (epoch %lld, batch %lld) after %lld batches, workers %d -> %d: the continuation "
                  "differs from the uninterrupted run", (long long)pos.epoch, (long long)pos.batch, (long long)k,
                  workers[wa], c.num_workers);
            ct_loader_free(l);
        }
    free(ref);
    free(got);
    free(d);
}

/* set_position while fetches are in flight: slow fetches, several workers, random jumps. */
static void reposition_in_flight(void) {
    int workers[] = {1, 3};
    for (int wi = 0; wi < 2; wi++) {
        int64_t n = 60;
        synth *d = synth_create(n, wi == 1);
        d->delay_us = 1000;
        d->vary_delay = true;
        ct_loader_config c = {.batch_size = 4, .shuffle = true, .world_size = 1, .seed = ct_rng_u64(&rng),
                              .num_workers = workers[wi],
                              .prefetch = 2};
        ct_loader *l;
        l = must_create(&d->base, &c);
        int64_t nb = ct_loader_num_batches(l);
        /* Right after create, before anything was fetched. */
        CHECK_OK(ct_loader_set_position(l, (ct_loader_position){2, 5}));
        for (int jump = 0; jump < 24; jump++) {
            ct_loader_position pos = ct_loader_get_position(l);
            int steps = (int)randint(0, 3);
            for (int s = 0; s < steps && pos.batch < nb; s++, pos.batch++) {
                ct_batch *b;
                CHECK_OK(ct_loader_next(l, &b));
                if (!b || !batch_matches("reposition", b, &c, n, pos.epoch, pos.batch)) break;
            }
            /* Fetches of the old position are in flight now (workers claim ahead at once). */
            ct_loader_position to = {randint(0, 4), randint(0, nb)};
            CHECK_OK(ct_loader_set_position(l, to));
            /* Let any fetch of the old position that was still running land, then read. */
            if (jump % 2) sleep_us(6000);
            ct_loader_position at = ct_loader_get_position(l);
            CHECK(at.epoch == to.epoch && at.batch == to.batch, "position (%lld, %lld) after setting (%lld, %lld)",
                  (long long)at.epoch, (long long)at.batch, (long long)to.epoch, (long long)to.batch);
        }
        /* And to the end of the epoch: nothing more in it. */
        CHECK_OK(ct_loader_set_position(l, (ct_loader_position){1, nb}));
        ct_batch *b;
        CHECK(ct_loader_next(l, &b) == CT_OK && b == NULL, "a batch after setting the end of an epoch");
        CHECK(run_epochs("after jumps", l, &c, n, 1, 1), "after jumps");
        ct_loader_free(l);
        free(d);
    }
}

/* A fetch fails at batch 5: batches 0-4 come, batch 5 is the error (also when asked again), and
 * after repositioning past it the epoch completes. */
static void failure(void) {
    int workers[] = {0, 1, 3};
    for (int wi = 0; wi < 3; wi++) {
        int64_t n = 64;
        synth *d = synth_create(n, wi != 2);
        ct_loader_config c = {.batch_size = 5, .shuffle = true, .world_size = 1, .seed = ct_rng_u64(&rng),
                              .num_workers = workers[wi]};
        int64_t e = randint(0, 9), idx[5];
        ct_train_sampler s;
        CHECK_OK(ct_train_sampler_init(&s, n, 5, 0, 1, c.seed, true, false));
        ct_train_sampler_batch(&s, e, 5, idx);
        ct_train_sampler_free(&s);
        d->fail_sample = idx[2];
        d->fail_epoch = e;
        ct_loader *l;
        l = must_create(&d->base, &c);
        CHECK_OK(ct_loader_start_epoch(l, e));
        for (int64_t g = 0; g < 5; g++) {
            ct_batch *b;
            CHECK_OK(ct_loader_next(l, &b));
            CHECK(b && batch_matches("before the failure", b, &c, n, e, g), "workers %d: batch %lld", workers[wi],
                  (long long)g);
        }
        char want[64];
        snprintf(want, sizeof want, "synthetic failure reading sample %lld", (long long)idx[2]);
        for (int again = 0; again < 2; again++) {
            ct_batch *b = (ct_batch *)1;
            CHECK_ERR(ct_loader_next(l, &b), CT_ERR_IO, want, "synthetic(64)", "batch 5");
            CHECK(b == NULL, "workers %d: a batch returned with the error", workers[wi]);
            ct_loader_position p = ct_loader_get_position(l);
            CHECK(p.epoch == e && p.batch == 5, "workers %d: position (%lld, %lld) after the failure", workers[wi],
                  (long long)p.epoch, (long long)p.batch);
        }
        /* Skip the bad batch; the rest of the epoch is fine. */
        CHECK_OK(ct_loader_set_position(l, (ct_loader_position){e, 6}));
        int64_t nb = ct_loader_num_batches(l), got = 0;
        for (int64_t g = 6;; g++) {
            ct_batch *b;
            ct_status st = ct_loader_next(l, &b);
            CHECK(st == CT_OK, "workers %d: after skipping: %s", workers[wi], ct_last_error());
            if (st != CT_OK || !b) break;
            got += batch_matches("after the failure", b, &c, n, e, g);
        }
        CHECK(got == nb - 6, "workers %d: %lld batches after the failure, expected %lld", workers[wi], (long long)got,
              (long long)(nb - 6));
        ct_loader_free(l);
        free(d);
    }
}

/* Freeing while workers sleep in fetches, right after create, and mid-epoch. */
static void free_busy(void) {
    synth *d = synth_create(200, true);
    d->delay_us = 20000;
    ct_loader_config c = {.batch_size = 4, .shuffle = true, .world_size = 1, .seed = 1, .num_workers = 3};
    ct_loader *l;
    l = must_create(&d->base, &c);
    ct_loader_free(l); /* idle workers */
    l = must_create(&d->base, &c);
    CHECK_OK(ct_loader_start_epoch(l, 0));
    ct_loader_free(l); /* workers inside their first fetches */
    l = must_create(&d->base, &c);
    ct_batch *b;
    CHECK_OK(ct_loader_next(l, &b));
    ct_loader_free(l); /* mid-epoch, prefetching */
    CHECK(atomic_load(&d->active) == 0, "%d fetches still running after free", atomic_load(&d->active));
    free(d);
}

/* Not thread-safe: never two fetches at once; thread-safe: workers do overlap. Workers fetch ahead of a
 * consumer that is busy. */
static void concurrency(void) {
    for (int ts = 0; ts < 2; ts++) {
        synth *d = synth_create(120, ts);
        d->delay_us = 3000;
        ct_loader_config c = {.batch_size = 4, .shuffle = true, .world_size = 1, .seed = 5, .num_workers = 3};
        ct_loader *l;
        l = must_create(&d->base, &c);
        CHECK(run_epochs(ts ? "thread-safe" : "serialised", l, &c, 120, 0, 1), "concurrency run");
        int max = atomic_load(&d->max_active);
        if (ts)
            CHECK(max > 1, "a thread-safe dataset was never fetched concurrently by 3 workers (max %d)", max);
        else
            CHECK(max == 1, "a dataset that is not thread-safe had %d concurrent fetches", max);
        ct_loader_free(l);
        free(d);
    }
    synth *d = synth_create(100, true);
    ct_loader_config c = {.batch_size = 4, .shuffle = true, .world_size = 1, .seed = 5, .num_workers = 1,
                          .prefetch = 2};
    ct_loader *l;
    l = must_create(&d->base, &c);
    CHECK(atomic_load(&d->calls) == 0, "fetches before the loader was used");
    ct_batch *b;
    CHECK_OK(ct_loader_next(l, &b));
    sleep_us(100000); /* the consumer "computes" */
    /* One worker with prefetch 2 keeps two batches ready beyond the one handed out. */
    CHECK(atomic_load(&d->calls) == 3, "%ld fetches while the consumer held batch 0 (expected 3)",
          atomic_load(&d->calls));
    /* ... and left the batch it holds alone. */
    CHECK(b && batch_matches("held while workers fetch ahead", b, &c, 100, 0, 0), "held batch");
    ct_loader_free(l);
    free(d);
}

static void bad_config(void) {
    synth *d = synth_create(10, true);
    ct_loader *l = (ct_loader *)1;
    ct_loader_config c = {.batch_size = 0, .world_size = 1};
    CHECK_ERR(ct_loader_create(&d->base, &c, &l), CT_ERR_INVALID_ARG, "synthetic(10)", "batch size must be positive");
    CHECK(l == NULL, "a loader returned with an error");
    c = (ct_loader_config){.batch_size = 2, .world_size = 1, .num_workers = -1};
    CHECK_ERR(ct_loader_create(&d->base, &c, &l), CT_ERR_INVALID_ARG, "num_workers", "-1");
    c = (ct_loader_config){.batch_size = 2, .rank = 2, .world_size = 2};
    CHECK_ERR(ct_loader_create(&d->base, &c, &l), CT_ERR_INVALID_ARG, "rank 2");
    c = (ct_loader_config){.batch_size = 2, .world_size = 1, .num_workers = 2};
    l = must_create(&d->base, &c);
    CHECK_ERR(ct_loader_set_position(l, (ct_loader_position){0, 6}), CT_ERR_INVALID_ARG, "batch 6", "[0, 5]");
    CHECK_ERR(ct_loader_set_position(l, (ct_loader_position){-1, 0}), CT_ERR_INVALID_ARG, "epoch -1");
    ct_loader_free(l);
    free(d);
}

/* One shuffled epoch of Fashion-MNIST: every sample once, each batch equal to a direct fetch. */
static void fashion_mnist(void) {
    const char *dir = "/usr/share/datasets/fashion-mnist/";
    char img[256], lab[256];
    snprintf(img, sizeof img, "%strain-images-idx3-ubyte.gz", dir);
    snprintf(lab, sizeof lab, "%strain-labels-idx1-ubyte.gz", dir);
    ct_dataset *ds;
    if (ct_idx_dataset_create(img, lab, 0, 10, &ds) != CT_OK) {
        printf("Fashion-MNIST not available (%s); skipping the real-data check\n", ct_last_error());
        return;
    }
    ct_loader_config c = {.batch_size = 128, .shuffle = true, .seed = ct_test_seed, .world_size = 1, .num_workers = 2};
    ct_loader *l;
    l = must_create(ds, &c);
    CHECK(ct_loader_num_batches(l) == 469, "Fashion-MNIST: %lld batches of 128", (long long)ct_loader_num_batches(l));
    ct_tensor f, y;
    CHECK_OK(ct_dataset_alloc_batch(ds, 128, &f, &y));
    char *seen = calloc(60000, 1);
    int64_t batches = 0, samples = 0, mismatches = 0;
    ct_batch *b;
    CHECK_OK(ct_loader_start_epoch(l, 1));
    while (ct_loader_next(l, &b) == CT_OK && b) {
        ct_fetch_ctx ctx = {c.seed, 1};
        CHECK_OK(ct_dataset_get_batch(ds, b->indices, b->rows, &ctx, &f, &y));
        mismatches += memcmp(f.data, b->features.data, ct_tensor_nbytes(&b->features)) != 0 ||
                      memcmp(y.data, b->labels.data, ct_tensor_nbytes(&b->labels)) != 0;
        for (int64_t i = 0; i < b->rows; i++) seen[b->indices[i]]++;
        samples += b->rows;
        batches++;
    }
    int64_t once = 0;
    for (int64_t i = 0; i < 60000; i++) once += seen[i] == 1;
    CHECK(batches == 469 && samples == 60000 && once == 60000 && mismatches == 0,
          "Fashion-MNIST epoch: %lld batches, %lld samples, %lld seen once, %lld batches differ from direct fetches",
          (long long)batches, (long long)samples, (long long)once, (long long)mismatches);
    free(seen);
    ct_tensor_free(&f);
    ct_tensor_free(&y);
    ct_loader_free(l);
    ct_dataset_free(ds);
}

int main(void) {
    ct_test_begin("test_loader");
    ct_rng_init(&rng, ct_test_seed, 0, CT_RNG_USER);
    basic();
    eval_mode();
    resume();
    reposition_in_flight();
    failure();
    free_busy();
    concurrency();
    bad_config();
    fashion_mnist();
    return ct_test_finish();
}
