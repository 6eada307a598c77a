/* Status names and the thread-local error message (see status.h). */
#include "core/status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CT_ERROR_CAP 2048

static _Thread_local char last_error[CT_ERROR_CAP];

const char *ct_status_str(ct_status s) {
    switch (s) {
    case CT_OK: return "ok";
    case CT_ERR_INVALID_ARG: return "invalid argument";
    case CT_ERR_SHAPE: return "shape mismatch";
    case CT_ERR_DTYPE: return "wrong dtype";
    case CT_ERR_DEVICE: return "wrong device";
    case CT_ERR_NOMEM: return "out of memory";
    case CT_ERR_IO: return "i/o error";
    case CT_ERR_CONFIG: return "configuration error";
    case CT_ERR_FORMAT: return "bad file format";
    case CT_ERR_UNSUPPORTED: return "unsupported";
    case CT_ERR_NUMERIC: return "non-finite value";
    case CT_ERR_STATE: return "wrong call order";
    case CT_ERR_INTERRUPTED: return "interrupted";
    }
    return "unknown status";
}

const char *ct_last_error(void) { return last_error; }

void ct_error_clear(void) { last_error[0] = '\0'; }

ct_status ct_verror(ct_status s, const char *fmt, va_list ap) {
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    return s;
}

ct_status ct_error(ct_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    ct_verror(s, fmt, ap);
    va_end(ap);
    return s;
}

ct_status ct_error_prefix(ct_status s, const char *fmt, ...) {
    char prefix[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    if (n < 0) return s;
    if ((size_t)n >= sizeof prefix) n = (int)sizeof prefix - 1;
    size_t old = strlen(last_error);
    if ((size_t)n + old >= CT_ERROR_CAP) old = CT_ERROR_CAP - 1 - (size_t)n;
    memmove(last_error + n, last_error, old);
    memcpy(last_error, prefix, (size_t)n);
    last_error[n + old] = '\0';
    return s;
}

void ct_abort_at(const char *file, int line, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "ctrainer: fatal at %s:%d: ", file, line);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    abort();
}
