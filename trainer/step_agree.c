/* The one agreement of an optimizer step: the step's loss totals, nan_inf_policy's verdict on the
 * loss, the stop signal and how many eval_async results to take, in ONE small all-reduce per step
 * (before, these were four collectives: across hosts each one costs link delays per step, see
 * bench/multihost.py), and the nan_inf_policy verdict and its message.
 *
 * The vector (float64, SUM): the loss sum, the sample (token) count and the flops of this process's
 * micro-batches; for the two signals that stop a run (SIGTERM, SIGINT) whether this process received
 * it (1 or 0); the eval_async results ready on this process (only process zero runs the evaluator,
 * so the sum is its count); and one bit per process, set when its own loss sum was not finite, packed 48 bits to a
 * double (rank r adds 2^(r mod 48) to word r / 48). Every flag, count and bit word is a sum of
 * integers below 2^53, which float64 adds exactly in any order: every process decodes the same
 * verdict. The first process whose own loss went non-finite is the lowest set bit; the signal is
 * SIGTERM when any process got it, else SIGINT (what a MAX of the signal numbers gave).
 *
 * The verdict's other inputs need no agreement of their own: the all-reduced loss sum (non-finite
 * while every process's own sum was finite: finite sums that overflowed together) is the same on
 * every process, and so are the gradients the norm is taken from (after their all-reduce: the same
 * property plain DDP's replicas rely on to stay equal), and their norm's finiteness does not depend
 * on summation order (ct_op_l2_norm sums squares in float64). With ZeRO-1 the norm is global inside
 * the step, which fails alike on every process.
 *
 * The quantities: the loss SUM of the step (a NaN or an inf anywhere stays one in the sum) and the L2
 * norm of the scaled gradient (the one clipping computes, or a pass of its own when clipping is off).
 * A non-finite sum means a non-finite loss; a step whose count is 0 (every token ignored) has a sum
 * of 0 and is fine, though its mean is 0/0. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#include "trainer/async_eval.h"
#include "trainer/trainer_impl.h"

enum { SUM, COUNT, FLOS, SIGTERM_SEEN, SIGINT_SEEN, ASYNC_READY, BITS, BITS_PER_WORD = 48 };
/* Bit words the vector holds on the stack: up to 768 processes without an allocation in the step. */
enum { STACK_WORDS = 16 };

ct_status ct_step_agree(ct_trainer *t, ct_loss_value local, double flos, int signal, ct_step_totals *out) {
    int W = t->world_size, words = (W + BITS_PER_WORD - 1) / BITS_PER_WORD;
    int64_t ready = t->args.eval_async && t->priv->async_eval ? ct_async_eval_ready(t->priv->async_eval) : 0;
    *out = (ct_step_totals){.loss = local, .flos = flos, .bad_rank = isfinite(local.sum) ? -1 : t->rank,
                            .signal = signal, .async_ready = ready};
    if (W <= 1) return CT_OK;
    double stack[BITS + STACK_WORDS] = {0};
    double *v = words <= STACK_WORDS ? stack : calloc((size_t)(BITS + words), sizeof *v);
    if (!v) return ct_error(CT_ERR_NOMEM, "out of memory");
    v[SUM] = local.sum;
    v[COUNT] = local.count;
    v[FLOS] = flos;
    v[SIGTERM_SEEN] = signal == SIGTERM;
    v[SIGINT_SEEN] = signal == SIGINT;
    v[ASYNC_READY] = (double)ready;
    if (!isfinite(local.sum)) v[BITS + t->rank / BITS_PER_WORD] = ldexp(1.0, t->rank % BITS_PER_WORD);
    ct_comm_set_label(t->comm,
                      "step agreement (loss, nan_inf_policy, stop signal, eval_async) of optimizer step %lld",
                      (long long)t->state.global_step + 1);
    ct_status s = ct_comm_all_reduce_f64(t->comm, v, BITS + words, CT_SUM);
    if (s == CT_OK) {
        out->loss = (ct_loss_value){v[SUM], v[COUNT]};
        out->flos = v[FLOS];
        out->signal = v[SIGTERM_SEEN] > 0 ? SIGTERM : v[SIGINT_SEEN] > 0 ? SIGINT : 0;
        out->async_ready = (int64_t)v[ASYNC_READY];
        out->bad_rank = -1;
        for (int w = 0; w < words && out->bad_rank < 0; w++) {
            uint64_t bits = (uint64_t)v[BITS + w];
            for (int b = 0; b < BITS_PER_WORD && out->bad_rank < 0; b++)
                if (bits >> b & 1) out->bad_rank = w * BITS_PER_WORD + b;
        }
    }
    if (v != stack) free(v);
    return s;
}

ct_step_check ct_nan_inf_verdict(const ct_step_totals *a, bool norm_known, double norm) {
    if (a->bad_rank >= 0) return (ct_step_check){.bad = true, .loss = true, .rank = a->bad_rank, .value = a->loss.sum};
    if (!isfinite(a->loss.sum)) return (ct_step_check){.bad = true, .loss = true, .rank = -1, .value = a->loss.sum};
    if (norm_known && !isfinite(norm)) return (ct_step_check){.bad = true, .loss = false, .rank = -1, .value = norm};
    return (ct_step_check){.bad = false, .rank = -1};
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
