/* ct_io_write and its fault-injection hook (see io_fault.h). */
#include "core/io_fault.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static pthread_once_t env_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_int armed; /* the fast path's only read */
static int64_t bytes_left, failures_left, failed;
static int fault_errno = ENOSPC;

static const struct {
    const char *name;
    int value;
} errnos[] = {{"ENOSPC", ENOSPC}, {"EIO", EIO}, {"EROFS", EROFS}, {"EFBIG", EFBIG}, {"EDQUOT", EDQUOT},
              {"EACCES", EACCES}, {"EPERM", EPERM}};

static void arm_locked(int64_t after_bytes, int64_t failures, int err) {
    bytes_left = after_bytes;
    failures_left = failures;
    fault_errno = err;
    failed = 0;
    atomic_store(&armed, after_bytes >= 0 && failures != 0);
}

static bool parse_errno(const char *text, int *out) {
    for (size_t i = 0; i < sizeof errnos / sizeof errnos[0]; i++)
        if (strcmp(text, errnos[i].name) == 0) {
            *out = errnos[i].value;
            return true;
        }
    char *end;
    long v = strtol(text, &end, 10);
    if (!*text || *end || v <= 0) return false;
    *out = (int)v;
    return true;
}

/* CT_IO_FAULT=AFTER_BYTES[:FAILURES[:ERRNO]] */
static void read_env(void) {
    const char *v = getenv("CT_IO_FAULT");
    if (!v || !*v) return;
    char buf[128];
    snprintf(buf, sizeof buf, "%s", v);
    char *fields[3] = {buf, NULL, NULL};
    for (int i = 1; i < 3; i++) {
        char *colon = fields[i - 1] ? strchr(fields[i - 1], ':') : NULL;
        if (!colon) break;
        *colon = '\0';
        fields[i] = colon + 1;
    }
    char *end;
    long long after = strtoll(fields[0], &end, 10), failures = -1;
    bool ok = *fields[0] && !*end && after >= 0;
    if (ok && fields[1]) {
        failures = strtoll(fields[1], &end, 10);
        ok = *fields[1] && !*end;
    }
    int err = ENOSPC;
    if (ok && fields[2]) ok = parse_errno(fields[2], &err);
    if (!ok) {
        fprintf(stderr, "warning: CT_IO_FAULT='%s' is not AFTER_BYTES[:FAILURES[:ERRNO]]; ignored\n", v);
        return;
    }
    pthread_mutex_lock(&mu);
    arm_locked(after, failures, err);
    pthread_mutex_unlock(&mu);
}

void ct_io_fault_arm(int64_t after_bytes, int64_t failures, int err) {
    pthread_once(&env_once, read_env); /* so that the environment cannot override this later */
    pthread_mutex_lock(&mu);
    arm_locked(after_bytes, failures, err);
    pthread_mutex_unlock(&mu);
}

void ct_io_fault_disarm(void) { ct_io_fault_arm(-1, 0, ENOSPC); }

int64_t ct_io_fault_count(void) {
    pthread_mutex_lock(&mu);
    int64_t n = failed;
    pthread_mutex_unlock(&mu);
    return n;
}

ssize_t ct_io_write(int fd, const void *buf, size_t n) {
    pthread_once(&env_once, read_env);
    if (!atomic_load_explicit(&armed, memory_order_relaxed) || n == 0) return write(fd, buf, n);
    pthread_mutex_lock(&mu);
    size_t allow = n;
    int err = 0;
    if (bytes_left > 0) {
        /* up to the boundary: a short write, as a disk that just filled up gives */
        if ((int64_t)allow > bytes_left) allow = (size_t)bytes_left;
        bytes_left -= (int64_t)allow;
    } else if (failures_left != 0) {
        if (failures_left > 0) failures_left--;
        failed++;
        err = fault_errno;
    } else {
        atomic_store(&armed, 0); /* every planned failure happened: the space is back */
    }
    pthread_mutex_unlock(&mu);
    if (err) {
        errno = err;
        return -1;
    }
    return write(fd, buf, allow);
}

int ct_io_write_all(int fd, const void *buf, size_t n) {
    const char *p = buf;
    while (n > 0) {
        ssize_t w = ct_io_write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return errno;
        if (w == 0) return EIO; /* no progress on a regular file: do not spin */
        p += w;
        n -= (size_t)w;
    }
    return 0;
}
