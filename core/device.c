/* Device parsing and availability (see device.h). */
#include "core/device.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/tensor.h"
#ifdef CT_HAVE_CUDA
#include "backends/cuda/cuda_rt.h"
#endif

ct_status ct_device_parse(const char *text, ct_device *out) {
    if (!text) return ct_error(CT_ERR_INVALID_ARG, "device: missing device name");
    if (strcmp(text, "cpu") == 0) {
        *out = CT_CPU;
        return CT_OK;
    }
    if (strcmp(text, "cuda") == 0) {
        *out = (ct_device){CT_DEVICE_CUDA, 0};
        return CT_OK;
    }
    if (strncmp(text, "cuda:", 5) == 0 && text[5] >= '0' && text[5] <= '9') {
        char *end = NULL;
        errno = 0;
        long idx = strtol(text + 5, &end, 10);
        if (errno == 0 && *end == '\0' && idx >= 0 && idx < 1024) {
            *out = (ct_device){CT_DEVICE_CUDA, (int)idx};
            return CT_OK;
        }
    }
    return ct_error(CT_ERR_INVALID_ARG, "device: '%s' is not a device (expected \"cpu\", \"cuda\" or \"cuda:N\")",
                    text);
}

const char *ct_device_str(ct_device d, char *buf, size_t cap) {
    if (d.kind == CT_DEVICE_CPU)
        snprintf(buf, cap, "cpu");
    else
        snprintf(buf, cap, "cuda:%d", d.index);
    return buf;
}

#ifndef CT_HAVE_CUDA
int ct_cuda_device_count(void) { return 0; }
#endif

ct_status ct_device_check(ct_device d) {
    if (d.kind == CT_DEVICE_CPU) return CT_OK;
    char name[32];
    ct_device_str(d, name, sizeof name);
#ifdef CT_HAVE_CUDA
    int n = ct_cuda_device_count();
    if (d.index >= n)
        return ct_error(CT_ERR_DEVICE, "device %s: %d CUDA device(s) visible%s", name, n,
                        getenv("CUDA_VISIBLE_DEVICES") ? " (CUDA_VISIBLE_DEVICES is set)" : "");
    return CT_OK;
#else
    return ct_error(CT_ERR_DEVICE, "device %s: this build has no CUDA backend (configure with -DCTRAINER_CUDA=ON)",
                    name);
#endif
}

ct_status ct_device_alloc(ct_device d, size_t bytes, void **out) {
    *out = NULL;
    if (d.kind == CT_DEVICE_CPU) {
        *out = ct_host_alloc(bytes);
        return *out ? CT_OK : ct_error(CT_ERR_NOMEM, "cpu: cannot allocate %zu bytes", bytes);
    }
    CT_TRY(ct_device_check(d));
#ifdef CT_HAVE_CUDA
    return ct_cuda_malloc(d.index, bytes, out);
#else
    return CT_ERR_DEVICE;
#endif
}

void ct_device_free(ct_device d, void *p) {
    if (d.kind == CT_DEVICE_CPU) {
        ct_host_free(p);
        return;
    }
#ifdef CT_HAVE_CUDA
    ct_cuda_free(d.index, p);
#endif
}

ct_status ct_device_copy(void *dst, ct_device dd, const void *src, ct_device sd, size_t bytes) {
    if (dd.kind == CT_DEVICE_CPU && sd.kind == CT_DEVICE_CPU) {
        if (bytes) memmove(dst, src, bytes);
        return CT_OK;
    }
#ifdef CT_HAVE_CUDA
    return ct_cuda_memcpy(dst, dd, src, sd, bytes);
#else
    return ct_error(CT_ERR_DEVICE, "copy: this build has no CUDA backend");
#endif
}
