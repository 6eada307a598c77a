/* Elementwise ops, bias and activations on the CPU (see ops.h); kernels in elementwise_tmpl.h. */
#include <math.h>
#include <omp.h>
#include <stdbool.h>
#include <string.h>

#include "backends/cpu/cpu_impl.h"
#include "backends/cpu/expf.h"
#include "core/ops/ops.h"

/* GELU with the tanh approximation (GPT-2's), y = 0.5 v (1 + tanh(u)), u = k (v + 0.044715 v^3),
 * computed as y = v s with s = 0.5 (1 + tanh(u)) = sigmoid(2u) = 1 / (1 + E), E = exp(-2u), and
 * 1 - s = E s, so that nothing cancels (1 + tanh(u) for u << 0 would lose every digit):
 *   y = v s,   dy/dv = s + 2 v s (1 - s) k (1 + 3 * 0.044715 v^2).
 * Float runs on ct_cpu_expf_in_range, vectorised, rather than libm's tanh per element (the function
 * was close to half of a GPT training step on the CPU), with -2u clamped to where E is a normal float
 * and the two ends set exactly: E = 0 above u = 43.65 (s = 1, y = v) and s = 0 below u = -40 (y = -0,
 * where v s would be below 1e-33). Without a select per end the loop stays a few plain vector
 * operations. Non-finite inputs give PyTorch's values: v = -inf is 0 * -inf = NaN, as PyTorch's
 * 0.5 v (1 + tanh(u)) is, +inf's derivative is NaN, a NaN stays NaN. Double, the finite-difference
 * reference path, keeps libm. */
static const double gelu_k = 0.7978845608028654; /* sqrt(2 / pi) */
static const float gelu_lo = -87.3f, gelu_hi = 80.0f; /* the clamp of -2u */

/* -2u as a polynomial in v, and s and E from it */
static inline float gelu_minus_2u(float v) {
    return v * ((float)(-2.0 * gelu_k) + (float)(-2.0 * gelu_k * 0.044715) * (v * v));
}

static inline float gelu_sigmoid(float m2u, float *e_out) {
    const float c = m2u > gelu_lo ? (m2u < gelu_hi ? m2u : gelu_hi) : gelu_lo; /* a NaN goes to lo */
    const float e = m2u < gelu_lo ? 0.0f : ct_cpu_expf_in_range(c);
    *e_out = e;
    return m2u > gelu_hi ? 0.0f : 1.0f / (1.0f + e);
}

/* y = GELU(x) over n elements on the calling thread: the loop of gelu_tanh_fwd_f32's threads, and a
 * linear layer's epilogue on its block of rows (blas.c). */
void ct_cpu_gelu_tanh_span_f32(const float *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float e;
        y[i] = x[i] * gelu_sigmoid(gelu_minus_2u(x[i]), &e);
    }
}

static void gelu_tanh_fwd_f32(const float *x, float *y, int64_t n) {
    const int64_t chunk = 4096; /* a whole number of vectors per call */
#pragma omp parallel if (n > CT_OMP_MIN)
    {
        ct_cpu_sse_work_start();
#pragma omp for
        for (int64_t i = 0; i < n; i += chunk) ct_cpu_gelu_tanh_span_f32(x + i, y + i, n - i < chunk ? n - i : chunk);
    }
}

static void gelu_tanh_bwd_f32(const float *x, const float *dy, float *dx, int64_t n) {
#pragma omp parallel if (n > CT_OMP_MIN)
    {
        ct_cpu_sse_work_start();
#pragma omp for
        for (int64_t i = 0; i < n; i++) {
            const float v = x[i];
            float e;
            const float s = gelu_sigmoid(gelu_minus_2u(v), &e), s1 = e * s;
            const float du = (float)gelu_k * (1.0f + 3.0f * 0.044715f * v * v);
            dx[i] = dy[i] * (s + 2.0f * v * s * s1 * du);
        }
    }
}

void ct_cpu_gelu_tanh_span_f64(const double *x, double *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        double v = x[i];
        double inner = gelu_k * (v + 0.044715 * v * v * v);
        y[i] = 0.5 * v * (1.0 + tanh(inner));
    }
}

static void gelu_tanh_fwd_f64(const double *x, double *y, int64_t n) {
    const int64_t chunk = 4096;
#pragma omp parallel for if (n > CT_OMP_MIN)
    for (int64_t i = 0; i < n; i += chunk) ct_cpu_gelu_tanh_span_f64(x + i, y + i, n - i < chunk ? n - i : chunk);
}

static void gelu_tanh_bwd_f64(const double *x, const double *dy, double *dx, int64_t n) {
#pragma omp parallel for if (n > CT_OMP_MIN)
    for (int64_t i = 0; i < n; i++) {
        double v = x[i];
        double inner = gelu_k * (v + 0.044715 * v * v * v);
        double t = tanh(inner);
        double dinner = gelu_k * (1.0 + 3.0 * 0.044715 * v * v);
        dx[i] = dy[i] * (0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * dinner);
    }
}

#define R float
#define FN(name) name##_f32
#include "backends/cpu/elementwise_tmpl.h"
#undef R
#undef FN
#define R double
#define FN(name) name##_f64
#include "backends/cpu/elementwise_tmpl.h"
#undef R
#undef FN

void ct_cpu_fill(ct_tensor *t, double value) {
    int64_t n = ct_tensor_numel(t);
    if (value == 0.0 && ct_dtype_is_float(t->dtype)) {
        memset(t->data, 0, ct_tensor_nbytes(t));
        return;
    }
    if (t->dtype == CT_F32)
        fill_f32(t->data, n, (float)value);
    else if (t->dtype == CT_F64)
        fill_f64(t->data, n, value);
    else
        ct_tensor_fill(t, value);
}

void ct_cpu_copy(ct_tensor *dst, const ct_tensor *src) {
    if (dst->data != src->data) memmove(dst->data, src->data, ct_tensor_nbytes(src));
}

void ct_cpu_add(const ct_tensor *a, const ct_tensor *b, ct_tensor *out) {
    int64_t n = ct_tensor_numel(out);
    CT_REAL_DISPATCH(out, add, a->data, b->data, out->data, n);
}

void ct_cpu_axpy(double alpha, const ct_tensor *x, ct_tensor *y) {
    int64_t n = ct_tensor_numel(y);
    CT_REAL_DISPATCH(y, axpy, alpha, x->data, y->data, n);
}

void ct_cpu_scale(ct_tensor *t, double s) {
    CT_REAL_DISPATCH(t, scale, t->data, ct_tensor_numel(t), s);
}

bool ct_cpu_all_finite(const ct_tensor *t) {
    bool ok = true;
    CT_REAL_DISPATCH(t, all_finite, t->data, ct_tensor_numel(t), &ok);
    return ok;
}

void ct_cpu_bias_add(ct_tensor *y, const ct_tensor *bias, int64_t inner) {
    int64_t c = ct_tensor_numel(bias);
    CT_REAL_DISPATCH(y, bias_add, y->data, bias->data, ct_tensor_numel(y) / (c * inner), c, inner);
}

void ct_cpu_bias_grad(const ct_tensor *dy, ct_tensor *dbias, int64_t inner) {
    int64_t c = ct_tensor_numel(dbias);
    if (inner == 1) {
        ct_cpu_bias_grad_linear(dy, dbias);
        return;
    }
    CT_REAL_DISPATCH(dy, bias_grad, dy->data, dbias->data, ct_tensor_numel(dy) / (c * inner), c, inner);
}

void ct_cpu_activation_forward(ct_activation act, const ct_tensor *x, ct_tensor *y) {
    CT_REAL_DISPATCH(x, act_fwd, act, x->data, y->data, ct_tensor_numel(x));
}

void ct_cpu_activation_backward(ct_activation act, const ct_tensor *x, const ct_tensor *y, const ct_tensor *dy,
                                ct_tensor *dx) {
    int64_t n = ct_tensor_numel(dy);
    CT_REAL_DISPATCH(dy, act_bwd, act, x ? x->data : NULL, y ? y->data : NULL, dy->data, dx->data, n);
}
