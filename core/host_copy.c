/* Host copies without a host wait: see host_copy.h. One event per set: a device's copies run in the
 * order they were enqueued, so the record after the last one covers them all. */
#include "core/host_copy.h"

#include <string.h>

ct_status ct_host_copies_init(ct_host_copies *c, ct_device d) {
    *c = (ct_host_copies){.device = d};
    return ct_device_event_create(d, &c->ready);
}

ct_status ct_host_copies_take(ct_host_copies *c, ct_tensor *dst, const ct_tensor *src, ct_tensor *spare) {
    *dst = ct_tensor_view(NULL, src->dtype, CT_CPU, src->ndim, src->shape);
    if (!src->data || ct_tensor_numel(src) == 0) return CT_OK;
    bool on_host = src->device.kind == CT_DEVICE_CPU;
    if (!on_host && !ct_device_eq(src->device, c->device)) {
        char a[32], b[32];
        return ct_error(CT_ERR_DEVICE, "a host copy of a tensor on %s in a set of %s's copies",
                        ct_device_str(src->device, a, sizeof a), ct_device_str(c->device, b, sizeof b));
    }
    size_t bytes = ct_tensor_nbytes(src);
    void *mem = NULL;
    if (spare && spare->data && ct_tensor_nbytes(spare) == bytes) {
        mem = spare->data; /* the previous copy's pinned memory: no allocation, no page faults */
        spare->data = NULL;
    } else {
        CT_TRY(ct_device_pinned_alloc(c->device, bytes, &mem));
    }
    *dst = ct_tensor_view(mem, src->dtype, CT_CPU, src->ndim, src->shape);
    ct_status s = CT_OK;
    if (on_host)
        memcpy(mem, src->data, bytes);
    else
        s = ct_device_download(c->device, mem, src->data, bytes, &c->ready);
    if (s != CT_OK) ct_host_copies_release(c, dst);
    return s;
}

ct_status ct_host_copies_wait(const ct_host_copies *c) { return ct_device_event_wait(&c->ready); }

void ct_host_copies_release(const ct_host_copies *c, ct_tensor *t) {
    if (!t || !t->data) return;
    ct_device_pinned_free(c->device, t->data);
    t->data = NULL;
}

void ct_host_copies_destroy(ct_host_copies *c) { ct_device_event_destroy(&c->ready); }
