/* A classifier's class ranks (ct_op_class_ranks) and the metrics that read them.
 *
 * The op against a reference written another way: the prediction by a plain scan for the first
 * maximum (NaN the largest), the label's rank by sorting (score, index) pairs stably ascending and
 * counting what follows the label (scikit-learn's top_k_accuracy_score order). Random scores with the
 * rules planted: NaNs (in the label and elsewhere), ties with the label at lower and higher classes,
 * +inf and -inf, a row of equal scores, labels outside [0, C) (-1). float32 and float64, int64 and
 * int32 labels, widths from 1 to past the vector blocks, the same values on 1 and 2 threads past the
 * OpenMP threshold, and through a device whose backend lacks the kernel (host copies).
 *
 * The metrics (accuracy, top-k, the confusion family): a batch that carries its class ranks and no
 * outputs must give the same state as one that carries the outputs, with a mask and ties; and what a
 * bad batch gets: class ranks without their arrays, rows that do not match the labels, a label
 * outside the classes, a class count that changes between batches. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/ops/backend.h"
#include "core/ops/ops.h"
#include "core/util.h"
#include "eval/metric.h"
#include "testlib.h"

static ct_rng rng;

static double unif(double lo, double hi) { return lo + (hi - lo) * ct_rng_uniform(&rng); }
static int64_t below(int64_t n) { return (int64_t)ct_rng_below(&rng, (uint64_t)n); }

/* --- the reference ------------------------------------------------------------------------------- */

typedef struct scored {
    double v;
    int64_t j;
} scored;

/* Ascending by score (NaN the largest, NaNs equal), then by index: a stable ascending argsort. */
static int ascending(const void *pa, const void *pb) {
    const scored *a = pa, *b = pb;
    bool na = isnan(a->v), nb = isnan(b->v);
    if (na != nb) return na ? 1 : -1;
    if (!na && a->v != b->v) return a->v < b->v ? -1 : 1;
    return a->j < b->j ? -1 : a->j > b->j;
}

static int64_t ref_argmax(const double *s, int64_t c) {
    int64_t a = 0;
    for (int64_t j = 1; j < c && !isnan(s[a]); j++)
        if (isnan(s[j]) || s[j] > s[a]) a = j;
    return a;
}

/* Classes after y in the stable ascending order: those ranked above it once reversed. */
static int64_t ref_above(const double *s, int64_t c, int64_t y, scored *tmp) {
    if (y < 0 || y >= c) return -1;
    for (int64_t j = 0; j < c; j++) tmp[j] = (scored){s[j], j};
    qsort(tmp, (size_t)c, sizeof *tmp, ascending);
    int64_t at = 0;
    while (tmp[at].j != y) at++;
    return c - 1 - at;
}

/* --- random scores with the rules planted ------------------------------------------------------- */

static void plant(ct_tensor *z, ct_tensor *y, int64_t r, int64_t c, double spread) {
    int64_t label = (int64_t)ct_tensor_get(y, r), j = below(c);
    if (label < 0 || label >= c || c < 3) return;
    int64_t lo = below(label + 1), hi = label + below(c - label); /* a class at or below, at or above */
    switch (below(8)) {
    case 0: ct_tensor_set(z, r * c + label, NAN); break;
    case 1: ct_tensor_set(z, r * c + label, NAN), ct_tensor_set(z, r * c + hi, NAN), ct_tensor_set(z, r * c + j, NAN);
        break;
    case 2: ct_tensor_set(z, r * c + j, NAN); break;
    case 3: /* ties with the label below and above it */
        ct_tensor_set(z, r * c + lo, ct_tensor_get(z, r * c + label));
        ct_tensor_set(z, r * c + hi, ct_tensor_get(z, r * c + label));
        break;
    case 4: ct_tensor_set(z, r * c + j, INFINITY), ct_tensor_set(z, r * c + label, INFINITY); break;
    case 5: ct_tensor_set(z, r * c + label, -INFINITY), ct_tensor_set(z, r * c + j, -INFINITY); break;
    case 6:
        for (int64_t i = 0; i < c; i++) ct_tensor_set(z, r * c + i, spread);
        break;
    default: ct_tensor_set(y, r, below(2) ? (double)c : -1.0);
    }
}

static void random_batch(ct_dtype dt, ct_dtype lt, int64_t rows, int64_t c, ct_tensor *z, ct_tensor *y) {
    const double spread = unif(0.1, 30.0);
    *z = ct_test_alloc(dt, 2, (int64_t[]){rows, c});
    *y = ct_test_alloc(lt, 1, (int64_t[]){rows});
    for (int64_t i = 0; i < rows * c; i++) /* few distinct values, so that ties happen unplanted too */
        ct_tensor_set(z, i, below(3) ? unif(-spread, spread) : (double)(below(5) - 2));
    for (int64_t r = 0; r < rows; r++) {
        ct_tensor_set(y, r, (double)below(c));
        if (below(2)) plant(z, y, r, c, spread);
    }
}

/* --- the op -------------------------------------------------------------------------------------- */

/* The op on a stand-in CUDA device served by the CPU's table without the kernel: the dispatch must
 * copy the scores and labels to the host and run the CPU's. */
static void ranks_without_kernel(const ct_tensor *z, const ct_tensor *y, int64_t *pred, int64_t *above) {
    const ct_backend_ops *cuda = ct_backends[CT_DEVICE_CUDA];
    ct_backend_ops without = *ct_backends[CT_DEVICE_CPU];
    without.class_ranks = NULL;
    ct_backends[CT_DEVICE_CUDA] = &without;
    const ct_device dev = {CT_DEVICE_CUDA, 0};
    ct_tensor dz, dy;
    CHECK_OK(ct_tensor_alloc(&dz, z->dtype, dev, 2, z->shape));
    CHECK_OK(ct_tensor_alloc(&dy, y->dtype, dev, 1, y->shape));
    CHECK_OK(ct_tensor_copy_to(&dz, z));
    CHECK_OK(ct_tensor_copy_to(&dy, y));
    ct_op_class_ranks(&dz, &dy, pred, above);
    ct_tensor_free(&dz);
    ct_tensor_free(&dy);
    ct_backends[CT_DEVICE_CUDA] = cuda;
}

static void op_cases(void) {
    const int threads = ct_get_num_threads();
    static const int64_t widths[] = {1, 2, 7, 8, 9, 33, 300, 1100};
    for (int setup = 0; setup < 24; setup++) {
        const ct_dtype dt = setup % 2 ? CT_F32 : CT_F64, lt = setup % 3 ? CT_I64 : CT_I32;
        const int64_t c = widths[setup % 8], rows = setup >= 16 ? 64 + below(64) : 1 + below(40);
        ct_tensor z, y;
        random_batch(dt, lt, rows, c, &z, &y);
        int64_t *got = malloc(6 * (size_t)rows * sizeof *got);
        for (int th = 1; th <= 2; th++) {
            ct_set_num_threads(th);
            ct_op_class_ranks(&z, &y, got + 2 * (th - 1) * rows, got + (2 * (th - 1) + 1) * rows);
            ct_set_num_threads(threads);
        }
        CHECK(memcmp(got, got + 2 * rows, 2 * (size_t)rows * sizeof *got) == 0,
              "class ranks (%s, C %lld): 1 and 2 threads differ", ct_dtype_name(dt), (long long)c);
        ranks_without_kernel(&z, &y, got + 4 * rows, got + 5 * rows);
        CHECK(memcmp(got, got + 4 * rows, 2 * (size_t)rows * sizeof *got) == 0,
              "class ranks (%s, C %lld): a backend without the kernel gives other values", ct_dtype_name(dt),
              (long long)c);
        double *s = malloc((size_t)c * sizeof *s);
        scored *tmp = malloc((size_t)c * sizeof *tmp);
        int bad = 0;
        for (int64_t r = 0; r < rows; r++) {
            for (int64_t j = 0; j < c; j++) s[j] = ct_tensor_get(&z, r * c + j);
            int64_t label = (int64_t)ct_tensor_get(&y, r), a = ref_argmax(s, c), k = ref_above(s, c, label, tmp);
            if (got[r] != a || got[rows + r] != k)
                CHECK(bad++ > 0, "class ranks (%s, C %lld), row %lld, label %lld: pred %lld above %lld, expected %lld "
                      "and %lld", ct_dtype_name(dt), (long long)c, (long long)r, (long long)label, (long long)got[r],
                      (long long)got[rows + r], (long long)a, (long long)k);
        }
        CHECK(bad == 0, "class ranks (%s, C %lld): %d of %lld rows wrong", ct_dtype_name(dt), (long long)c, bad,
              (long long)rows);
        free(s);
        free(tmp);
        free(got);
        ct_tensor_free(&z);
        ct_tensor_free(&y);
    }
}

/* --- the metrics --------------------------------------------------------------------------------- */

static ct_metric *metric(const char *spec) {
    json_error_t e;
    json_t *j = json_loads(spec, JSON_DECODE_ANY, &e);
    ct_metric *m = NULL;
    CHECK_OK(ct_metric_from_json(j, "metrics[0]", &m));
    json_decref(j);
    return m;
}

static const char *const specs[] = {"\"accuracy\"", "{\"type\": \"top_k_accuracy\", \"k\": 2}",
                                    "\"top_3_accuracy\"", "\"confusion_matrix\"",
                                    "{\"type\": \"f1\", \"average\": \"macro\"}", "\"balanced_accuracy\""};
enum { N_SPECS = sizeof specs / sizeof specs[0] };

/* Batches with their class ranks and no outputs give the state that the outputs give, batch by batch
 * (ties, NaNs and masked rows with labels outside the classes among them). */
static void metrics_read_ranks(void) {
    for (int round = 0; round < 8; round++) {
        const int64_t c = 3 + below(6), batches = 1 + below(4);
        ct_metric *by_outputs[N_SPECS], *by_ranks[N_SPECS];
        for (int i = 0; i < N_SPECS; i++) {
            by_outputs[i] = metric(specs[i]);
            by_ranks[i] = metric(specs[i]);
            CHECK(ct_metric_takes_class_values(by_ranks[i]), "%s: takes no class ranks", specs[i]);
        }
        for (int64_t bi = 0; bi < batches; bi++) {
            const int64_t rows = 1 + below(30);
            ct_tensor z, y, mask = ct_test_alloc(CT_U8, 1, (int64_t[]){rows});
            random_batch(round % 2 ? CT_F32 : CT_F64, CT_I64, rows, c, &z, &y);
            for (int64_t r = 0; r < rows; r++) {
                int64_t label = (int64_t)ct_tensor_get(&y, r);
                bool real = label >= 0 && label < c && below(5) > 0; /* a label outside: padding only */
                ((uint8_t *)mask.data)[r] = real;
            }
            int64_t *vals = malloc(2 * (size_t)rows * sizeof *vals);
            ct_op_class_ranks(&z, &y, vals, vals + rows);
            ct_class_values cv = {.pred = vals, .above = vals + rows, .rows = rows, .classes = c};
            ct_eval_batch with_outputs = {.outputs = &z, .labels = &y, .mask = &mask};
            ct_eval_batch with_ranks = {.labels = &y, .mask = &mask, .classes = &cv};
            for (int i = 0; i < N_SPECS; i++) {
                CHECK_OK(ct_metric_update(by_outputs[i], &with_outputs));
                CHECK_OK(ct_metric_update(by_ranks[i], &with_ranks));
            }
            free(vals);
            ct_tensor_free(&z);
            ct_tensor_free(&y);
            ct_tensor_free(&mask);
        }
        for (int i = 0; i < N_SPECS; i++) {
            const ct_metric *a = by_outputs[i], *b = by_ranks[i];
            CHECK(a->n_counts == b->n_counts && a->n_counts > 0 &&
                      memcmp(a->counts, b->counts, (size_t)a->n_counts * sizeof *a->counts) == 0,
                  "%s, round %d: the class ranks' state differs from the outputs'", specs[i], round);
            ct_metric_free(by_outputs[i]);
            ct_metric_free(by_ranks[i]);
        }
    }
}

static void update_fails(ct_metric *m, const ct_eval_batch *b, const char *want) {
    CHECK(ct_metric_update(m, b) != CT_OK, "%s: a bad batch was taken", ct_metric_name(m));
    CHECK(strstr(ct_last_error(), want) != NULL, "%s: message '%s' lacks '%s'", ct_metric_name(m), ct_last_error(),
          want);
}

static void metric_errors(void) {
    int64_t vals[8] = {0, 1, 2, 0, 0, 1, 0, 2};
    ct_tensor y = ct_test_alloc(CT_I64, 1, (int64_t[]){4});
    for (int r = 0; r < 4; r++) ct_tensor_set(&y, r, r % 3);
    for (int i = 0; i < N_SPECS; i++) {
        ct_metric *m = metric(specs[i]);
        ct_class_values cv = {.pred = vals, .above = vals + 4, .rows = 4, .classes = 3};
        ct_class_values no_pred = cv, short_rows = cv, two = cv, four = cv;
        no_pred.pred = NULL;
        update_fails(m, &(ct_eval_batch){.labels = &y, .classes = &no_pred}, "class ranks without");
        short_rows.rows = 3;
        update_fails(m, &(ct_eval_batch){.labels = &y, .classes = &short_rows}, "expected class ids [3]");
        two.classes = 2;
        update_fails(m, &(ct_eval_batch){.labels = &y, .classes = &two}, "label 2 at row 2 of the batch is outside");
        update_fails(m, &(ct_eval_batch){.classes = &cv}, "needs labels");
        /* a good batch counts; a later batch with another class count is refused (confusion family) */
        CHECK_OK(ct_metric_update(m, &(ct_eval_batch){.labels = &y, .classes = &cv}));
        if (i >= 3) {
            four.classes = 4;
            update_fails(m, &(ct_eval_batch){.labels = &y, .classes = &four},
                         "this batch's class scores have 4 classes, and earlier batches had 3");
        }
        json_t *out = json_object();
        CHECK_OK(ct_metric_compute(m, "eval", out));
        if (i == 0) /* predictions 0 1 2 0 against labels 0 1 2 0: all right */
            CHECK(json_real_value(json_object_get(out, "eval_accuracy")) == 1.0, "accuracy from class ranks wrong");
        if (i == 1) /* ranks 0 1 0 2 against k 2: three of four */
            CHECK(json_real_value(json_object_get(out, "eval_top_2_accuracy")) == 0.75, "top-2 from ranks wrong");
        json_decref(out);
        ct_metric_free(m);
    }
    ct_tensor_free(&y);
}

int main(void) {
    ct_test_begin("test_class_ranks");
    ct_rng_init(&rng, ct_test_seed, 0, CT_RNG_USER);
    op_cases();
    metrics_read_ranks();
    metric_errors();
    return ct_test_finish();
}
