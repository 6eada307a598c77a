/* Where a run's time goes, op by op, on any device: with CTRAINER_OP_PROFILE=1 in the environment (or
 * ct_op_profile_enable), every op of core/ops/ops*.h is timed from the moment its device has finished
 * the work queued before it to the moment it has finished the op itself (the backend's synchronize on
 * both sides), so a GPU's asynchronous kernels count to the op that launched them. Profiling removes
 * the overlap between ops and adds a synchronisation to each: the figures say which ops take the time,
 * not how fast the run is. At exit the table (calls, total seconds, mean, share of the profiled time,
 * per op and device kind, largest first) goes to stderr. */
#ifndef CT_OP_PROFILE_H
#define CT_OP_PROFILE_H

#include <stdbool.h>
#include <stdio.h>

#include "core/ops/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Whether ops are being timed (read on every op: a plain flag). */
extern bool ct_op_profile_on;

/* Turns timing on or off; the first time on, the report at exit is arranged. */
void ct_op_profile_enable(bool on);
/* Around one call of op `name` on backend b: begin waits for b's queued work and returns the time. */
double ct_op_profile_begin(const ct_backend_ops *b);
void ct_op_profile_end(const ct_backend_ops *b, const char *name, double started);
/* The table so far, to f; reset empties it. */
void ct_op_profile_report(FILE *f);
void ct_op_profile_reset(void);
/* The calls of op `name` (a backend table's member name, "fused_classifier") timed so far, on every
 * device kind together: how a test asks which ops a run made. */
long long ct_op_profile_calls(const char *name);

#ifdef __cplusplus
}
#endif

#endif
