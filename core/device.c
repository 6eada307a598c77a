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
