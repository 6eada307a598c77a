/* nan_inf_policy's detection: is an optimizer step's loss or gradient norm NaN or infinite, with the
 * same answer on every process, and which process's loss went first.
 *
 * The quantities: the loss SUM of the step (over its micro-batches and, all-reduced, over the
 * processes; a NaN or an inf anywhere stays one in the sum) and the L2 norm of the scaled gradient
 * (the one clipping computes, or a pass of its own when clipping is off). A non-finite sum means a
 * non-finite loss; a step whose count is 0 (every token ignored) has a sum of 0 and is fine, though
 * its mean is 0/0.
 *
 * With several processes one 8-byte all-reduce (MIN) makes the verdict common and names the culprit:
 * each process sends its rank when its own loss sum was not finite, else W when the all-reduced sum
 * is not finite (finite sums that overflowed together), else W + 1 when its gradient norm is not
 * finite, else W + 2. Even where an all-reduce could give processes results that differ in the last
 * bit, the MIN is one number: every process takes the same branch, no collective is left unmatched. */
#include <math.h>
#include <stdio.h>

#include "trainer/trainer_impl.h"

ct_status ct_nan_inf_check(ct_trainer *t, double local_loss_sum, double loss_sum, bool norm_known, double norm,
                           ct_step_check *out) {
    int64_t W = t->world_size;
    int64_t v = !isfinite(local_loss_sum) ? t->rank
                : !isfinite(loss_sum)     ? W
                : norm_known && !isfinite(norm) ? W + 1
                                                : W + 2;
    if (W > 1) {
        ct_status s = ct_comm_all_reduce_i64(t->comm, &v, 1, CT_MIN);
        if (s != CT_OK) return ct_error_prefix(s, "nan_inf_policy: agreeing on the step's loss and gradient norm: ");
    }
    *out = (ct_step_check){.bad = v < W + 2, .loss = v <= W, .rank = v < W ? (int)v : -1,
                           .value = v <= W ? loss_sum : norm};
    return CT_OK;
}

static const char *nonfinite_name(double x) { return isnan(x) ? "nan" : x > 0 ? "inf" : "-inf"; }

void ct_nan_inf_describe(const ct_trainer *t, const ct_step_check *c, int64_t epoch, char *buf, size_t cap) {
    int W = t->world_size;
    char where[96];
    snprintf(where, sizeof where, "optimizer step %lld (epoch %lld)", (long long)t->state.global_step + 1,
             (long long)epoch);
    const char *v = nonfinite_name(c->value);
    if (c->loss && c->rank >= 0 && W > 1)
        snprintf(buf, cap, "%s: the loss is %s, first on rank %d of %d", where, v, c->rank, W);
    else if (c->loss && W > 1)
        snprintf(buf, cap, "%s: the loss is %s (the finite sums of the %d processes overflowed)", where, v, W);
    else if (c->loss)
        snprintf(buf, cap, "%s: the loss is %s", where, v);
    else if (W > 1)
        snprintf(buf, cap, "%s: the gradient norm is %s while the loss is finite (gradients summed over the %d "
                 "processes)", where, v, W);
    else
        snprintf(buf, cap, "%s: the gradient norm is %s while the loss is finite", where, v);
}
