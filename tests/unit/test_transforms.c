/* Transforms and the transformed dataset: normalisation bit-exact against (x - mean) / std in the
 * sample's type; random crop equal to the window of the zero-padded source at the offsets the
 * documented Philox formula draws (recomputed here independently), zeros entering from the border,
 * offsets uniform over [0, 2p]^2; flips that are the identity, a mirror, or a mirror about half the
 * time; augmentation that depends only on (seed, epoch, index, transform position), whatever batch
 * or thread fetched the sample; JSON construction and its path-naming errors; and errors of the
 * wrapped dataset and of transforms propagating with their context.
 *
 * Why one file of over 600 lines: the transforms and the dataset that applies them share the grid
 * source dataset and the independent Philox recomputation written here. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "core/util.h"
#include "data/transform.h"
#include "data/transform_random.h"
#include "testlib.h"

/* --- a synthetic dataset ------------------------------------------------------------------------ */

/* Features [C, H, W] (or any shape) of any dtype. UNIQUE: element e of sample i is 1 + i*numel + e,
 * so every value says where it came from; RANDOM: uniform in [-4, 4), a function of (i, e). Labels
 * are the index. fail_index >= 0 makes fetching that sample fail. */
enum { UNIQUE, RANDOM };
typedef struct grid_ds {
    ct_dataset base;
    int64_t length;
    int mode;
    int64_t fail_index;
} grid_ds;

static double grid_value(const grid_ds *g, int64_t index, int64_t e) {
    int64_t per = ct_shape_numel(&g->base.spec.feature_shape);
    if (g->mode == UNIQUE) return (double)(1 + index * per + e);
    uint32_t ctr[4] = {(uint32_t)index, (uint32_t)e, 77, 0}, key[2] = {12345, 678}, out[4];
    ct_philox4x32(ctr, key, out);
    return -4.0 + 8.0 * (double)out[0] / 4294967296.0;
}

static int64_t grid_length(ct_dataset *ds) { return ct_container_of(ds, grid_ds, base)->length; }

static ct_status grid_get_batch(ct_dataset *ds, const int64_t *indices, int64_t n, const ct_fetch_ctx *ctx,
                                ct_tensor *features, ct_tensor *labels) {
    (void)ctx;
    grid_ds *g = ct_container_of(ds, grid_ds, base);
    int64_t per = ct_shape_numel(&ds->spec.feature_shape);
    for (int64_t r = 0; r < n; r++) {
        if (indices[r] == g->fail_index)
            return ct_error(CT_ERR_FORMAT, "grid: sample %lld is corrupt", (long long)indices[r]);
        for (int64_t e = 0; e < per; e++) ct_tensor_set(features, r * per + e, grid_value(g, indices[r], e));
        ((int64_t *)labels->data)[r] = indices[r];
    }
    return CT_OK;
}

static const ct_dataset_ops grid_ops = {
    .size = sizeof(ct_dataset_ops), .name = "grid", .length = grid_length, .get_batch = grid_get_batch};

static ct_dataset *grid_create(int64_t length, ct_dtype dt, int ndim, const int64_t *dims, int mode, bool thread_safe) {
    grid_ds *g = calloc(1, sizeof *g);
    ct_dataset_base_init(&g->base, &grid_ops);
    snprintf(g->base.source, sizeof g->base.source, "grid-dataset");
    g->base.spec.feature_dtype = dt;
    g->base.spec.feature_shape.ndim = ndim;
    for (int i = 0; i < ndim; i++) g->base.spec.feature_shape.dims[i] = dims[i];
    g->base.spec.label_shape.ndim = 0;
    g->base.spec.num_classes = length;
    g->base.thread_safe = thread_safe;
    g->length = length;
    g->mode = mode;
    g->fail_index = -1;
    return &g->base;
}

/* The source value of a grid dataset's sample, as the base would fetch it. */
static double source_at(ct_dataset *base, int64_t index, int64_t e) {
    return grid_value(ct_container_of(base, grid_ds, base), index, e);
}

/* Wraps base (kept alive by the caller through `keep`) — the grid struct is freed with the wrapper. */
static ct_dataset *wrap(ct_dataset *base, ct_transform **ts, int n) {
    ct_dataset *out = NULL;
    ct_status s = ct_transformed_dataset_create(base, ts, n, &out);
    CHECK(s == CT_OK, "wrap: %s", ct_last_error());
    return out;
}

/* Fetches indices into freshly allocated tensors (caller frees). */
static ct_status fetch(ct_dataset *ds, const int64_t *idx, int64_t n, uint64_t seed, uint64_t epoch, ct_tensor *f,
                       ct_tensor *l) {
    CT_TRY(ct_dataset_alloc_batch(ds, n, f, l));
    ct_fetch_ctx ctx = {.seed = seed, .epoch = epoch};
    ct_status s = ct_dataset_get_batch(ds, idx, n, &ctx, f, l);
    if (s != CT_OK) {
        ct_tensor_free(f);
        ct_tensor_free(l);
    }
    return s;
}

/* --- the randomness formula, rederived from transform_random.h -------------------------------- */

static uint64_t splitmix_final(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void words_of(uint64_t seed, uint64_t epoch, int64_t index, uint32_t salt, uint32_t out[4]) {
    uint64_t k = splitmix_final(seed ^ splitmix_final(salt + 0x9E3779B97F4A7C15ull * 4 /* CT_RNG_AUGMENT */));
    uint32_t key[2] = {(uint32_t)k, (uint32_t)(k >> 32)};
    uint32_t ctr[4] = {(uint32_t)index, (uint32_t)((uint64_t)index >> 32), (uint32_t)epoch, (uint32_t)(epoch >> 32)};
    ct_philox4x32(ctr, key, out);
}

/* The crop's offsets into the padded image, each in [0, 2p]. */
static void crop_offsets(uint64_t seed, uint64_t epoch, int64_t index, uint32_t salt, int64_t p, int64_t *dy,
                         int64_t *dx) {
    uint32_t w[4];
    words_of(seed, epoch, index, salt, w);
    *dy = (int64_t)(((uint64_t)w[0] * (uint64_t)(2 * p + 1)) >> 32);
    *dx = (int64_t)(((uint64_t)w[1] * (uint64_t)(2 * p + 1)) >> 32);
}

static bool flip_drawn(uint64_t seed, uint64_t epoch, int64_t index, uint32_t salt, double p) {
    uint32_t w[4];
    words_of(seed, epoch, index, salt, w);
    return (double)w[0] < p * 4294967296.0;
}

static void formula(void) {
    ct_rng r;
    ct_rng_init(&r, ct_test_seed, 0, CT_RNG_USER);
    int bad = 0;
    for (int i = 0; i < 200; i++) {
        ct_fetch_ctx ctx = {.seed = ct_rng_u64(&r), .epoch = i % 2 ? ct_rng_u64(&r) : ct_rng_below(&r, 100)};
        int64_t index = i % 3 ? (int64_t)ct_rng_below(&r, 1000) : (int64_t)(ct_rng_u64(&r) >> 2);
        uint32_t salt = (uint32_t)ct_rng_below(&r, 8), a[4], b[4];
        ct_augment_random(&ctx, salt, index, a);
        words_of(ctx.seed, ctx.epoch, index, salt, b);
        bad += memcmp(a, b, sizeof a) != 0;
    }
    CHECK(bad == 0, "ct_augment_random differs from the documented formula in %d of 200 cases", bad);
    /* The helpers' edges. */
    CHECK(ct_augment_below(0, 9) == 0 && ct_augment_below(0xFFFFFFFFu, 9) == 8,
          "below maps the word range onto [0, n)");
    CHECK(!ct_augment_bernoulli(0, 0.0) && ct_augment_bernoulli(0xFFFFFFFFu, 1.0), "bernoulli at p = 0 and p = 1");
}

/* --- normalize ---------------------------------------------------------------------------------- */

static void normalize_exact(void) {
    ct_rng r;
    ct_rng_init(&r, ct_test_seed, 1, CT_RNG_USER);
    for (int trial = 0; trial < 8; trial++) {
        ct_dtype dt = trial % 2 ? CT_F64 : CT_F32;
        bool single = trial % 4 >= 2;
        int64_t dims[3] = {1 + (int64_t)ct_rng_below(&r, 4), 1 + (int64_t)ct_rng_below(&r, 6),
                           1 + (int64_t)ct_rng_below(&r, 6)};
        int64_t C = dims[0], per = dims[0] * dims[1] * dims[2];
        double mean[4], std[4];
        for (int c = 0; c < 4; c++) {
            mean[c] = ct_rng_uniform(&r) * 2 - 1;
            std[c] = 0.1 + 2 * ct_rng_uniform(&r);
        }
        ct_transform *t;
        CHECK_OK(ct_normalize_create(mean, std, single ? 1 : C, &t));
        ct_dataset *base = grid_create(50, dt, 3, dims, RANDOM, true);
        ct_dataset *ds = wrap(base, &t, 1);
        if (!ds) continue;
        int64_t idx[7];
        for (int i = 0; i < 7; i++) idx[i] = (int64_t)ct_rng_below(&r, 50);
        ct_tensor f, l;
        CHECK_OK(fetch(ds, idx, 7, ct_rng_u64(&r), 0, &f, &l));
        int64_t bad = 0;
        for (int i = 0; i < 7; i++)
            for (int64_t e = 0; e < per; e++) {
                int64_t c = single ? 0 : e / (per / C);
                double x = source_at(base, idx[i], e), got = ct_tensor_get(&f, i * per + e), want;
                if (dt == CT_F32)
                    want = (double)(((float)x - (float)mean[c]) / (float)std[c]);
                else
                    want = (x - mean[c]) / std[c];
                bad += got != want;
            }
        CHECK(bad == 0, "normalize (%s, %s): %lld values differ from (x - mean) / std", ct_dtype_name(dt),
              single ? "one value" : "per channel", (long long)bad);
        CHECK(((int64_t *)l.data)[3] == idx[3], "labels pass through untouched");
        ct_tensor_free(&f);
        ct_tensor_free(&l);
        ct_dataset_free(ds);
    }
    /* Bad values. */
    double ok[3] = {0.5, 0.5, 0.5}, zero_std[3] = {1, 0, 1}, neg_std[1] = {-1}, nan_mean[1] = {NAN};
    ct_transform *t = (ct_transform *)&r;
    CHECK_ERR(ct_normalize_create(ok, zero_std, 3, &t), CT_ERR_INVALID_ARG, "normalize", "std[1] = 0", "> 0");
    CHECK(t == NULL, "out is NULL after a failure");
    CHECK_ERR(ct_normalize_create(ok, neg_std, 1, &t), CT_ERR_INVALID_ARG, "std[0] = -1");
    CHECK_ERR(ct_normalize_create(nan_mean, ok, 1, &t), CT_ERR_INVALID_ARG, "mean[0]", "not finite");
    CHECK_ERR(ct_normalize_create(ok, ok, 0, &t), CT_ERR_INVALID_ARG, "normalize", "0 mean/std values");
    /* Channel count and dtype are checked when wrapping, naming the dataset and the transform. */
    int64_t dims[3] = {2, 4, 4};
    ct_dataset *ds;
    CHECK_OK(ct_normalize_create(ok, ok, 3, &t));
    CHECK_ERR(ct_transformed_dataset_create(grid_create(5, CT_F32, 3, dims, RANDOM, true), &t, 1, &ds), CT_ERR_SHAPE,
              "grid-dataset", "transform 0 (normalize)", "3 mean/std values", "[2, 4, 4]", "2 channels");
    CHECK_OK(ct_normalize_create(ok, ok, 1, &t));
    CHECK_ERR(ct_transformed_dataset_create(grid_create(5, CT_I64, 3, dims, UNIQUE, true), &t, 1, &ds), CT_ERR_DTYPE,
              "grid-dataset", "normalize", "i64");
}

/* --- random crop -------------------------------------------------------------------------------- */

/* The element of sample `index` at (c, y, x) after cropping at padded offsets (dy, dx). */
static double cropped_at(ct_dataset *base, int64_t index, int64_t H, int64_t W, int64_t p, int64_t dy, int64_t dx,
                         int64_t c, int64_t y, int64_t x) {
    int64_t sy = y + dy - p, sx = x + dx - p;
    if (sy < 0 || sy >= H || sx < 0 || sx >= W) return 0.0;
    return source_at(base, index, (c * H + sy) * W + sx);
}

static void crop_window(void) {
    ct_rng r;
    ct_rng_init(&r, ct_test_seed, 2, CT_RNG_USER);
    const ct_dtype dts[3] = {CT_F32, CT_F64, CT_I64};
    for (int trial = 0; trial < 24; trial++) {
        ct_dtype dt = dts[trial % 3];
        int64_t p = trial < 3 ? 0 : 1 + (int64_t)ct_rng_below(&r, 5);
        int64_t C = 1 + (int64_t)ct_rng_below(&r, 3), H = 1 + (int64_t)ct_rng_below(&r, 9),
                W = 1 + (int64_t)ct_rng_below(&r, 9);
        int64_t dims[3] = {C, H, W};
        ct_transform *t;
        CHECK_OK(ct_random_crop_create(p, &t));
        ct_dataset *base = grid_create(40, dt, 3, dims, UNIQUE, true);
        ct_dataset *ds = wrap(base, &t, 1);
        if (!ds) continue;
        int64_t n = 1 + (int64_t)ct_rng_below(&r, 12), idx[12];
        for (int64_t i = 0; i < n; i++) idx[i] = (int64_t)ct_rng_below(&r, 40);
        uint64_t seed = ct_rng_u64(&r), epoch = ct_rng_below(&r, 1000);
        ct_tensor f, l;
        CHECK_OK(fetch(ds, idx, n, seed, epoch, &f, &l));
        int64_t bad = 0, bad_zeros = 0;
        for (int64_t i = 0; i < n; i++) {
            int64_t dy, dx, zeros = 0;
            crop_offsets(seed, epoch, idx[i], 0, p, &dy, &dx);
            for (int64_t c = 0; c < C; c++)
                for (int64_t y = 0; y < H; y++)
                    for (int64_t x = 0; x < W; x++) {
                        double got = ct_tensor_get(&f, ((i * C + c) * H + y) * W + x);
                        bad += got != cropped_at(base, idx[i], H, W, p, dy, dx, c, y, x);
                        zeros += got == 0.0;
                    }
            /* Zeros are exactly the cells whose source lies in the padding (source values are >= 1). */
            int64_t oy = dy - p, ox = dx - p;
            int64_t rows_in = CT_MAX(0, H - (oy < 0 ? -oy : oy)), cols_in = CT_MAX(0, W - (ox < 0 ? -ox : ox));
            bad_zeros += zeros != C * (H * W - rows_in * cols_in);
        }
        CHECK(bad == 0, "crop p=%lld of [%lld, %lld, %lld] %s: %lld values differ from the padded window", (long long)p,
              (long long)C, (long long)H, (long long)W, ct_dtype_name(dt), (long long)bad);
        CHECK(bad_zeros == 0, "crop p=%lld: %lld samples with the wrong number of border zeros", (long long)p,
              (long long)bad_zeros);
        ct_tensor_free(&f);
        ct_tensor_free(&l);
        ct_dataset_free(ds);
    }
    ct_transform *t = (ct_transform *)&r;
    CHECK_ERR(ct_random_crop_create(-1, &t), CT_ERR_INVALID_ARG, "random_crop", "padding -1");
    CHECK(t == NULL, "out is NULL after a failure");
    int64_t flat[1] = {5};
    ct_dataset *ds;
    CHECK_OK(ct_random_crop_create(2, &t));
    CHECK_ERR(ct_transformed_dataset_create(grid_create(5, CT_F32, 1, flat, UNIQUE, true), &t, 1, &ds), CT_ERR_SHAPE,
              "grid-dataset", "transform 0 (random_crop)", "[5]", "[C, H, W]");
}

/* Offsets read back from the output (every source value names its position) are uniform over the
 * (2p+1)^2 cells and equal to the formula's. */
static void crop_distribution(void) {
    ct_rng r;
    ct_rng_init(&r, ct_test_seed, 3, CT_RNG_USER);
    const int64_t p = 2, H = 8, W = 8, N = 10000, K = 2 * p + 1;
    int64_t dims[3] = {1, H, W};
    ct_transform *t;
    CHECK_OK(ct_random_crop_create(p, &t));
    ct_dataset *ds = wrap(grid_create(N, CT_F64, 3, dims, UNIQUE, true), &t, 1);
    if (!ds) return;
    int64_t *idx = malloc((size_t)N * sizeof *idx);
    for (int64_t i = 0; i < N; i++) idx[i] = i;
    uint64_t seed = ct_rng_u64(&r), epoch = ct_rng_below(&r, 50);
    ct_tensor f, l;
    CHECK_OK(fetch(ds, idx, N, seed, epoch, &f, &l));
    int64_t cells[5][5] = {{0}}, unreadable = 0, off_formula = 0;
    const double *x = f.data;
    for (int64_t i = 0; i < N; i++) {
        /* The centre cell always comes from the image when |offset| <= p < H/2. */
        int64_t y = H / 2, xx = W / 2;
        int64_t e = (int64_t)x[(i * H + y) * W + xx] - 1 - i * H * W;
        if (e < 0 || e >= H * W) {
            unreadable++;
            continue;
        }
        int64_t dy = e / W - y + p, dx = e % W - xx + p, fy, fx;
        if (dy < 0 || dy >= K || dx < 0 || dx >= K) {
            unreadable++;
            continue;
        }
        cells[dy][dx]++;
        crop_offsets(seed, epoch, i, 0, p, &fy, &fx);
        off_formula += fy != dy || fx != dx;
    }
    CHECK(unreadable == 0 && off_formula == 0, "%lld outputs are no shifted image, %lld shifts differ from the formula",
          (long long)unreadable, (long long)off_formula);
    double expect = (double)N / (double)(K * K),
           sigma = sqrt((double)N * (1.0 / (double)(K * K)) * (1 - 1.0 / (double)(K * K)));
    for (int a = 0; a < K; a++)
        for (int b = 0; b < K; b++)
            CHECK(fabs((double)cells[a][b] - expect) <= 6 * sigma,
                  "offset (%d, %d) drawn %lld times of %lld (expected %.0f +- %.0f)", a, b, (long long)cells[a][b],
                  (long long)N, expect, 6 * sigma);
    free(idx);
    ct_tensor_free(&f);
    ct_tensor_free(&l);
    ct_dataset_free(ds);
}

/* --- random horizontal flip --------------------------------------------------------------------- */

static void hflip(void) {
    ct_rng r;
    ct_rng_init(&r, ct_test_seed, 4, CT_RNG_USER);
    const int64_t N = 10000, C = 2, H = 3, W = 1 + (int64_t)ct_rng_below(&r, 6) + 1; /* W >= 2: a flip shows */
    int64_t dims[3] = {C, H, W};
    int64_t *idx = malloc((size_t)N * sizeof *idx);
    for (int64_t i = 0; i < N; i++) idx[i] = i;
    const double ps[3] = {0.0, 1.0, 0.5};
    for (int k = 0; k < 3; k++) {
        ct_transform *t;
        CHECK_OK(ct_random_hflip_create(ps[k], &t));
        ct_dataset *base = grid_create(N, k == 2 ? CT_F32 : CT_F64, 3, dims, UNIQUE, true);
        ct_dataset *ds = wrap(base, &t, 1);
        if (!ds) continue;
        uint64_t seed = ct_rng_u64(&r), epoch = ct_rng_below(&r, 50);
        ct_tensor f, l;
        CHECK_OK(fetch(ds, idx, N, seed, epoch, &f, &l));
        int64_t flipped = 0, neither = 0, off_formula = 0;
        for (int64_t i = 0; i < N; i++) {
            bool same = true, mirror = true;
            for (int64_t e = 0; e < C * H * W; e++) {
                double got = ct_tensor_get(&f, i * C * H * W + e);
                same &= got == source_at(base, i, e);
                mirror &= got == source_at(base, i, e - e % W + (W - 1 - e % W));
            }
            flipped += mirror;
            neither += !same && !mirror;
            off_formula += mirror != flip_drawn(seed, epoch, i, 0, ps[k]);
        }
        CHECK(neither == 0 && off_formula == 0,
              "p=%g: %lld samples neither kept nor mirrored, %lld against the formula", ps[k], (long long)neither,
              (long long)off_formula);
        if (ps[k] == 0.0) CHECK(flipped == 0, "p=0 flipped %lld samples", (long long)flipped);
        if (ps[k] == 1.0) CHECK(flipped == N, "p=1 flipped only %lld of %lld", (long long)flipped, (long long)N);
        if (ps[k] == 0.5)
            CHECK(fabs((double)flipped - N / 2.0) <= 6 * sqrt(N / 4.0), "p=0.5 flipped %lld of %lld",
                  (long long)flipped, (long long)N);
        ct_tensor_free(&f);
        ct_tensor_free(&l);
        ct_dataset_free(ds);
    }
    free(idx);
    ct_transform *t = (ct_transform *)&r;
    CHECK_ERR(ct_random_hflip_create(1.5, &t), CT_ERR_INVALID_ARG, "random_hflip", "p = 1.5");
    CHECK_ERR(ct_random_hflip_create(NAN, &t), CT_ERR_INVALID_ARG, "random_hflip", "[0, 1]");
    CHECK(t == NULL, "out is NULL after a failure");
    int64_t flat[1] = {5};
    ct_dataset *ds;
    CHECK_OK(ct_random_hflip_create(0.5, &t));
    CHECK_ERR(ct_transformed_dataset_create(grid_create(5, CT_F32, 1, flat, UNIQUE, true), &t, 1, &ds), CT_ERR_SHAPE,
              "grid-dataset", "transform 0 (random_hflip)", "[5]");
}

/* --- determinism -------------------------------------------------------------------------------- */

/* crop(3), flip(0.5), normalize over [3, 7, 9] f32. */
static ct_dataset *augmented(int64_t length, bool thread_safe, ct_dataset **base_out) {
    int64_t dims[3] = {3, 7, 9};
    double mean[3] = {0.1, -0.2, 0.3}, std[3] = {0.5, 1.5, 2.5};
    ct_transform *ts[3];
    CHECK_OK(ct_random_crop_create(3, &ts[0]));
    CHECK_OK(ct_random_hflip_create(0.5, &ts[1]));
    CHECK_OK(ct_normalize_create(mean, std, 3, &ts[2]));
    ct_dataset *base = grid_create(length, CT_F32, 3, dims, RANDOM, thread_safe);
    if (base_out) *base_out = base;
    return wrap(base, ts, 3);
}

typedef struct fetch_job {
    ct_dataset *ds;
    const int64_t *idx;
    int64_t n;
    uint64_t seed, epoch;
    ct_tensor f, l;
    ct_status s;
} fetch_job;

static void *fetch_thread(void *arg) {
    fetch_job *j = arg;
    for (int rep = 0; rep < 20 && j->s == CT_OK; rep++) {
        ct_fetch_ctx ctx = {.seed = j->seed, .epoch = j->epoch};
        j->s = ct_dataset_get_batch(j->ds, j->idx, j->n, &ctx, &j->f, &j->l);
    }
    return NULL;
}

static void determinism(void) {
    ct_rng r;
    ct_rng_init(&r, ct_test_seed, 5, CT_RNG_USER);
    const int64_t L = 200;
    ct_dataset *base;
    ct_dataset *ds = augmented(L, true, &base);
    if (!ds) return;
    CHECK(ct_dataset_length(ds) == L && ds->thread_safe, "length and thread safety come from the base");
    CHECK(ds->spec.feature_shape.ndim == 3 && ds->spec.feature_shape.dims[2] == 9 && ds->spec.feature_dtype == CT_F32 &&
              ds->spec.label_shape.ndim == 0 && ds->spec.num_classes == L,
          "spec comes from the base");
    const int64_t per = 3 * 7 * 9;
    size_t row = (size_t)per * sizeof(float);
    uint64_t seed = ct_rng_u64(&r), epoch = ct_rng_below(&r, 100);
    int64_t n = 16 + (int64_t)ct_rng_below(&r, 48), idx[64];
    for (int64_t i = 0; i < n; i++) idx[i] = (int64_t)ct_rng_below(&r, (uint64_t)L); /* duplicates likely */
    idx[n - 1] = idx[0];
    ct_tensor f, l;
    CHECK_OK(fetch(ds, idx, n, seed, epoch, &f, &l));

    /* Each sample alone, and the batch reversed and split at a random point: the same bytes. */
    int64_t differ_alone = 0, differ_rev = 0;
    for (int64_t i = 0; i < n; i++) {
        ct_tensor f1, l1;
        CHECK_OK(fetch(ds, &idx[i], 1, seed, epoch, &f1, &l1));
        differ_alone += memcmp(f1.data, (char *)f.data + (size_t)i * row, row) != 0;
        ct_tensor_free(&f1);
        ct_tensor_free(&l1);
    }
    int64_t rev[64], cut = (int64_t)ct_rng_below(&r, (uint64_t)n);
    for (int64_t i = 0; i < n; i++) rev[i] = idx[n - 1 - i];
    for (int part = 0; part < 2; part++) {
        int64_t start = part ? cut : 0, len = part ? n - cut : cut;
        if (len == 0) continue;
        ct_tensor f2, l2;
        CHECK_OK(fetch(ds, rev + start, len, seed, epoch, &f2, &l2));
        for (int64_t i = 0; i < len; i++)
            differ_rev +=
                memcmp((char *)f2.data + (size_t)i * row, (char *)f.data + (size_t)(n - 1 - start - i) * row, row) != 0;
        ct_tensor_free(&f2);
        ct_tensor_free(&l2);
    }
    CHECK(differ_alone == 0 && differ_rev == 0,
          "augmentation depends on the batch: %lld samples differ fetched alone, %lld in another batch",
          (long long)differ_alone, (long long)differ_rev);
    CHECK(memcmp((char *)f.data, (char *)f.data + (size_t)(n - 1) * row, row) == 0,
          "a sample repeated in one batch is augmented the same way twice");

    /* Concurrent fetches (the dataset is thread-safe) give the same bytes. */
    fetch_job jobs[3];
    pthread_t th[3];
    for (int k = 0; k < 3; k++) {
        jobs[k] = (fetch_job){.ds = ds, .idx = idx, .n = n, .seed = seed, .epoch = epoch};
        CHECK_OK(ct_dataset_alloc_batch(ds, n, &jobs[k].f, &jobs[k].l));
        pthread_create(&th[k], NULL, fetch_thread, &jobs[k]);
    }
    for (int k = 0; k < 3; k++) {
        pthread_join(th[k], NULL);
        CHECK(jobs[k].s == CT_OK && memcmp(jobs[k].f.data, f.data, (size_t)n * row) == 0,
              "thread %d fetched other values (%s)", k, ct_status_str(jobs[k].s));
        ct_tensor_free(&jobs[k].f);
        ct_tensor_free(&jobs[k].l);
    }

    /* Another epoch or seed augments differently (162 crop x flip outcomes per sample), the same one
     * again identically. */
    int64_t all[64];
    for (int64_t i = 0; i < 64; i++) all[i] = i;
    ct_tensor a, b, c, d, lx;
    CHECK_OK(fetch(ds, all, 64, seed, epoch, &a, &lx));
    ct_tensor_free(&lx);
    CHECK_OK(fetch(ds, all, 64, seed, epoch + 1, &b, &lx));
    ct_tensor_free(&lx);
    CHECK_OK(fetch(ds, all, 64, seed ^ 1, epoch, &c, &lx));
    ct_tensor_free(&lx);
    CHECK_OK(fetch(ds, all, 64, seed, epoch, &d, &lx));
    ct_tensor_free(&lx);
    int64_t same_epoch = 0, same_seed = 0;
    for (int64_t i = 0; i < 64; i++) {
        same_epoch += memcmp((char *)a.data + i * row, (char *)b.data + i * row, row) == 0;
        same_seed += memcmp((char *)a.data + i * row, (char *)c.data + i * row, row) == 0;
    }
    CHECK(same_epoch <= 6, "%lld of 64 samples augmented the same in epochs %llu and %llu", (long long)same_epoch,
          (unsigned long long)epoch, (unsigned long long)epoch + 1);
    CHECK(same_seed <= 6, "%lld of 64 samples augmented the same under two seeds", (long long)same_seed);
    CHECK(memcmp(a.data, d.data, 64 * row) == 0, "the same (seed, epoch) twice gives the same augmentation");
    ct_tensor_free(&a);
    ct_tensor_free(&b);
    ct_tensor_free(&c);
    ct_tensor_free(&d);
    ct_tensor_free(&f);
    ct_tensor_free(&l);
    ct_dataset_free(ds);

    ds = augmented(10, false, NULL);
    CHECK(ds && !ds->thread_safe, "a wrapper of a thread-unsafe dataset is not thread-safe");
    ct_dataset_free(ds);
}

/* Two flips: equal draws would cancel always; the position in the list keys them apart. */
static void salt_by_position(void) {
    ct_rng r;
    ct_rng_init(&r, ct_test_seed, 6, CT_RNG_USER);
    const int64_t N = 4000;
    int64_t dims[3] = {1, 2, 3};
    ct_transform *ts[2];
    CHECK_OK(ct_random_hflip_create(0.5, &ts[0]));
    CHECK_OK(ct_random_hflip_create(0.5, &ts[1]));
    ct_dataset *base = grid_create(N, CT_F64, 3, dims, UNIQUE, true);
    ct_dataset *ds = wrap(base, ts, 2);
    if (!ds) return;
    int64_t *idx = malloc((size_t)N * sizeof *idx);
    for (int64_t i = 0; i < N; i++) idx[i] = i;
    uint64_t seed = ct_rng_u64(&r);
    ct_tensor f, l;
    CHECK_OK(fetch(ds, idx, N, seed, 3, &f, &l));
    int64_t mirrored = 0, off_formula = 0;
    for (int64_t i = 0; i < N; i++) {
        bool m = ct_tensor_get(&f, i * 6) == source_at(base, i, 2);
        mirrored += m;
        off_formula += m != (flip_drawn(seed, 3, i, 0, 0.5) != flip_drawn(seed, 3, i, 1, 0.5));
    }
    CHECK(fabs((double)mirrored - N / 2.0) <= 6 * sqrt(N / 4.0), "two independent flips mirror %lld of %lld",
          (long long)mirrored, (long long)N);
    CHECK(off_formula == 0, "%lld samples disagree with salts 0 and 1", (long long)off_formula);
    free(idx);
    ct_tensor_free(&f);
    ct_tensor_free(&l);
    ct_dataset_free(ds);
}

/* --- JSON --------------------------------------------------------------------------------------- */

static ct_status from_text(const char *text, ct_transform **out) {
    json_error_t err;
    json_t *j = json_loads(text, 0, &err);
    CT_ASSERT(j);
    ct_status s = ct_transform_from_json(j, "data.transforms[1]", out);
    json_decref(j);
    return s;
}

/* The JSON-built transform chain fetches the same bytes as the directly built one. */
static void json_matches_direct(void) {
    ct_rng r;
    ct_rng_init(&r, ct_test_seed, 7, CT_RNG_USER);
    int64_t dims[3] = {3, 5, 6};
    ct_transform *a[3], *b[3];
    CHECK_OK(from_text("{\"type\": \"random_crop\", \"padding\": 2}", &a[0]));
    CHECK_OK(from_text("{\"type\": \"random_hflip\"}", &a[1])); /* p defaults to 0.5 */
    CHECK_OK(from_text("{\"type\": \"normalize\", \"mean\": 0.25, \"std\": [0.5, 1, 2]}", &a[2]));
    double mean[3] = {0.25, 0.25, 0.25}, std[3] = {0.5, 1, 2};
    CHECK_OK(ct_random_crop_create(2, &b[0]));
    CHECK_OK(ct_random_hflip_create(0.5, &b[1]));
    CHECK_OK(ct_normalize_create(mean, std, 3, &b[2]));
    for (int i = 0; i < 3; i++)
        if (!a[i] || !b[i]) return;
    ct_dataset *da = wrap(grid_create(30, CT_F32, 3, dims, RANDOM, true), a, 3);
    ct_dataset *db = wrap(grid_create(30, CT_F32, 3, dims, RANDOM, true), b, 3);
    int64_t idx[30];
    for (int i = 0; i < 30; i++) idx[i] = i;
    uint64_t seed = ct_rng_u64(&r);
    ct_tensor fa, la, fb, lb;
    CHECK_OK(fetch(da, idx, 30, seed, 1, &fa, &la));
    CHECK_OK(fetch(db, idx, 30, seed, 1, &fb, &lb));
    CHECK(memcmp(fa.data, fb.data, ct_tensor_nbytes(&fa)) == 0, "JSON-built transforms differ from direct ones");
    ct_tensor_free(&fa);
    ct_tensor_free(&la);
    ct_tensor_free(&fb);
    ct_tensor_free(&lb);
    ct_dataset_free(da);
    ct_dataset_free(db);
}

static void json_errors(void) {
    ct_transform *t;
    CHECK_ERR(from_text("[1]", &t), CT_ERR_CONFIG, "data.transforms[1]", "object");
    CHECK_ERR(from_text("{\"padding\": 4}", &t), CT_ERR_CONFIG, "data.transforms[1]", "'type'");
    CHECK_ERR(from_text("{\"type\": \"random_crp\", \"padding\": 4}", &t), CT_ERR_CONFIG, "data.transforms[1].type",
              "unknown transform type 'random_crp'", "did you mean 'random_crop'?");
    CHECK_ERR(from_text("{\"type\": \"gaussian_blur\"}", &t), CT_ERR_CONFIG, "'gaussian_blur'", "normalize");
    CHECK_ERR(from_text("{\"type\": \"random_crop\", \"paddin\": 4}", &t), CT_ERR_CONFIG, "data.transforms[1]",
              "unknown key 'paddin'", "did you mean 'padding'?");
    CHECK_ERR(from_text("{\"type\": \"random_crop\"}", &t), CT_ERR_CONFIG, "data.transforms[1]", "'padding'");
    CHECK_ERR(from_text("{\"type\": \"random_crop\", \"padding\": \"4\"}", &t), CT_ERR_CONFIG,
              "data.transforms[1].padding", "integer");
    CHECK_ERR(from_text("{\"type\": \"random_crop\", \"padding\": -3}", &t), CT_ERR_INVALID_ARG, "data.transforms[1]",
              "padding -3");
    CHECK_ERR(from_text("{\"type\": \"random_hflip\", \"p\": 2}", &t), CT_ERR_INVALID_ARG, "data.transforms[1]",
              "p = 2");
    CHECK_ERR(from_text("{\"type\": \"random_hflip\", \"prob\": 0.3}", &t), CT_ERR_CONFIG, "unknown key 'prob'");
    CHECK_ERR(from_text("{\"type\": \"normalize\", \"mean\": [0.5, 0.5, 0.5], \"std\": [1, 0, 1]}", &t),
              CT_ERR_INVALID_ARG, "data.transforms[1]", "std[1] = 0");
    CHECK_ERR(from_text("{\"type\": \"normalize\", \"mean\": [1, 2, 3], \"std\": [1, 2]}", &t), CT_ERR_CONFIG,
              "data.transforms[1]", "mean has 3 values but std has 2");
    CHECK_ERR(from_text("{\"type\": \"normalize\", \"mean\": [0, \"x\"], \"std\": 1}", &t), CT_ERR_CONFIG,
              "data.transforms[1].mean[1]", "number");
    CHECK_ERR(from_text("{\"type\": \"normalize\", \"mean\": [], \"std\": 1}", &t), CT_ERR_CONFIG,
              "data.transforms[1].mean", "non-empty");
    CHECK_ERR(from_text("{\"type\": \"normalize\", \"mean\": 0}", &t), CT_ERR_CONFIG, "data.transforms[1]", "'std'");
    CHECK_ERR(from_text("{\"type\": \"normalize\", \"mean\": 0, \"std\": 1, \"stdev\": 2}", &t), CT_ERR_CONFIG,
              "unknown key 'stdev'", "did you mean 'std'?");
    CHECK(t == NULL, "out is NULL after a failure");
}

/* --- errors through the wrapper ----------------------------------------------------------------- */

static ct_status failing_apply(ct_transform *t, ct_tensor *features, const int64_t *indices, int64_t n,
                               const ct_fetch_ctx *ctx, uint32_t salt) {
    (void)t, (void)features, (void)indices, (void)ctx;
    return ct_error(CT_ERR_NUMERIC, "failing: %lld samples refused (salt %u)", (long long)n, salt);
}
static const ct_transform_ops failing_ops = {
    .size = sizeof(ct_transform_ops), .name = "failing", .apply = failing_apply};

static ct_status growing_check(ct_transform *t, const ct_sample_spec *in, ct_sample_spec *out) {
    (void)t;
    *out = *in;
    out->feature_shape.dims[1] += 8;
    return CT_OK;
}
static const ct_transform_ops growing_ops = {
    .size = sizeof(ct_transform_ops), .name = "growing", .check = growing_check};

/* A table written before apply and destroy existed: they must read as absent (defaults). */
static const ct_transform_ops old_ops = {.size = offsetof(ct_transform_ops, apply), .name = "old"};

static void propagation(void) {
    int64_t dims[3] = {2, 4, 4};
    ct_transform *ts[2];
    CHECK_OK(ct_random_crop_create(1, &ts[0]));
    CHECK_OK(ct_random_hflip_create(0.5, &ts[1]));
    ct_dataset *base = grid_create(20, CT_F32, 3, dims, UNIQUE, true);
    ct_container_of(base, grid_ds, base)->fail_index = 13;
    ct_dataset *ds = wrap(base, ts, 2);
    if (!ds) return;
    ct_tensor f, l;
    CHECK_OK(ct_dataset_alloc_batch(ds, 4, &f, &l));
    int64_t idx[4] = {1, 2, 13, 4};
    ct_fetch_ctx ctx = {.seed = 1, .epoch = 2};
    CHECK_ERR(ct_dataset_get_batch(ds, idx, 4, &ctx, &f, &l), CT_ERR_FORMAT,
              "grid-dataset: grid: sample 13 is corrupt");
    CHECK(strncmp(ct_last_error(), "grid-dataset: grid-dataset", 26) != 0, "source named once: %s", ct_last_error());
    int64_t past[1] = {20};
    CHECK_ERR(ct_dataset_get_batch(ds, past, 1, &ctx, &f, &l), CT_ERR_INVALID_ARG, "grid-dataset", "index 20");
    ct_dataset_free(ds);

    /* A transform failing at apply time: its position and name, then its message. */
    ct_transform *fail = calloc(1, sizeof *fail);
    fail->ops = &failing_ops;
    CHECK_OK(ct_random_crop_create(1, &ts[0]));
    ts[1] = fail;
    ds = wrap(grid_create(20, CT_F32, 3, dims, UNIQUE, true), ts, 2);
    if (ds) {
        CHECK_ERR(ct_dataset_get_batch(ds, idx, 2, &ctx, &f, &l), CT_ERR_NUMERIC,
                  "grid-dataset: transform 1 (failing): failing: 2 samples refused (salt 1)");
        ct_dataset_free(ds);
    }

    /* A transform that changes the shape is refused at wrap time; the wrapper owns (and frees)
     * everything even then — the sanitizer build checks that nothing leaks. */
    ct_transform *grow = calloc(1, sizeof *grow);
    grow->ops = &growing_ops;
    CHECK_OK(ct_random_hflip_create(0.5, &ts[0]));
    ts[1] = grow;
    CHECK_ERR(ct_transformed_dataset_create(grid_create(20, CT_F32, 3, dims, UNIQUE, true), ts, 2, &ds),
              CT_ERR_UNSUPPORTED, "grid-dataset: transform 1 (growing)", "[2, 4, 4] f32 into [2, 12, 4] f32");
    CHECK(ds == NULL, "out is NULL after a failure");

    /* An old, short ops table: no apply (identity), default destroy; and an empty list. */
    ct_transform *old = calloc(1, sizeof *old);
    old->ops = &old_ops;
    ds = wrap(grid_create(20, CT_F32, 3, dims, UNIQUE, true), &old, 1);
    if (ds) {
        CHECK_OK(ct_dataset_get_batch(ds, idx, 2, &ctx, &f, &l));
        CHECK(ct_tensor_get(&f, 5) == 1 + 1 * 32 + 5, "a transform without apply leaves samples unchanged");
        ct_dataset_free(ds);
    }
    ds = wrap(grid_create(20, CT_F32, 3, dims, UNIQUE, true), NULL, 0);
    if (ds) {
        CHECK_OK(ct_dataset_get_batch(ds, idx, 2, &ctx, &f, &l));
        CHECK(ct_tensor_get(&f, 32 + 7) == 1 + 2 * 32 + 7, "no transforms: the base's samples");
        ct_dataset_free(ds);
    }
    ct_transform_free(NULL);
    ct_tensor_free(&f);
    ct_tensor_free(&l);
}

int main(void) {
    ct_test_begin("test_transforms");
    formula();
    normalize_exact();
    crop_window();
    crop_distribution();
    hflip();
    determinism();
    salt_by_position();
    json_matches_direct();
    json_errors();
    propagation();
    return ct_test_finish();
}
