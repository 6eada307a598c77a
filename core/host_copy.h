/* Host copies of tensors taken without the host waiting for the device: the weights and optimizer
 * state that an asynchronous checkpoint save or an asynchronous evaluation takes on the training
 * thread and reads on another. A set's copies live in pinned memory of one device (plain host memory
 * for the CPU), are filled by that device's work in order (after the step that wrote the tensors,
 * before any that writes them again), and are read only after ct_host_copies_wait. */
#ifndef CT_CORE_HOST_COPY_H
#define CT_CORE_HOST_COPY_H

#include "core/device.h"
#include "core/tensor.h"

typedef struct ct_host_copies {
    ct_device device;      /* whose pinned memory holds the copies */
    ct_device_event ready; /* recorded after the set's last copy (no handle: copies are done at once) */
} ct_host_copies;

/* An empty set for copies of tensors on d (or on the host). */
ct_status ct_host_copies_init(ct_host_copies *c, ct_device d);
/* *dst = a host copy of src (on the set's device or the host), filled without waiting; spare: a copy
 * in pinned memory of the same device, finished, whose memory is taken over when it fits (then its
 * data is NULL; NULL: none). An empty src gives *dst of its shape without memory. */
ct_status ct_host_copies_take(ct_host_copies *c, ct_tensor *dst, const ct_tensor *src, ct_tensor *spare);
/* Waits until every copy taken so far holds its values (any thread). */
ct_status ct_host_copies_wait(const ct_host_copies *c);
/* Releases one copy of the set; NULL data is fine. */
void ct_host_copies_release(const ct_host_copies *c, ct_tensor *t);
/* Releases the set's event (after its copies, which a copy in flight must not outlive: wait first). */
void ct_host_copies_destroy(ct_host_copies *c);

#endif
