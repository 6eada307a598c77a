/* What a thread's sleep costs the work after it: one thread runs the GPT example's MLP up-projection
 * forward (ct_op_linear_forward, 2048 rows x 128 -> 512, the half of a batch one of two threads
 * takes) again and again, and before each call either nothing, a 50 us sleep (usleep: the thread
 * blocks, as an OpenMP thread does at every region's end under OMP_WAIT_POLICY=PASSIVE), a 50 us
 * spin (the thread keeps its core, as under the default policy's spin), or a read of 64 MiB (the
 * caches hold none of the operands). Prints the mean milliseconds of the call in each case, and
 * the slowdown of the sleep and of the eviction against the back-to-back calls.
 *
 * Why: a thread back from a sleep can find the AVX registers' upper halves marked in use, and the
 * x86-64-v2 copy's legacy SSE instructions then each merge into them (a false dependency), which
 * made a call 27% slower on a Zen 5 VM until the v2 kernels cleared them (ct_cpu_sse_work_start,
 * backends/cpu/cpu_impl.h). The spin and eviction cases tell that cost apart from the wake-up
 * latency and from cold caches; run with CT_CPU_ISA=v1|v2|v3|v4 to compare the levels.
 * Usage: bench_wake [CALLS]. Prints one JSON line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/ops/ops.h"

enum { ROWS = 2048, IN = 128, OUT = 512, PAUSE_US = 50, EVICT_BYTES = 64 << 20 };

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef enum { BACK_TO_BACK, AFTER_SLEEP, AFTER_SPIN, AFTER_EVICTION, CASES } pause_kind;
static const char *const case_names[CASES] = {"back_to_back_ms", "after_sleep_ms", "after_spin_ms",
                                              "after_eviction_ms"};

static volatile unsigned char evict_sink;

static void pause_before(pause_kind kind, const unsigned char *junk) {
    if (kind == AFTER_SLEEP) usleep(PAUSE_US);
    if (kind == AFTER_SPIN) {
        double t0 = now();
        while (now() - t0 < PAUSE_US * 1e-6) {
        }
    }
    if (kind == AFTER_EVICTION) {
        unsigned char x = 0;
        for (size_t i = 0; i < EVICT_BYTES; i += 64) x ^= junk[i];
        evict_sink = x;
    }
}

static ct_tensor matrix(int64_t rows, int64_t cols, double value) {
    ct_tensor t;
    int64_t shape[2] = {rows, cols};
    ct_tensor_alloc(&t, CT_F32, CT_CPU, 2, shape);
    ct_op_fill(&t, value);
    return t;
}

int main(int argc, char **argv) {
    const int calls = argc > 1 ? atoi(argv[1]) : 100;
    if (calls < 1) {
        fprintf(stderr, "bench_wake: CALLS must be at least 1\n");
        return 2;
    }
    ct_set_num_threads(1);
    ct_tensor x = matrix(ROWS, IN, 0.01), w = matrix(OUT, IN, 0.02), y = matrix(ROWS, OUT, 0);
    unsigned char *junk = malloc(EVICT_BYTES);
    if (!junk) return 1;
    memset(junk, 1, EVICT_BYTES);
    double ms[CASES] = {0};
    /* the cases interleaved, a round of each at a time, so that a change of the machine's load
     * falls on all of them alike */
    for (int round = 0; round < 4; round++)
        for (int kind = 0; kind < CASES; kind++) {
            ct_op_linear_forward(&x, &w, NULL, CT_ACT_NONE, NULL, &y); /* warm: the first call's faults aside */
            for (int c = 0; c < calls; c++) {
                pause_before((pause_kind)kind, junk);
                double t0 = now();
                ct_op_linear_forward(&x, &w, NULL, CT_ACT_NONE, NULL, &y);
                ms[kind] += (now() - t0) * 1e3 / (4.0 * calls);
            }
        }
    printf("{\"level\": \"%s\", \"calls\": %d", ct_cpu_isa(), calls);
    for (int kind = 0; kind < CASES; kind++) printf(", \"%s\": %.3f", case_names[kind], ms[kind]);
    printf(", \"sleep_slowdown\": %.2f, \"eviction_slowdown\": %.2f}\n", ms[AFTER_SLEEP] / ms[BACK_TO_BACK],
           ms[AFTER_EVICTION] / ms[BACK_TO_BACK]);
    free(junk);
    ct_tensor_free(&x);
    ct_tensor_free(&w);
    ct_tensor_free(&y);
    return 0;
}
