/* The communicators' waiting loop (see poll.h). */
#include "dist/poll.h"
#include "core/util.h"

#include <sched.h>
#include <time.h>

ct_poll ct_poll_until(ct_poll (*test)(void *ctx), void *ctx, double timeout_s) {
    double start = ct_monotonic_seconds();
    long pause = 10000;
    for (;;) {
        ct_poll p = test(ctx);
        if (p != CT_POLL_PENDING) return p;
        double waited = ct_monotonic_seconds() - start;
        if (waited >= timeout_s) return CT_POLL_TIMED_OUT;
        if (waited < CT_POLL_SPIN_S) continue;
        if (waited < CT_POLL_YIELD_S) {
            sched_yield();
            continue;
        }
        struct timespec ts = {0, pause};
        nanosleep(&ts, NULL);
        pause = pause * 2 > CT_POLL_MAX_PAUSE_NS ? CT_POLL_MAX_PAUSE_NS : pause * 2;
    }
}
