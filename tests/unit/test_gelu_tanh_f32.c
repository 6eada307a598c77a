/* GELU's tanh form in float (elementwise.c: a vectorised exp of its own instead of libm's tanh per
 * element) against the function itself evaluated in long double, forward and backward: on a grid
 * from -100 to 100 that is dense near 0, on random values, and on the non-finite values, which must
 * come out as PyTorch's 0.5 v (1 + tanh(u)) gives them (GELU(-inf) is NaN, a NaN stays NaN). The
 * reference is the exact function rather than the float64 kernel: that one follows PyTorch's
 * formula, whose 1 + tanh(u) loses its digits for v below about -5, where the float kernel does not.
 * The isa label runs it at every level, so every level's copy is checked. */
#include <math.h>
#include <string.h>

#include "core/ops/ops.h"
#include "core/rng.h"
#include "testlib.h"

enum { N = 4096 };

static const long double K = 0.797884560802865355879892119868763737L; /* sqrt(2 / pi) */

/* y and dy/dv of v * sigmoid(2u), u = K (v + 0.044715 v^3): 0.5 v (1 + tanh(u)) without its
 * cancellation, in long double; non-finite inputs through PyTorch's own formula */
static void reference(float v32, double *y, double *dydv, double *terms) {
    const long double v = v32, u = K * (v + 0.044715L * v * v * v), du = K * (1 + 3 * 0.044715L * v * v);
    if (!isfinite(v32)) {
        const long double t = tanhl(u);
        *y = (double)(0.5L * v * (1 + t));
        *dydv = (double)(0.5L * (1 + t) + 0.5L * v * (1 - t * t) * du);
        *terms = fabs(*dydv);
        return;
    }
    /* e <= 1: expl(-2u) itself would overflow even long double below v of about -55 */
    const long double e = expl(-2 * fabsl(u));
    const long double s = (u >= 0 ? 1 : e) / (1 + e), s1 = (u >= 0 ? e : 1) / (1 + e);
    *y = (double)(v * s);
    *dydv = (double)(s + 2 * v * s * s1 * du);
    *terms = (double)(fabsl(s) + fabsl(2 * v * s * s1 * du));
}

/* float32 against a reference: 1e-5 relative to `scale`, the value's own magnitude or, for the
 * derivative, that of its two terms (it crosses zero near v = -0.75, where they cancel and any float
 * evaluation keeps only their rounding); 1e-30 absolute for results float holds as denormals or zero */
static bool same(float got, double want, double scale) {
    if (isnan(want) || isnan(got)) return isnan(want) && isnan(got);
    if (isinf(want) || isinf(got)) return (double)got == want;
    return fabs(got - want) <= 1e-5 * scale + 1e-30;
}

int main(void) {
    ct_test_begin("test_gelu_tanh_f32");
    ct_rng rng;
    ct_rng_init(&rng, ct_test_seed, 0, CT_RNG_USER);
    static float x[N], y[N], g[N], dx[N];
    int k = 0;
    x[k++] = INFINITY;
    x[k++] = -INFINITY;
    x[k++] = NAN;
    x[k++] = 0.0f;
    x[k++] = -0.0f;
    for (double v = 0.01; v <= 100 && k + 2 <= 2048; v += v < 1 ? 0.01 : v < 10 ? 0.05 : 1) {
        x[k++] = (float)v;
        x[k++] = (float)-v;
    }
    while (k < N) x[k++] = (float)(3 * ct_rng_normal(&rng));
    for (int i = 0; i < N; i++) g[i] = (float)ct_rng_normal(&rng);
    int64_t shape[1] = {N};
    ct_tensor tx = ct_tensor_view(x, CT_F32, CT_CPU, 1, shape), ty = ct_tensor_view(y, CT_F32, CT_CPU, 1, shape);
    ct_tensor tg = ct_tensor_view(g, CT_F32, CT_CPU, 1, shape), tdx = ct_tensor_view(dx, CT_F32, CT_CPU, 1, shape);
    ct_op_activation_forward(CT_ACT_GELU_TANH, &tx, &ty);
    ct_op_activation_backward(CT_ACT_GELU_TANH, &tx, &ty, &tg, &tdx);
    int bad_y = 0, bad_dx = 0;
    for (int i = 0; i < N; i++) {
        double want_y, want_d, terms;
        reference(x[i], &want_y, &want_d, &terms);
        const double want_dx = (double)g[i] * want_d;
        if (!same(y[i], want_y, fabs(want_y)) && bad_y++ < 5)
            ct_test_fail(__FILE__, __LINE__, "forward at x = %.9g: %.9g, exact %.17g", (double)x[i], (double)y[i],
                         want_y);
        if (!same(dx[i], want_dx, fabs((double)g[i]) * terms) && bad_dx++ < 5)
            ct_test_fail(__FILE__, __LINE__, "backward at x = %.9g (dy %.9g): %.9g, exact %.17g", (double)x[i],
                         (double)g[i], (double)dx[i], want_dx);
    }
    CHECK(bad_y == 0, "%d of %d forward values off the exact GELU (tanh)", bad_y, N);
    CHECK(bad_dx == 0, "%d of %d backward values off the exact derivative", bad_dx, N);
    /* the grid reached the tails where the float64 formula cancels, and the non-finite values */
    CHECK(isnan(y[1]) && isinf(y[0]) && y[0] > 0 && isnan(y[2]), "GELU(inf) = inf, GELU(-inf) = NaN, GELU(NaN) = NaN");
    return ct_test_finish();
}
