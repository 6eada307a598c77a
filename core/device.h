/* Devices: where a tensor's memory lives and where an op runs.
 *
 * A device is a kind (CPU or CUDA) and an index. Its spelling is PyTorch's: "cpu", "cuda", "cuda:1".
 * Ops dispatch on the device of their tensors; a CUDA device is usable only in a build with CUDA and
 * on a machine that has the GPU, which ct_device_check says with a clear message. */
#ifndef CT_DEVICE_H
#define CT_DEVICE_H

#include <stdbool.h>
#include <stddef.h>

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ct_device_kind { CT_DEVICE_CPU = 0, CT_DEVICE_CUDA = 1 } ct_device_kind;

typedef struct ct_device {
    ct_device_kind kind;
    int index; /* 0 for the CPU */
} ct_device;

#define CT_CPU ((ct_device){CT_DEVICE_CPU, 0})

/* Parses "cpu", "cuda" (index 0) or "cuda:N". */
ct_status ct_device_parse(const char *text, ct_device *out);

/* Writes "cpu" or "cuda:N" into buf and returns buf. */
const char *ct_device_str(ct_device d, char *buf, size_t cap);

static inline bool ct_device_eq(ct_device a, ct_device b) {
    return a.kind == b.kind && (a.kind == CT_DEVICE_CPU || a.index == b.index);
}

/* Number of CUDA devices visible to this process (0 in builds without CUDA). */
int ct_cuda_device_count(void);

/* CT_OK when the device can run ops in this build on this machine. */
ct_status ct_device_check(ct_device d);

/* Zeroed memory on a device (64-byte aligned on the host), its release, and copies between any two
 * devices (a copy that ends on the host has finished when this returns). */
ct_status ct_device_alloc(ct_device d, size_t bytes, void **out);
void ct_device_free(ct_device d, void *p);
ct_status ct_device_copy(void *dst, ct_device dd, const void *src, ct_device sd, size_t bytes);

#ifdef __cplusplus
}
#endif

#endif
