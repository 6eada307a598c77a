/* Optimizer kernels over one real type R; included by optim.c for float and double (RSQRT is sqrtf
 * or sqrt). Each update is one pass over its range; the branches on loop-invariant options are
 * hoisted out of the loops by the compiler. Element operations follow PyTorch's order. With
 * a->clear_grad, g[i] is set to zero once read (the step and zero_grad in one pass). */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>

static void FN(sgd)(R *restrict p, R *restrict g, R *restrict buf, int64_t n, const ct_sgd_args *a) {
    const R lr = (R)a->lr, wd = (R)a->weight_decay, mom = (R)a->momentum, keep = (R)(1.0 - a->dampening);
    const bool decay = a->weight_decay != 0, nesterov = a->nesterov, first = a->first_step, clear = a->clear_grad;
#pragma omp parallel for if (n > CT_OMP_MIN)
    for (int64_t i = 0; i < n; i++) {
        R d = g[i];
        if (clear) g[i] = 0;
        if (decay) d = d + wd * p[i];
        if (buf) {
            R b = first ? d : buf[i] * mom + keep * d;
            buf[i] = b;
            d = nesterov ? d + mom * b : b;
        }
        p[i] = p[i] - lr * d;
    }
}

static void FN(adam)(R *restrict p, R *restrict g, R *restrict m, R *restrict v, R *restrict vmax, int64_t n,
                     const ct_adam_args *a) {
    const R b1 = (R)a->beta1, b2 = (R)a->beta2, one_b1 = (R)(1.0 - a->beta1), one_b2 = (R)(1.0 - a->beta2);
    const R wd = (R)a->weight_decay, shrink = (R)(1.0 - a->lr * a->weight_decay), eps = (R)a->eps;
    /* The bias corrections as PyTorch computes them: Python floats, then one rounding to R. */
    const double bc1 = 1.0 - pow(a->beta1, (double)a->step), bc2 = 1.0 - pow(a->beta2, (double)a->step);
    const R step_size = (R)(a->lr / bc1), bc2_sqrt = (R)sqrt(bc2);
    const bool l2 = !a->decoupled_decay && a->weight_decay != 0;
    const bool decoupled = a->decoupled_decay && a->weight_decay != 0, clear = a->clear_grad;
#pragma omp parallel for if (n > CT_OMP_MIN)
    for (int64_t i = 0; i < n; i++) {
        R gi = g[i], pi = p[i];
        if (clear) g[i] = 0;
        if (l2) gi = gi + wd * pi;
        if (decoupled) pi = pi * shrink;
        R mi = m[i] * b1 + one_b1 * gi;
        R vi = v[i] * b2 + one_b2 * gi * gi;
        m[i] = mi;
        v[i] = vi;
        R second = vi;
        if (vmax) {
            /* torch.maximum: NaN wins, and a NaN already kept stays. */
            R old = vmax[i];
            second = (vi > old || vi != vi) ? vi : old;
            vmax[i] = second;
        }
        R denom = RSQRT(second) / bc2_sqrt + eps;
        p[i] = pi + (-step_size) * (mi / denom);
    }
}

/* Fixed decomposition into CT_SUMSQ_CHUNKS chunks whose bounds depend only on n; each chunk is
 * summed by 8 interleaved accumulators in a fixed pattern, then chunks and accumulators are added in
 * order. Deterministic for any thread count. */
static double FN(sumsq)(const R *x, int64_t n, double inv_scale) {
    double part[CT_SUMSQ_CHUNKS];
    const int64_t chunk = (n + CT_SUMSQ_CHUNKS - 1) / CT_SUMSQ_CHUNKS;
#pragma omp parallel for if (n > CT_OMP_MIN)
    for (int c = 0; c < CT_SUMSQ_CHUNKS; c++) {
        int64_t lo = (int64_t)c * chunk, hi = lo + chunk < n ? lo + chunk : n;
        double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        int64_t i = lo;
        for (; i + 8 <= hi; i += 8)
            for (int k = 0; k < 8; k++) {
                double e = (double)x[i + k] * inv_scale;
                acc[k] += e * e;
            }
        for (; i < hi; i++) {
            double e = (double)x[i] * inv_scale;
            acc[0] += e * e;
        }
        part[c] = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    }
    double total = 0.0;
    for (int c = 0; c < CT_SUMSQ_CHUNKS; c++) total += part[c];
    return total;
}

static double FN(max_abs)(const R *x, int64_t n) {
    double best = 0.0;
#pragma omp parallel for reduction(max : best) if (n > CT_OMP_MIN)
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)x[i]);
        if (e > best) best = e;
    }
    return best;
}
