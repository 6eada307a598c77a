/* The process-wide logger (see log.h): a threshold, the rank prefix, one fwrite per line. */
#include "core/log.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

static atomic_int threshold = CT_LOG_LEVEL_WARNING;
static atomic_int log_rank = 0, log_world = 1;

void ct_log_set_level(int level) {
    if (level >= 0) atomic_store(&threshold, level);
}

int ct_log_get_level(void) { return atomic_load(&threshold); }

bool ct_log_enabled(int level) { return level >= atomic_load(&threshold); }

void ct_log_set_rank(int rank, int world) {
    atomic_store(&log_rank, rank);
    atomic_store(&log_world, world);
}

/* Python's level names, for levels in between too (a 25 reads as info's). */
static const char *level_prefix(int level) {
    if (level >= CT_LOG_LEVEL_CRITICAL) return "critical: ";
    if (level >= CT_LOG_LEVEL_ERROR) return "error: ";
    if (level >= CT_LOG_LEVEL_WARNING) return "warning: ";
    if (level >= CT_LOG_LEVEL_INFO) return "";
    return "debug: ";
}

void ct_logv(int level, const char *fmt, va_list ap) {
    if (!ct_log_enabled(level)) return;
    char line[CT_LOG_LINE_MAX];
    size_t cap = sizeof line - 1; /* room for the newline */
    int world = atomic_load(&log_world), w;
    if (world > 1)
        w = snprintf(line, cap, "[rank %d/%d] %s", atomic_load(&log_rank), world, level_prefix(level));
    else
        w = snprintf(line, cap, "%s", level_prefix(level));
    size_t n = w > 0 ? (size_t)w : 0;
    if (n > cap - 1) n = cap - 1;
    w = vsnprintf(line + n, cap - n, fmt, ap);
    if (w > 0 && (size_t)w >= cap - n) {
        n = cap - 1; /* cut: say so */
        memcpy(line + n - 3, "...", 3);
    } else if (w > 0) {
        n += (size_t)w;
    }
    /* A message's own trailing newline is not a second line. */
    while (n > 0 && line[n - 1] == '\n') n--;
    line[n++] = '\n';
    fwrite(line, 1, n, stderr);
    fflush(stderr);
}

void ct_log(int level, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    ct_logv(level, fmt, ap);
    va_end(ap);
}

#define CT_LOG_AT(name, level)                                                                     \
    void name(const char *fmt, ...) {                                                              \
        va_list ap;                                                                                \
        va_start(ap, fmt);                                                                         \
        ct_logv(level, fmt, ap);                                                                   \
        va_end(ap);                                                                                \
    }
CT_LOG_AT(ct_log_debug, CT_LOG_LEVEL_DEBUG)
CT_LOG_AT(ct_log_info, CT_LOG_LEVEL_INFO)
CT_LOG_AT(ct_log_warning, CT_LOG_LEVEL_WARNING)
CT_LOG_AT(ct_log_error, CT_LOG_LEVEL_ERROR)
CT_LOG_AT(ct_log_critical, CT_LOG_LEVEL_CRITICAL)

bool ct_log_should_log(int rank, int local_rank, bool log_on_each_node) {
    return log_on_each_node ? local_rank == 0 : rank == 0;
}

int ct_log_process_level(bool should_log, int log_level, int log_level_replica) {
    int level = should_log ? log_level : log_level_replica;
    return level < 0 ? ct_log_get_level() : level;
}
