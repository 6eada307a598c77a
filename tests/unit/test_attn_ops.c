/* The attention ops (core/ops/ops_attn.h) against plain reference loops, on random shapes: head split
 * and merge (each other's inverse, untouched columns left alone), the causal softmax forward
 * (square and with more keys than queries, in place, f32 and f64) and its backward against
 * central finite differences in float64. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/ops/ops.h"
#include "core/ops/ops_attn.h"
#include "testlib.h"

static ct_rng rng;

static ct_tensor alloc4(ct_dtype dt, int ndim, int64_t a, int64_t b, int64_t c, int64_t d) {
    return ct_test_alloc(dt, ndim, (int64_t[]){a, b, c, d});
}

static void fill_normal(ct_tensor *t, double scale) {
    for (int64_t i = 0; i < ct_tensor_numel(t); i++) ct_tensor_set(t, i, scale * ct_rng_normal(&rng));
}

static void heads(ct_dtype dt) {
    const int64_t B = ct_test_between(&rng, 1, 3), T = ct_test_between(&rng, 1, 5), H = ct_test_between(&rng, 1, 4), D = ct_test_between(&rng, 1, 5);
    const int64_t off = ct_test_between(&rng, 0, 6), W = off + H * D + ct_test_between(&rng, 0, 4);
    ct_tensor x = alloc4(dt, 3, B, T, W, 0), h = alloc4(dt, 4, B, H, T, D), back = alloc4(dt, 3, B, T, W, 0);
    fill_normal(&x, 1.0);
    ct_op_heads_split(&x, off, &h);
    int bad = 0;
    for (int64_t b = 0; b < B; b++)
        for (int64_t hh = 0; hh < H; hh++)
            for (int64_t t = 0; t < T; t++)
                for (int64_t d = 0; d < D; d++)
                    bad += ct_tensor_get(&h, ((b * H + hh) * T + t) * D + d) !=
                           ct_tensor_get(&x, (b * T + t) * W + off + hh * D + d);
    CHECK(bad == 0, "heads_split %s: %d elements differ from x[b, t, off + h*D + d]", ct_dtype_name(dt), bad);
    ct_op_fill(&back, 7.0);
    ct_op_heads_merge(&h, off, &back);
    bad = 0;
    for (int64_t i = 0; i < ct_tensor_numel(&x); i++) {
        int64_t col = i % W;
        bool inside = col >= off && col < off + H * D;
        bad += ct_tensor_get(&back, i) != (inside ? ct_tensor_get(&x, i) : 7.0);
    }
    CHECK(bad == 0, "heads_merge %s: %d elements are not the split's inverse (or changed columns outside)",
          ct_dtype_name(dt), bad);
    ct_tensor_free(&x);
    ct_tensor_free(&h);
    ct_tensor_free(&back);
}

/* The reference: softmax over the visible keys in long double-free plain double. */
static void reference_softmax(const ct_tensor *x, int64_t tq, int64_t tk, double *y) {
    int64_t rows = ct_tensor_numel(x) / tk;
    for (int64_t r = 0; r < rows; r++) {
        int64_t len = r % tq + tk - tq + 1;
        double m = -INFINITY, s = 0;
        for (int64_t j = 0; j < len; j++) m = fmax(m, ct_tensor_get(x, r * tk + j));
        for (int64_t j = 0; j < len; j++) s += exp(ct_tensor_get(x, r * tk + j) - m);
        for (int64_t j = 0; j < tk; j++) y[r * tk + j] = j < len ? exp(ct_tensor_get(x, r * tk + j) - m) / s : 0.0;
    }
}

static void softmax_forward(ct_dtype dt, bool square) {
    const int64_t N = ct_test_between(&rng, 1, 3), H = ct_test_between(&rng, 1, 3), tq = ct_test_between(&rng, 1, 9), tk = square ? tq : tq + ct_test_between(&rng, 1, 5);
    ct_tensor x = alloc4(dt, 4, N, H, tq, tk), y = alloc4(dt, 4, N, H, tq, tk);
    fill_normal(&x, 4.0);
    int64_t n = ct_tensor_numel(&x);
    double *want = malloc((size_t)n * sizeof *want);
    reference_softmax(&x, tq, tk, want);
    ct_op_causal_softmax_forward(&x, &y);
    double worst = 0;
    for (int64_t i = 0; i < n; i++) worst = fmax(worst, fabs(ct_tensor_get(&y, i) - want[i]));
    double tol = dt == CT_F32 ? 1e-6 : 1e-14;
    CHECK(worst < tol, "causal softmax %s [%lld, %lld, %lld, %lld]: max error %.3g", ct_dtype_name(dt), (long long)N,
          (long long)H, (long long)tq, (long long)tk, worst);
    /* In place gives the same bits. */
    ct_op_causal_softmax_forward(&x, &x);
    CHECK(memcmp(x.data, y.data, ct_tensor_nbytes(&x)) == 0, "causal softmax %s in place differs", ct_dtype_name(dt));
    free(want);
    ct_tensor_free(&x);
    ct_tensor_free(&y);
}

/* L = sum(softmax(x) * r): the backward of dy = r against finite differences of L. */
typedef struct fd_ctx {
    ct_tensor *x, *y;
    const double *r;
} fd_ctx;

static double objective(void *p) {
    fd_ctx *c = p;
    ct_op_causal_softmax_forward(c->x, c->y);
    double acc = 0;
    for (int64_t i = 0; i < ct_tensor_numel(c->y); i++) acc += ((double *)c->y->data)[i] * c->r[i];
    return acc;
}

static void softmax_backward(bool square, bool in_place) {
    const int64_t N = ct_test_between(&rng, 1, 2), tq = ct_test_between(&rng, 1, 7), tk = square ? tq : tq + ct_test_between(&rng, 1, 4);
    ct_tensor x = alloc4(CT_F64, 3, N, tq, tk, 0), y = alloc4(CT_F64, 3, N, tq, tk, 0);
    ct_tensor dy = alloc4(CT_F64, 3, N, tq, tk, 0), dx = alloc4(CT_F64, 3, N, tq, tk, 0);
    fill_normal(&x, 2.0);
    fill_normal(&dy, 1.0);
    int64_t n = ct_tensor_numel(&x);
    double *r = malloc((size_t)n * sizeof *r);
    memcpy(r, dy.data, (size_t)n * sizeof *r);
    ct_op_causal_softmax_forward(&x, &y);
    ct_tensor *out = in_place ? &dy : &dx;
    ct_op_causal_softmax_backward(&y, &dy, out);
    double *analytic = malloc((size_t)n * sizeof *analytic);
    memcpy(analytic, out->data, (size_t)n * sizeof *analytic);
    int masked_nonzero = 0;
    for (int64_t i = 0; i < n; i++) masked_nonzero += (i % tk > (i / tk) % tq + tk - tq) && analytic[i] != 0.0;
    CHECK(masked_nonzero == 0, "causal softmax backward: %d masked positions got a gradient", masked_nonzero);
    fd_ctx c = {&x, &y, r};
    ct_fd_result res = ct_fd_check(objective, &c, x.data, analytic, n, 1 << 20, false, &rng);
    CHECK(res.rel < 1e-6, "causal softmax backward (%s, %s): relative error %.3g over %d probes",
          square ? "square" : "more keys", in_place ? "in place" : "separate", res.rel, res.probes);
    CHECK(!res.analytic_zero || tk == 1, "causal softmax backward: all-zero gradient proves nothing");
    free(r);
    free(analytic);
    ct_tensor_free(&x);
    ct_tensor_free(&y);
    ct_tensor_free(&dy);
    ct_tensor_free(&dx);
}

int main(void) {
    ct_test_begin("test_attn_ops");
    ct_rng_init(&rng, ct_test_seed, 0, CT_RNG_USER);
    for (int rep = 0; rep < 20; rep++) {
        heads(CT_F32);
        heads(CT_F64);
        softmax_forward(CT_F32, rep % 2 == 0);
        softmax_forward(CT_F64, rep % 2 == 0);
        softmax_backward(rep % 2 == 0, rep % 4 < 2);
    }
    /* A large case runs the OpenMP paths. */
    {
        ct_tensor x = alloc4(CT_F32, 4, 4, 4, 128, 128), y = alloc4(CT_F32, 4, 4, 4, 128, 128);
        fill_normal(&x, 3.0);
        double *want = malloc((size_t)ct_tensor_numel(&x) * sizeof *want);
        reference_softmax(&x, 128, 128, want);
        ct_op_causal_softmax_forward(&x, &y);
        double worst = 0;
        for (int64_t i = 0; i < ct_tensor_numel(&x); i++) worst = fmax(worst, fabs(ct_tensor_get(&y, i) - want[i]));
        CHECK(worst < 1e-6, "causal softmax f32 [4, 4, 128, 128]: max error %.3g", worst);
        free(want);
        ct_tensor_free(&x);
        ct_tensor_free(&y);
    }
    return ct_test_finish();
}
