/* Optimizer updates and the deterministic gradient norm on the CPU (see ops_optim.h); kernels in
 * optim_tmpl.h, instantiated for float and double. */
#include <math.h>

#include "backends/cpu/cpu_impl.h"
#include "core/ops/ops.h"

#define CT_SUMSQ_CHUNKS 64

#define R float
#define FN(name) name##_f32
#define RSQRT sqrtf
#include "backends/cpu/optim_tmpl.h"
#undef R
#undef FN
#undef RSQRT
#define R double
#define FN(name) name##_f64
#define RSQRT sqrt
#include "backends/cpu/optim_tmpl.h"
#undef R
#undef FN
#undef RSQRT

/* A closed gate (ops_optim.h): no update, the gradient still cleared when asked. */
static bool gated_off(const double *gate, bool clear_grad, ct_tensor *grad) {
    if (!gate || *gate != 0.0) return false;
    if (clear_grad) ct_cpu_fill(grad, 0.0);
    return true;
}

void ct_cpu_sgd_step(ct_tensor *param, ct_tensor *grad, ct_tensor *momentum_buffer, const ct_sgd_args *a) {
    if (gated_off(a->gate, a->clear_grad, grad)) return;
    CT_REAL_DISPATCH(param, sgd, param->data, grad->data, momentum_buffer ? momentum_buffer->data : NULL,
                     ct_tensor_numel(param), a);
}

void ct_cpu_adam_step(ct_tensor *param, ct_tensor *grad, ct_tensor *exp_avg, ct_tensor *exp_avg_sq,
                      ct_tensor *max_exp_avg_sq, const ct_adam_args *a) {
    if (gated_off(a->gate, a->clear_grad, grad)) return;
    CT_REAL_DISPATCH(param, adam, param->data, grad->data, exp_avg->data, exp_avg_sq->data,
                     max_exp_avg_sq ? max_exp_avg_sq->data : NULL, ct_tensor_numel(param), a);
}

static double sumsq_scaled(const ct_tensor *t, double inv_scale) {
    int64_t n = ct_tensor_numel(t);
    if (t->dtype == CT_F32) return sumsq_f32(t->data, n, inv_scale);
    CT_ASSERT(t->dtype == CT_F64);
    return sumsq_f64(t->data, n, inv_scale);
}

double ct_cpu_sum_squares_det(const ct_tensor *t) {
    return sumsq_scaled(t, 1.0);
}

double ct_cpu_l2_norm(const ct_tensor *t) {
    double ss = sumsq_scaled(t, 1.0);
    if (!isinf(ss)) return sqrt(ss);
    /* inf: either an infinite element (the norm is inf) or finite squares that overflowed. */
    int64_t n = ct_tensor_numel(t);
    double big = t->dtype == CT_F32 ? max_abs_f32(t->data, n) : max_abs_f64(t->data, n);
    if (isinf(big)) return INFINITY;
    return big * sqrt(sumsq_scaled(t, 1.0 / big));
}

/* --- the step's statistics (core/ops/step_rule.h): the block is host memory here -------------------- */

void ct_cpu_scale_by(ct_tensor *t, const ct_tensor *stats, int slot) {
    double s = ((const double *)stats->data)[slot];
    if (s != 1.0) ct_cpu_scale(t, s);
}

void ct_cpu_l2_norm_into(const ct_tensor *t, ct_tensor *stats, int slot) {
    ((double *)stats->data)[slot] = ct_cpu_l2_norm(t);
}

void ct_cpu_step_rule(ct_tensor *stats, const ct_step_rule *rule) { ct_step_rule_apply(stats->data, rule); }
