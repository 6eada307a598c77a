/* The out-of-line helpers of util.h. */
#include "core/util.h"

#include <time.h>

double ct_monotonic_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
