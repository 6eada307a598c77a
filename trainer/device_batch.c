/* Batches and outputs between the host and the model's device: Hugging Face's _prepare_inputs, with
 * the pinned memory and the copy stream of PyTorch's DataLoader(pin_memory) + to(non_blocking).
 *
 * Loaders make batches in host memory. Before the hooks see a batch (compute_loss, training_step,
 * prediction_step), its features and labels are copied to the model's device so that the host never
 * waits for the copy: the host copies them into pinned memory, and an upload on the thread's copy
 * stream (core/device.h) moves them while the work enqueued before still runs; the ops of the batch
 * wait for it on the device. Two slots are used in turn, so the copy of batch k overlaps the work on
 * batch k - 1: slot k % 2's device memory is refilled only after the work on batch k - 2 (its
 * "released" event, recorded when batch k - 1 arrived), and its pinned memory only after the upload of
 * batch k - 2 has read it (its "copied" event); fresh device memory, zeroed on the thread's stream,
 * only after that zeroing. Both sides are kept for the largest batch, so a step allocates nothing.
 * The mask and the sample indices stay on the host, where the loop that reads them runs. Outputs come
 * back to the host only where host code reads them (metrics, kept predictions). On the CPU both are
 * the identity: no copy. The range of integer features (token ids), found on the host during the copy,
 * is recorded with the model (ct_model_set_known_ids), so that its embeddings need not read the ids
 * back from the device to check them: a GPT step then has no wait for the device. */
#include <stdint.h>
#include <string.h>

#include "trainer/trainer_impl.h"

/* Where the labels start in a slot: a whole number of cache lines after the features. */
#define LABELS_ALIGN 256

static bool on_host(const ct_trainer *t) { return t->model->params.device.kind == CT_DEVICE_CPU; }

/* Lets go of a slot's memory and events, after its last upload has read the pinned side. */
static void slot_free(ct_batch_slot *s) {
    if (s->used) (void)ct_device_event_wait(&s->copied);
    ct_device_pinned_free(s->device, s->pinned);
    ct_tensor_free(&s->on_device);
    ct_device_event_destroy(&s->copied);
    ct_device_event_destroy(&s->released);
    *s = (ct_batch_slot){0};
}

/* Makes slot s hold `need` bytes on dev (the caller has waited for its last upload). */
static ct_status slot_reserve(ct_batch_slot *s, ct_device dev, size_t need) {
    if (s->cap >= need && ct_device_eq(s->device, dev)) return CT_OK;
    slot_free(s); /* the device side is released once the work still reading it has run */
    s->device = dev;
    int64_t n = (int64_t)need;
    ct_status st = ct_device_pinned_alloc(dev, need, &s->pinned);
    if (st == CT_OK) st = ct_tensor_alloc(&s->on_device, CT_U8, dev, 1, &n);
    if (st == CT_OK) st = ct_device_event_create(dev, &s->copied);
    if (st == CT_OK) st = ct_device_event_create(dev, &s->released);
    if (st != CT_OK) {
        slot_free(s);
        return st;
    }
    s->cap = need;
    return CT_OK;
}

/* The least and largest of an I64 or I32 tensor's values (numel > 0). */
static void int_range(const ct_tensor *t, int64_t *lo, int64_t *hi) {
    int64_t n = ct_tensor_numel(t), a = INT64_MAX, b = INT64_MIN;
    if (t->dtype == CT_I64) {
        const int64_t *v = t->data;
        for (int64_t i = 0; i < n; i++) {
            a = v[i] < a ? v[i] : a;
            b = v[i] > b ? v[i] : b;
        }
    } else {
        const int32_t *v = t->data;
        for (int64_t i = 0; i < n; i++) {
            a = v[i] < a ? v[i] : a;
            b = v[i] > b ? v[i] : b;
        }
    }
    *lo = a;
    *hi = b;
}

ct_status ct_trainer_prepare_inputs(ct_trainer *t, const ct_batch *host, const ct_batch **out) {
    if (on_host(t) || !host->features.data) {
        *out = host;
        return CT_OK;
    }
    struct ct_trainer_private *p = t->priv;
    ct_device dev = t->model->params.device;
    /* every op on the previous batch has been enqueued: its slot may be refilled after this point */
    ct_batch_slot *prev = &p->batch_slots[p->batch_slot];
    if (prev->used) CT_TRY(ct_device_event_record(&prev->released));
    p->batch_slot ^= 1;
    ct_batch_slot *s = &p->batch_slots[p->batch_slot];
    const ct_tensor *f = &host->features, *l = &host->labels;
    bool labels = l->data && l->ndim > 0;
    size_t f_bytes = ct_tensor_nbytes(f), l_at = (f_bytes + LABELS_ALIGN - 1) / LABELS_ALIGN * LABELS_ALIGN;
    size_t need = labels ? l_at + ct_tensor_nbytes(l) : f_bytes;
    /* the upload of two batches ago has read the pinned side before the host overwrites it */
    if (s->used) CT_TRY(ct_device_event_wait(&s->copied));
    CT_TRY(slot_reserve(s, dev, need ? need : 1));
    /* new device memory is zeroed on this thread's stream: the copy (on the copy stream) comes after */
    if (!s->used) CT_TRY(ct_device_event_record(&s->released));
    memcpy(s->pinned, f->data, f_bytes);
    if (labels) memcpy((char *)s->pinned + l_at, l->data, ct_tensor_nbytes(l));
    CT_TRY(ct_device_upload(dev, s->on_device.data, s->pinned, need, &s->released, &s->copied));
    s->used = true;
    p->device_batch = *host;
    p->device_batch.features = ct_tensor_view(s->on_device.data, f->dtype, dev, f->ndim, f->shape);
    if (labels)
        p->device_batch.labels = ct_tensor_view((char *)s->on_device.data + l_at, l->dtype, dev, l->ndim, l->shape);
    /* token ids: their range, known here, spares an embedding the read-back of its check on the device */
    int64_t lo, hi;
    bool ids = (f->dtype == CT_I64 || f->dtype == CT_I32) && ct_tensor_numel(f) > 0;
    if (ids) int_range(f, &lo, &hi);
    ct_model_set_known_ids(t->model, ids ? &p->device_batch.features : NULL, ids ? lo : 0, ids ? hi : 0);
    *out = &p->device_batch;
    return CT_OK;
}

ct_status ct_trainer_outputs_to_host(ct_trainer *t, const ct_tensor *outputs, ct_tensor *host) {
    if (outputs->device.kind == CT_DEVICE_CPU) {
        *host = *outputs;
        return CT_OK;
    }
    struct ct_trainer_private *p = t->priv;
    size_t need = ct_tensor_nbytes(outputs);
    if (!p->host_outputs.data || ct_tensor_nbytes(&p->host_outputs) < need) {
        ct_tensor_free(&p->host_outputs);
        int64_t n = (int64_t)need;
        CT_TRY(ct_tensor_alloc(&p->host_outputs, CT_U8, CT_CPU, 1, &n));
    }
    *host = ct_tensor_view(p->host_outputs.data, outputs->dtype, CT_CPU, outputs->ndim, outputs->shape);
    return ct_tensor_copy_to(host, outputs);
}

void ct_trainer_free_device_batch(ct_trainer *t) {
    if (t->model) ct_model_set_known_ids(t->model, NULL, 0, 0); /* its memory goes */
    for (int i = 0; i < 2; i++) slot_free(&t->priv->batch_slots[i]);
    t->priv->batch_slot = 0;
    ct_tensor_free(&t->priv->host_outputs);
}
