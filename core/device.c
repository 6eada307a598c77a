/* Device parsing and printing (see device.h). Availability and memory go through the backend tables:
 * core/ops/backend.c. */
#include "core/device.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

ct_status ct_device_resolve(const char *spec, int local_rank, ct_device *out) {
    bool any = spec && (strcmp(spec, "auto") == 0 || strcmp(spec, "cuda") == 0);
    if (!any) {
        CT_TRY(ct_device_parse(spec, out));
        return ct_device_check(*out);
    }
    int n = ct_device_count(CT_DEVICE_CUDA);
    if (n == 0 && strcmp(spec, "auto") == 0) {
        *out = CT_CPU;
        return CT_OK;
    }
    if (local_rank < 0) local_rank = 0;
    if (n > 0 && local_rank >= n)
        return ct_error(CT_ERR_DEVICE,
                        "device %s: local rank %d has no GPU of its own (%d visible%s): start at most %d process(es) "
                        "per node, or name a device",
                        spec, local_rank, n, getenv("CUDA_VISIBLE_DEVICES") ? ", CUDA_VISIBLE_DEVICES is set" : "", n);
    *out = (ct_device){CT_DEVICE_CUDA, local_rank};
    return ct_device_check(*out);
}
