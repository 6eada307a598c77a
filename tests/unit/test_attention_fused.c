/* The fused causal attention ops (ct_op_causal_attention_forward / _backward, core/ops/ops_attn.h)
 * on random shapes, query counts on both sides of the kernel's row chunks: the forward's y and
 * log-sum-exps against plain float64 loops (softmax(q k^T / sqrt(D)) v per sample and head, the heads
 * read from and merged into their columns), float32 against the float64 reference, every element
 * written (y and lse start as NaN); the backward's d(qkv) against central finite differences of
 * sum(y * r) in float64, every element overwritten (d(qkv) starts as NaN); and both the same bits
 * with a one-slot workspace (one thread) as with a slot per thread. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/ops/ops.h"
#include "core/ops/ops_attn.h"
#include "testlib.h"

static ct_rng rng;

static ct_tensor alloc(ct_dtype dt, int ndim, int64_t a, int64_t b, int64_t c, int64_t d) {
    return ct_test_alloc(dt, ndim, (int64_t[]){a, b, c, d});
}

/* P [B, H, T, T], its rows' log-sum-exps [B, H, T] and y [B, T, C] of qkv [B, T, 3C] in plain double
 * loops. */
static void reference(const ct_tensor *qkv, int64_t H, double *P, double *lse, double *y) {
    const int64_t B = qkv->shape[0], T = qkv->shape[1], C = qkv->shape[2] / 3, D = C / H;
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < T; i++) {
                double *p = P + ((b * H + h) * T + i) * T, m = -INFINITY, s = 0;
                for (int64_t j = 0; j <= i; j++) {
                    double dot = 0;
                    for (int64_t d = 0; d < D; d++)
                        dot += ct_tensor_get(qkv, (b * T + i) * 3 * C + h * D + d) *
                               ct_tensor_get(qkv, (b * T + j) * 3 * C + C + h * D + d);
                    p[j] = dot / sqrt((double)D);
                    m = fmax(m, p[j]);
                }
                for (int64_t j = 0; j <= i; j++) s += exp(p[j] - m);
                lse[(b * H + h) * T + i] = m + log(s);
                for (int64_t j = 0; j < T; j++) p[j] = j <= i ? exp(p[j] - m) / s : 0.0;
                for (int64_t d = 0; d < D; d++) {
                    double acc = 0;
                    for (int64_t j = 0; j <= i; j++) acc += p[j] * ct_tensor_get(qkv, (b * T + j) * 3 * C + 2 * C + h * D + d);
                    y[(b * T + i) * C + h * D + d] = acc;
                }
            }
}

/* The worst of |got - want| / (1 + |want|) over n elements; NaN (an element not written) is infinite. */
static double worst_error(const ct_tensor *got, const double *want) {
    double worst = 0;
    for (int64_t i = 0; i < ct_tensor_numel(got); i++) {
        double e = fabs(ct_tensor_get(got, i) - want[i]) / (1 + fabs(want[i]));
        worst = isnan(e) ? INFINITY : fmax(worst, e);
    }
    return worst;
}

static void forward(ct_dtype dt, int64_t B, int64_t T, int64_t H, int64_t D) {
    const int64_t C = H * D;
    ct_tensor qkv = alloc(dt, 3, B, T, 3 * C, 0), lse = alloc(dt, 3, B, H, T, 0), y = alloc(dt, 3, B, T, C, 0);
    ct_tensor ws = alloc(dt, 1, ct_causal_attention_workspace_numel(T), 0, 0, 0);
    ct_tensor one = alloc(dt, 1, ct_causal_attention_workspace_numel(T) / ct_get_num_threads(), 0, 0, 0);
    ct_tensor lse1 = alloc(dt, 3, B, H, T, 0), y1 = alloc(dt, 3, B, T, C, 0);
    for (int64_t i = 0; i < ct_tensor_numel(&qkv); i++) ct_tensor_set(&qkv, i, 1.5 * ct_rng_normal(&rng));
    double *P = malloc((size_t)(B * H * T * T) * sizeof *P), *want_lse = malloc((size_t)(B * H * T) * sizeof *want_lse);
    double *want = malloc((size_t)ct_tensor_numel(&y) * sizeof *want);
    reference(&qkv, H, P, want_lse, want);
    ct_op_fill(&y, NAN);
    ct_op_fill(&lse, NAN);
    ct_op_causal_attention_forward(&qkv, H, &lse, &y, &ws);
    ct_op_causal_attention_forward(&qkv, H, &lse1, &y1, &one);
    const double worst_l = worst_error(&lse, want_lse), worst_y = worst_error(&y, want);
    const double tol = dt == CT_F32 ? 1e-5 : 1e-12;
    CHECK(worst_l < tol && worst_y < tol,
          "attention forward %s B=%lld T=%lld H=%lld D=%lld: lse off by %.3g, y by %.3g", ct_dtype_name(dt),
          (long long)B, (long long)T, (long long)H, (long long)D, worst_l, worst_y);
    CHECK(memcmp(y.data, y1.data, ct_tensor_nbytes(&y)) == 0 && memcmp(lse.data, lse1.data, ct_tensor_nbytes(&lse)) == 0,
          "attention forward T=%lld: a one-slot workspace gives other bits", (long long)T);
    free(P);
    free(want_lse);
    free(want);
    ct_tensor *all[] = {&qkv, &lse, &y, &ws, &one, &lse1, &y1};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) ct_tensor_free(all[i]);
}

/* L = sum(y * r) of the forward through the op itself. */
typedef struct fd_ctx {
    ct_tensor *qkv, *lse, *y, *ws;
    int64_t H;
    const double *r;
} fd_ctx;

static double objective(void *p) {
    fd_ctx *c = p;
    ct_op_causal_attention_forward(c->qkv, c->H, c->lse, c->y, c->ws);
    double acc = 0;
    for (int64_t i = 0; i < ct_tensor_numel(c->y); i++) acc += ((double *)c->y->data)[i] * c->r[i];
    return acc;
}

static void backward(int64_t B, int64_t T, int64_t H, int64_t D) {
    const int64_t C = H * D;
    ct_tensor qkv = alloc(CT_F64, 3, B, T, 3 * C, 0), lse = alloc(CT_F64, 3, B, H, T, 0);
    ct_tensor y = alloc(CT_F64, 3, B, T, C, 0), dy = alloc(CT_F64, 3, B, T, C, 0);
    ct_tensor dqkv = alloc(CT_F64, 3, B, T, 3 * C, 0), again = alloc(CT_F64, 3, B, T, 3 * C, 0);
    ct_tensor ws = alloc(CT_F64, 1, ct_causal_attention_workspace_numel(T), 0, 0, 0);
    ct_tensor one = alloc(CT_F64, 1, ct_causal_attention_workspace_numel(T) / ct_get_num_threads(), 0, 0, 0);
    for (int64_t i = 0; i < ct_tensor_numel(&qkv); i++) ct_tensor_set(&qkv, i, ct_rng_normal(&rng));
    for (int64_t i = 0; i < ct_tensor_numel(&dy); i++) ct_tensor_set(&dy, i, ct_rng_normal(&rng));
    ct_op_fill(&dqkv, NAN);
    ct_op_fill(&again, NAN);
    ct_op_causal_attention_forward(&qkv, H, &lse, &y, &ws);
    ct_op_causal_attention_backward(&qkv, H, &y, &lse, &dy, &dqkv, &ws);
    ct_op_causal_attention_backward(&qkv, H, &y, &lse, &dy, &again, &one);
    const int64_t n = ct_tensor_numel(&qkv);
    int unset = 0;
    for (int64_t i = 0; i < n; i++) unset += !isfinite(ct_tensor_get(&dqkv, i));
    CHECK(unset == 0, "attention backward T=%lld: %d elements of d(qkv) not written", (long long)T, unset);
    CHECK(memcmp(dqkv.data, again.data, ct_tensor_nbytes(&dqkv)) == 0,
          "attention backward T=%lld: a one-slot workspace gives other bits", (long long)T);
    double *analytic = malloc((size_t)n * sizeof *analytic);
    memcpy(analytic, dqkv.data, (size_t)n * sizeof *analytic);
    fd_ctx c = {&qkv, &lse, &y, &ws, H, dy.data};
    ct_fd_result res = ct_fd_check(objective, &c, qkv.data, analytic, n, 1 << 20, false, &rng);
    CHECK(res.rel < 1e-6, "attention backward B=%lld T=%lld H=%lld D=%lld: relative error %.3g over %d probes",
          (long long)B, (long long)T, (long long)H, (long long)D, res.rel, res.probes);
    CHECK(!res.analytic_zero, "attention backward: an all-zero gradient proves nothing");
    free(analytic);
    ct_tensor *all[] = {&qkv, &lse, &y, &dy, &dqkv, &again, &ws, &one};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) ct_tensor_free(all[i]);
}

int main(void) {
    ct_test_begin("test_attention_fused");
    ct_rng_init(&rng, ct_test_seed, 0, CT_RNG_USER);
    for (int rep = 0; rep < 12; rep++) {
        /* T up to 70: one row chunk, several, and a partial last one */
        const int64_t B = ct_test_between(&rng, 1, 3), T = rep < 2 ? ct_test_between(&rng, 1, 3) : ct_test_between(&rng, 1, 70), H = ct_test_between(&rng, 1, 4), D = ct_test_between(&rng, 1, 6);
        forward(CT_F64, B, T, H, D);
        forward(CT_F32, B, T, H, D);
        backward(ct_test_between(&rng, 1, 2), rep % 3 == 0 ? ct_test_between(&rng, 33, 45) : ct_test_between(&rng, 1, 20), ct_test_between(&rng, 1, 3), ct_test_between(&rng, 1, 4));
    }
    /* The example's shape runs the threads (a block per sample and head). */
    forward(CT_F32, 4, 128, 4, 32);
    return ct_test_finish();
}
