/* The data loader (see loader.h): a ring of batch slots filled by background workers.
 *
 * Global batch g of the current epoch lives in slot g % n_slots. Workers claim the next batch index
 * under the loader's mutex, write its indices (the sampler is not thread-safe, so it is only ever
 * called under that mutex), then fetch the samples without the mutex and mark the slot ready. A
 * worker may claim batch g only once the slot's previous batch (g - n_slots) has been released by
 * the consumer, which happens when it asks for the batch after it: the batch it was handed stays
 * valid until its next call. So the consumer reads slots strictly in order and never waits on
 * anything but the batch it needs.
 *
 * Repositioning (set_position, start_epoch) stops new claims, waits for the fetches in flight to
 * finish (a fetch cannot be interrupted, and any slot may be needed by the new position at once),
 * then empties every slot, which discards what they and earlier fetches produced. Prefetching stops
 * at the end of an epoch: the next epoch begins with start_epoch. Errors of a fetch are kept in its
 * slot with their message (the worker's thread-local message would be lost otherwise) and reported
 * by ct_loader_next when the consumer reaches that batch; the position stays on the failed batch,
 * so every later call reports it again until the loader is repositioned.
 *
 * With num_workers 0 the same slot and error logic runs in the calling thread. Everything is
 * allocated at create: ct_loader_next never allocates. */
#include "data/loader.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/sampler.h"

#define ERR_CAP 2048 /* the size of the thread-local message buffer (core/status.c) */

typedef enum { SLOT_EMPTY, SLOT_FILLING, SLOT_READY } slot_state;

typedef struct slot {
    ct_tensor features, labels, mask; /* [B, ...] each, allocated once */
    int64_t *indices;                 /* [B] */
    int64_t rows, valid;
    int64_t g;                        /* the batch the slot holds or is being filled with */
    slot_state state;
    ct_status status;                 /* of the fetch, once READY */
    char *error;                      /* its message when status != CT_OK */
} slot;

struct ct_loader {
    ct_dataset *ds;
    ct_loader_config cfg;
    ct_train_sampler train;
    ct_eval_sampler eval;
    int64_t num_batches;

    slot *slots;
    int n_slots;
    ct_batch batch; /* what ct_loader_next hands out (views of a slot) */

    pthread_t *threads;
    int n_threads;  /* started (for the join) */
    bool sync_init; /* the mutex and condition variables exist */
    pthread_mutex_t mu;
    pthread_cond_t work_cv;  /* workers: a batch can be claimed, or stop */
    pthread_cond_t ready_cv; /* consumer: a slot became ready, or a fetch in flight ended */
    pthread_mutex_t fetch_mu; /* serialises get_batch on datasets that are not thread-safe */

    /* All below guarded by mu. */
    int64_t epoch;
    int64_t next;       /* the next batch the consumer takes: the position */
    int64_t claim;      /* the next batch a worker claims */
    int64_t released;   /* batches below it no longer occupy their slot */
    int in_flight;      /* fetches running without the mutex */
    bool active;        /* workers may claim (false before the first use and while repositioning) */
    bool stop;
};

/* Writes the indices and mask of batch g of the current epoch into the slot. Under mu (or in the
 * only thread, without workers). */
static void sample_batch(ct_loader *l, slot *sl, int64_t g) {
    uint8_t *mask = sl->mask.data;
    if (l->cfg.eval) {
        sl->rows = ct_eval_sampler_batch(&l->eval, g, sl->indices, mask);
        sl->valid = 0;
        for (int64_t i = 0; i < sl->rows; i++) sl->valid += mask[i];
    } else {
        sl->rows = ct_train_sampler_batch(&l->train, l->epoch, g, sl->indices);
        memset(mask, 1, (size_t)sl->rows);
        sl->valid = sl->rows;
    }
    sl->g = g;
}

/* Fetches the slot's samples; on failure keeps the calling thread's message in the slot. */
static ct_status fetch(ct_loader *l, slot *sl, int64_t epoch) {
    ct_fetch_ctx ctx = {.seed = l->cfg.seed, .epoch = (uint64_t)epoch};
    bool serial = !l->ds->thread_safe && l->cfg.num_workers > 1;
    if (serial) pthread_mutex_lock(&l->fetch_mu);
    ct_status s = ct_dataset_get_batch(l->ds, sl->indices, sl->rows, &ctx, &sl->features, &sl->labels);
    if (serial) pthread_mutex_unlock(&l->fetch_mu);
    if (s != CT_OK) snprintf(sl->error, ERR_CAP, "%s", ct_last_error());
    return s;
}

static bool can_claim(const ct_loader *l) {
    return l->active && l->claim < l->num_batches && l->claim < l->released + l->n_slots;
}

static void *worker_main(void *arg) {
    ct_loader *l = arg;
    pthread_mutex_lock(&l->mu);
    for (;;) {
        while (!l->stop && !can_claim(l)) pthread_cond_wait(&l->work_cv, &l->mu);
        if (l->stop) break;
        int64_t g = l->claim++, epoch = l->epoch;
        slot *sl = &l->slots[g % l->n_slots];
        sample_batch(l, sl, g);
        sl->state = SLOT_FILLING;
        l->in_flight++;
        pthread_mutex_unlock(&l->mu);

        ct_status s = fetch(l, sl, epoch);

        pthread_mutex_lock(&l->mu);
        l->in_flight--;
        /* Also when a repositioning waits for this fetch: it empties the slot next. */
        sl->status = s;
        sl->state = SLOT_READY;
        pthread_cond_broadcast(&l->ready_cv);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

static void free_slots(ct_loader *l) {
    for (int i = 0; l->slots && i < l->n_slots; i++) {
        slot *sl = &l->slots[i];
        ct_tensor_free(&sl->features);
        ct_tensor_free(&sl->labels);
        ct_tensor_free(&sl->mask);
        free(sl->indices);
        free(sl->error);
    }
    free(l->slots);
    l->slots = NULL;
}

void ct_loader_free(ct_loader *l) {
    if (!l) return;
    if (l->sync_init) {
        pthread_mutex_lock(&l->mu);
        l->stop = true;
        pthread_cond_broadcast(&l->work_cv);
        pthread_mutex_unlock(&l->mu);
        /* A worker in the middle of a fetch finishes it first (it cannot be interrupted). */
        for (int i = 0; i < l->n_threads; i++) pthread_join(l->threads[i], NULL);
        pthread_mutex_destroy(&l->mu);
        pthread_mutex_destroy(&l->fetch_mu);
        pthread_cond_destroy(&l->work_cv);
        pthread_cond_destroy(&l->ready_cv);
    }
    free(l->threads);
    free_slots(l);
    ct_train_sampler_free(&l->train);
    free(l);
}

static ct_status alloc_slots(ct_loader *l) {
    int64_t b = l->cfg.batch_size;
    l->slots = calloc((size_t)l->n_slots, sizeof *l->slots);
    if (!l->slots) return ct_error(CT_ERR_NOMEM, "data loader: out of memory for %d batch slots", l->n_slots);
    for (int i = 0; i < l->n_slots; i++) {
        slot *sl = &l->slots[i];
        CT_TRY(ct_dataset_alloc_batch(l->ds, b, &sl->features, &sl->labels));
        CT_TRY(ct_tensor_alloc(&sl->mask, CT_U8, CT_CPU, 1, &b));
        sl->indices = malloc((size_t)b * sizeof *sl->indices);
        sl->error = malloc(ERR_CAP);
        if (!sl->indices || !sl->error)
            return ct_error(CT_ERR_NOMEM, "data loader: out of memory for batch slots of %lld samples", (long long)b);
        sl->g = -1;
    }
    return CT_OK;
}

static ct_status create(ct_loader *l) {
    const ct_loader_config *c = &l->cfg;
    if (c->num_workers < 0 || c->num_workers > 256)
        return ct_error(CT_ERR_INVALID_ARG, "data loader: num_workers must be in [0, 256], got %d", c->num_workers);
    if (c->prefetch < 0 || c->prefetch > 64)
        return ct_error(CT_ERR_INVALID_ARG, "data loader: prefetch must be in [0, 64], got %d", c->prefetch);
    int64_t n = ct_dataset_length(l->ds);
    if (c->eval) {
        CT_TRY(ct_eval_sampler_init(&l->eval, n, c->batch_size, c->rank, c->world_size));
        l->num_batches = ct_eval_sampler_num_batches(&l->eval);
    } else {
        CT_TRY(ct_train_sampler_init(&l->train, n, c->batch_size, c->rank, c->world_size, c->seed, c->shuffle,
                                     c->drop_last));
        l->num_batches = ct_train_sampler_num_batches(&l->train);
    }
    /* Workers keep `prefetch` batches each in flight or ready; the consumer holds one more. At least
     * two slots, so that one worker can fill a slot while the consumer works on the other. */
    int prefetch = c->prefetch > 0 ? c->prefetch : 2;
    l->n_slots = c->num_workers == 0 ? 1 : c->num_workers * prefetch + 1;
    CT_TRY(alloc_slots(l));
    if (c->num_workers == 0) return CT_OK;

    pthread_mutex_init(&l->mu, NULL);
    pthread_mutex_init(&l->fetch_mu, NULL);
    pthread_cond_init(&l->work_cv, NULL);
    pthread_cond_init(&l->ready_cv, NULL);
    l->sync_init = true;
    l->threads = calloc((size_t)c->num_workers, sizeof *l->threads);
    if (!l->threads) return ct_error(CT_ERR_NOMEM, "data loader: out of memory for %d workers", c->num_workers);
    for (int i = 0; i < c->num_workers; i++) {
        int e = pthread_create(&l->threads[i], NULL, worker_main, l);
        if (e != 0)
            return ct_error(CT_ERR_NOMEM, "data loader: cannot start worker %d of %d: %s", i + 1, c->num_workers,
                            strerror(e));
        l->n_threads++;
    }
    return CT_OK;
}

ct_status ct_loader_create(ct_dataset *ds, const ct_loader_config *cfg, ct_loader **out) {
    CT_ASSERT(cfg && out);
    *out = NULL;
    CT_TRY(ct_dataset_check(ds));
    ct_loader *l = calloc(1, sizeof *l);
    if (!l) return ct_error(CT_ERR_NOMEM, "data loader: out of memory");
    l->ds = ds;
    l->cfg = *cfg;
    l->train.order_epoch = -1;
    ct_status s = create(l);
    if (s != CT_OK) {
        ct_error_prefix(s, "%s: ", ds->source);
        ct_loader_free(l);
        return s;
    }
    *out = l;
    return CT_OK;
}

int64_t ct_loader_num_batches(const ct_loader *l) { return l->num_batches; }

ct_loader_position ct_loader_get_position(const ct_loader *l) {
    /* Written only by the consumer's own calls, so it needs no lock here. */
    return (ct_loader_position){.epoch = l->epoch, .batch = l->next};
}

ct_status ct_loader_set_position(ct_loader *l, ct_loader_position pos) {
    if (pos.epoch < 0 || pos.epoch >= ((int64_t)1 << 24) || pos.batch < 0 || pos.batch > l->num_batches)
        return ct_error(CT_ERR_INVALID_ARG,
                        "data loader: position (epoch %lld, batch %lld) is outside epochs [0, 2^24) and batches "
                        "[0, %lld]",
                        (long long)pos.epoch, (long long)pos.batch, (long long)l->num_batches);
    if (l->n_threads == 0) {
        l->epoch = pos.epoch;
        l->next = pos.batch;
        l->slots[0].state = SLOT_EMPTY;
        return CT_OK;
    }
    pthread_mutex_lock(&l->mu);
    l->active = false; /* no new claims until the slots are reset */
    while (l->in_flight > 0) pthread_cond_wait(&l->ready_cv, &l->mu);
    for (int i = 0; i < l->n_slots; i++) l->slots[i].state = SLOT_EMPTY;
    l->epoch = pos.epoch;
    l->next = l->claim = l->released = pos.batch;
    l->active = true; /* start fetching the new position's batches right away */
    pthread_cond_broadcast(&l->work_cv);
    pthread_mutex_unlock(&l->mu);
    return CT_OK;
}

ct_status ct_loader_start_epoch(ct_loader *l, int64_t epoch) {
    return ct_loader_set_position(l, (ct_loader_position){.epoch = epoch, .batch = 0});
}

/* Hands out the ready slot of batch l->next, or its stored error. */
static ct_status hand_out(ct_loader *l, slot *sl, ct_batch **out) {
    if (sl->status != CT_OK)
        return ct_error(sl->status, "data loader (epoch %lld, batch %lld): %s", (long long)l->epoch,
                        (long long)sl->g, sl->error);
    ct_batch *b = &l->batch;
    b->features = ct_tensor_rows(&sl->features, 0, sl->rows);
    b->labels = ct_tensor_rows(&sl->labels, 0, sl->rows);
    b->mask = ct_tensor_rows(&sl->mask, 0, sl->rows);
    b->indices = sl->indices;
    b->rows = sl->rows;
    b->valid = sl->valid;
    b->epoch = l->epoch;
    b->index = sl->g;
    l->next++;
    *out = b;
    return CT_OK;
}

ct_status ct_loader_next(ct_loader *l, ct_batch **out) {
    *out = NULL;
    if (l->n_threads == 0) {
        if (l->next >= l->num_batches) return CT_OK;
        slot *sl = &l->slots[0];
        if (!(sl->state == SLOT_READY && sl->g == l->next)) { /* not a failed batch asked for again */
            sample_batch(l, sl, l->next);
            sl->status = fetch(l, sl, l->epoch);
            sl->state = SLOT_READY;
        }
        return hand_out(l, sl, out);
    }
    pthread_mutex_lock(&l->mu);
    /* The batch handed out last is done with: its slot may be refilled. */
    if (l->released < l->next) {
        l->released = l->next;
        pthread_cond_broadcast(&l->work_cv);
    }
    if (!l->active) { /* the first use without a set_position */
        l->active = true;
        pthread_cond_broadcast(&l->work_cv);
    }
    ct_status s = CT_OK;
    if (l->next < l->num_batches) {
        slot *sl = &l->slots[l->next % l->n_slots];
        while (!(sl->state == SLOT_READY && sl->g == l->next)) pthread_cond_wait(&l->ready_cv, &l->mu);
        s = hand_out(l, sl, out);
    }
    pthread_mutex_unlock(&l->mu);
    return s;
}
