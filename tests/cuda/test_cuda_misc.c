/* Dropout and embedding on CUDA against the CPU backend, on fresh random inputs each run, through the
 * public ct_op_* entry points.
 *
 * Dropout: both backends evaluate the same Philox function (core/rng_philox.h) on the same counters,
 * so masks AND outputs must be bit-identical: f32 and f64, rows of any length (not only multiples of
 * the four elements one Philox call covers), p = 0, 1, 0.5 and random, keys, steps and sample offsets
 * beyond 2^32 (the counter's high words), in place (y aliasing x). The mask of a batch's tail
 * computed alone (sample_offset moved) equals the tail of the whole batch's mask. Backward, also in
 * place, bit-identical too. The kept fraction is checked against 1 - p, so a mask of all ones or
 * all zeros cannot pass by agreeing with a broken CPU.
 *
 * Embedding: find_invalid (valid ids, and two bad ids - negative and too large - in either order:
 * the first flat index), forward (a gather: bit-identical), and backward with many repeated ids,
 * padding_idx (-1 or a used id) and a dweight that starts non-zero (it accumulates): bit-identical
 * to the CPU, because both add each column's contributions in token order; the padding row keeps its
 * starting value. Widths from 1 to 700 (several column blocks). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/ops/ops.h"
#include "cuda_testlib.h"

static ct_rng rng;

static double urand(double lo, double hi) { return lo + (hi - lo) * ct_rng_uniform(&rng); }
static int64_t irand(int64_t lo, int64_t hi) { return lo + (int64_t)ct_rng_below(&rng, (uint64_t)(hi - lo + 1)); }

static void free_all(ct_tensor *ts, int n) {
    for (int i = 0; i < n; i++) ct_tensor_free(&ts[i]);
}

/* --- dropout ------------------------------------------------------------------------------------ */

static double pick_p(int k) {
    switch (k % 5) {
    case 0: return 0.0;
    case 1: return 1.0;
    case 2: return 0.5;
    default: return urand(0.01, 0.99);
    }
}

static void dropout_case(ct_dtype dt, int k) {
    int ndim = (int)irand(1, 4);
    int64_t shape[4] = {irand(1, 40), irand(1, 13), irand(1, 9), irand(1, 7)};
    if (k % 7 == 6) { /* one big case: many Philox blocks per row, many rows */
        ndim = 2;
        shape[0] = irand(100, 300);
        shape[1] = irand(1000, 3000);
    }
    double p = pick_p(k);
    ct_dropout_ctx ctx;
    ct_dropout_key(ct_test_seed + (uint64_t)k, ct_hash_name(k % 2 ? "layers.3" : "encoder.drop"), ctx.key);
    ctx.step = irand(0, 1) ? (uint64_t)irand(0, 100000) : ((uint64_t)irand(1, 60000) << 32) + (uint64_t)irand(0, 1000);
    ctx.sample_offset = irand(0, 1) ? irand(0, 1000000) : ((int64_t)irand(1, 60000) << 32) + irand(0, 1000);
    int64_t row_numel = 1;
    for (int d = 1; d < ndim; d++) row_numel *= shape[d];
    char what[200];
    snprintf(what, sizeof what, "dropout %s [%lld rows x %lld] p %g step %llu offset %lld", ct_dtype_name(dt),
             (long long)shape[0], (long long)row_numel, p, (unsigned long long)ctx.step, (long long)ctx.sample_offset);

    ct_tensor x = ct_ct_rand(&rng, dt, ndim, shape, -2, 2);
    ct_tensor y = ct_ct_zeros(dt, ndim, shape), mask = ct_ct_zeros(CT_U8, ndim, shape);
    ct_op_dropout_forward(&x, p, &ctx, &mask, &y);
    ct_tensor gx = ct_ct_to_gpu(&x), gy = ct_ct_to_gpu(&y), gmask = ct_ct_to_gpu(&mask);
    ct_tensor junk = ct_ct_rand(&rng, CT_U8, ndim, shape, 0, 200);
    ct_tensor_copy_to(&gmask, &junk); /* the mask must be written everywhere */
    ct_op_dropout_forward(&gx, p, &ctx, &gmask, &gy);
    char w2[260];
    snprintf(w2, sizeof w2, "%s: mask", what);
    ct_ct_check_equal(w2, &gmask, &mask);
    snprintf(w2, sizeof w2, "%s: y", what);
    ct_ct_check_close(w2, &gy, &y, 0.0, 1e-300);

    /* the kept fraction is 1 - p (6 standard errors) */
    int64_t n = ct_tensor_numel(&x), kept = 0;
    for (int64_t i = 0; i < n; i++) kept += ((uint8_t *)mask.data)[i];
    double sd = sqrt(p * (1 - p) / (double)n);
    CHECK(fabs((double)kept / (double)n - (1 - p)) <= 6 * sd + 1e-12, "%s: kept %lld of %lld", what, (long long)kept,
          (long long)n);

    /* in place on the GPU: y is x */
    ct_tensor gx2 = ct_ct_to_gpu(&x);
    ct_op_dropout_forward(&gx2, p, &ctx, &gmask, &gx2);
    snprintf(w2, sizeof w2, "%s: y in place", what);
    ct_ct_check_close(w2, &gx2, &y, 0.0, 1e-300);

    /* a batch's tail on its own (sample_offset moved) draws the tail of the batch's mask */
    if (shape[0] > 1) {
        int64_t skip = irand(1, shape[0] - 1);
        ct_dropout_ctx tail = ctx;
        tail.sample_offset += skip;
        ct_tensor gxt = ct_tensor_rows(&gx, skip, shape[0] - skip);
        ct_tensor gyt = ct_tensor_rows(&gy, skip, shape[0] - skip), gmt = ct_tensor_rows(&gmask, skip, shape[0] - skip);
        ct_tensor_copy_to(&gmask, &junk);
        ct_op_dropout_forward(&gxt, p, &tail, &gmt, &gyt);
        ct_tensor mt = ct_tensor_rows(&mask, skip, shape[0] - skip);
        snprintf(w2, sizeof w2, "%s: mask of rows %lld.. alone", what, (long long)skip);
        ct_ct_check_equal(w2, &gmt, &mt);
        ct_tensor_copy_to(&gmask, &mask);
    }

    /* backward: dx = dy * mask / (1 - p), also in place */
    ct_tensor dy = ct_ct_rand(&rng, dt, ndim, shape, -3, 3), dx = ct_ct_zeros(dt, ndim, shape);
    ct_op_dropout_backward(&dy, &mask, p, &dx);
    ct_tensor gdy = ct_ct_to_gpu(&dy), gdx = ct_ct_to_gpu(&y); /* gdx starts as garbage */
    ct_op_dropout_backward(&gdy, &gmask, p, &gdx);
    snprintf(w2, sizeof w2, "%s: dx", what);
    ct_ct_check_close(w2, &gdx, &dx, 0.0, 1e-300);
    ct_op_dropout_backward(&gdy, &gmask, p, &gdy);
    snprintf(w2, sizeof w2, "%s: dx in place", what);
    ct_ct_check_close(w2, &gdy, &dx, 0.0, 1e-300);

    ct_tensor ts[12] = {x, y, mask, gx, gy, gmask, junk, gx2, dy, dx, gdy, gdx};
    free_all(ts, 12);
}

static void dropout_random(void) {
    for (int k = 0; k < 28; k++) dropout_case(k % 2 ? CT_F64 : CT_F32, k);
}

/* --- embedding ---------------------------------------------------------------------------------- */

static void embedding_find_invalid(void) {
    for (int k = 0; k < 8; k++) {
        int64_t num = irand(1, 500), shape[2] = {irand(1, 30), irand(1, 40)}, n = shape[0] * shape[1];
        ct_tensor ids = ct_ct_rand(&rng, CT_I64, 2, shape, 0, (double)num);
        ct_tensor g = ct_ct_to_gpu(&ids);
        int64_t c = ct_op_embedding_find_invalid(&ids, num), d = ct_op_embedding_find_invalid(&g, num);
        CHECK(c == -1 && d == -1, "valid ids (num %lld): cpu %lld gpu %lld", (long long)num, (long long)c,
              (long long)d);
        if (n >= 2) {
            int64_t i1 = irand(0, n - 2), i2 = irand(i1 + 1, n - 1);
            bool neg_first = irand(0, 1);
            ((int64_t *)ids.data)[i1] = neg_first ? -irand(1, 5) : num + irand(0, 3);
            ((int64_t *)ids.data)[i2] = neg_first ? num : -1;
            ct_tensor_copy_to(&g, &ids);
            c = ct_op_embedding_find_invalid(&ids, num);
            d = ct_op_embedding_find_invalid(&g, num);
            CHECK(c == i1 && d == i1, "bad ids at %lld and %lld: cpu %lld gpu %lld", (long long)i1, (long long)i2,
                  (long long)c, (long long)d);
        }
        ct_tensor ts[2] = {ids, g};
        free_all(ts, 2);
    }
}

static void embedding_case(ct_dtype dt, int k) {
    int64_t num = irand(1, 60), dim = k % 4 == 3 ? irand(257, 700) : irand(1, 64);
    int64_t shape[2] = {irand(1, 24), irand(1, 50)}, n = shape[0] * shape[1];
    /* few distinct ids among many tokens: most rows of dweight gather several tokens */
    int64_t distinct = irand(1, num);
    ct_tensor ids = ct_ct_rand(&rng, CT_I64, 2, shape, 0, (double)distinct);
    int64_t padding_idx = irand(0, 2) == 0 ? -1 : irand(0, distinct - 1);
    int64_t wshape[2] = {num, dim}, yshape[3] = {shape[0], shape[1], dim};
    char what[160];
    snprintf(what, sizeof what, "embedding %s num %lld dim %lld tokens %lld padding_idx %lld", ct_dtype_name(dt),
             (long long)num, (long long)dim, (long long)n, (long long)padding_idx);

    ct_tensor w = ct_ct_rand(&rng, dt, 2, wshape, -1, 1), y = ct_ct_zeros(dt, 3, yshape);
    ct_tensor gids = ct_ct_to_gpu(&ids), gw = ct_ct_to_gpu(&w), gy = ct_ct_to_gpu(&y);
    ct_op_embedding_forward(&ids, &w, &y);
    ct_op_embedding_forward(&gids, &gw, &gy);
    char w2[220];
    snprintf(w2, sizeof w2, "%s: forward", what);
    ct_ct_check_close(w2, &gy, &y, 0.0, 1e-300);

    /* dweight accumulates onto a non-zero start */
    ct_tensor dy = ct_ct_rand(&rng, dt, 3, yshape, -1, 1), dw = ct_ct_rand(&rng, dt, 2, wshape, -1, 1);
    ct_tensor start = ct_ct_zeros(dt, 2, wshape);
    ct_tensor_copy_to(&start, &dw);
    ct_tensor gdy = ct_ct_to_gpu(&dy), gdw = ct_ct_to_gpu(&dw);
    ct_op_embedding_backward(&ids, &dy, padding_idx, &dw);
    ct_op_embedding_backward(&gids, &gdy, padding_idx, &gdw);
    snprintf(w2, sizeof w2, "%s: dweight", what);
    ct_ct_check_close(w2, &gdw, &dw, 0.0, 1e-300);
    ct_tensor back = ct_ct_to_cpu(&gdw);
    int64_t moved = 0, changed = 0;
    for (int64_t e = 0; e < num; e++)
        for (int64_t j = 0; j < dim; j++) {
            bool differs = ct_tensor_get(&back, e * dim + j) != ct_tensor_get(&start, e * dim + j);
            if (e == padding_idx) moved += differs;
            changed += differs;
        }
    CHECK(moved == 0, "%s: the padding row changed in %lld columns", what, (long long)moved);
    CHECK(changed > 0 || (padding_idx >= 0 && distinct == 1), "%s: backward changed nothing", what);
    ct_tensor ts[11] = {ids, w, y, gids, gw, gy, dy, dw, start, gdy, gdw};
    free_all(ts, 11);
    ct_tensor_free(&back);
}

static void embedding_random(void) {
    embedding_find_invalid();
    for (int k = 0; k < 16; k++) embedding_case(k % 2 ? CT_F64 : CT_F32, k);
}

int main(void) {
    ct_cuda_test_begin("test_cuda_misc");
    ct_rng_init(&rng, ct_test_seed, 0, CT_RNG_USER);
    dropout_random();
    embedding_random();
    return ct_test_finish();
}
