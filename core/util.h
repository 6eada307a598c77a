/* Small helpers shared by every area: container_of for vtable "subclassing", min/max, the clock. */
#ifndef CT_UTIL_H
#define CT_UTIL_H

#include <stddef.h>

/* Recovers the enclosing struct from a pointer to its member. The comparison inside sizeof makes
 * the compiler reject a pointer whose type is not the member's, at no run-time cost. */
#define ct_container_of(ptr, type, member)                                                          \
    ((type *)((char *)(ptr) - offsetof(type, member) + 0 * sizeof((ptr) == &((type *)0)->member)))

#define CT_MIN(a, b) ((a) < (b) ? (a) : (b))
#define CT_MAX(a, b) ((a) > (b) ? (a) : (b))
#define CT_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#ifdef __cplusplus
extern "C" {
#endif

/* Seconds on the monotonic clock, for durations (runtimes, timeouts, redraw intervals): never
 * moved by changes of the wall clock. */
double ct_monotonic_seconds(void);

#ifdef __cplusplus
}
#endif

#endif
