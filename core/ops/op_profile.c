/* The op profile (core/ops/op_profile.h): a small table keyed by (op name, backend), behind a mutex,
 * since ops run on several threads (asynchronous evaluation, data loading's device copies). Names are
 * the dispatch's string literals, so a key compares by pointer. */
#include "core/ops/op_profile.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

bool ct_op_profile_on;

enum { MAX_ENTRIES = 256 };

typedef struct entry {
    const char *name;
    const char *backend;
    long long calls;
    double seconds;
} entry;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static entry table[MAX_ENTRIES];
static int n_entries;
static long long dropped; /* calls of ops beyond the table's room (not expected: about 100 ops exist) */

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void report_at_exit(void) { ct_op_profile_report(stderr); }

void ct_op_profile_enable(bool on) {
    static bool arranged;
    pthread_mutex_lock(&lock);
    if (on && !arranged) arranged = atexit(report_at_exit) == 0;
    ct_op_profile_on = on;
    pthread_mutex_unlock(&lock);
}

__attribute__((constructor)) static void from_environment(void) {
    const char *v = getenv("CTRAINER_OP_PROFILE");
    if (v && *v && strcmp(v, "0") != 0) ct_op_profile_enable(true);
}

double ct_op_profile_begin(const ct_backend_ops *b) {
    if (b->synchronize) b->synchronize();
    return now();
}

void ct_op_profile_end(const ct_backend_ops *b, const char *name, double started) {
    if (b->synchronize) b->synchronize();
    double seconds = now() - started;
    pthread_mutex_lock(&lock);
    int i = 0;
    while (i < n_entries && !(table[i].name == name && table[i].backend == b->name)) i++;
    if (i == n_entries && n_entries < MAX_ENTRIES) table[n_entries++] = (entry){.name = name, .backend = b->name};
    if (i < n_entries) {
        table[i].calls++;
        table[i].seconds += seconds;
    } else {
        dropped++;
    }
    pthread_mutex_unlock(&lock);
}

long long ct_op_profile_calls(const char *name) {
    long long calls = 0;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < n_entries; i++)
        if (strcmp(table[i].name, name) == 0) calls += table[i].calls;
    pthread_mutex_unlock(&lock);
    return calls;
}

static int by_seconds(const void *a, const void *b) {
    double x = ((const entry *)a)->seconds, y = ((const entry *)b)->seconds;
    return x < y ? 1 : x > y ? -1 : 0;
}

void ct_op_profile_report(FILE *f) {
    pthread_mutex_lock(&lock);
    entry sorted[MAX_ENTRIES];
    int n = n_entries;
    memcpy(sorted, table, sizeof(entry) * (size_t)n);
    long long lost = dropped;
    pthread_mutex_unlock(&lock);
    qsort(sorted, (size_t)n, sizeof(entry), by_seconds);
    double total = 0;
    long long calls = 0;
    for (int i = 0; i < n; i++) {
        total += sorted[i].seconds;
        calls += sorted[i].calls;
    }
    fprintf(f, "op profile (CTRAINER_OP_PROFILE): %.3f s in %lld op calls, each timed between its device's "
            "synchronisations\n", total, calls);
    fprintf(f, "  %-32s %-8s %10s %11s %11s %7s\n", "op", "backend", "calls", "total s", "mean us", "share");
    for (int i = 0; i < n; i++)
        fprintf(f, "  %-32s %-8s %10lld %11.4f %11.2f %6.1f%%\n", sorted[i].name, sorted[i].backend, sorted[i].calls,
                sorted[i].seconds, 1e6 * sorted[i].seconds / (double)sorted[i].calls,
                total > 0 ? 100.0 * sorted[i].seconds / total : 0.0);
    if (lost) fprintf(f, "  (%lld calls of ops beyond the table's %d entries not counted)\n", lost, MAX_ENTRIES);
}

void ct_op_profile_reset(void) {
    pthread_mutex_lock(&lock);
    n_entries = 0;
    dropped = 0;
    pthread_mutex_unlock(&lock);
}
