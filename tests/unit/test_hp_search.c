/* Hyperparameter search (search/hp_space.h, search/hp_search.h):
 *  - spaces: every distribution read back as written, keys in the file's order; bad spaces get
 *    messages naming the file, the key and the problem;
 *  - the random sampler: every draw inside its bounds and of its type; uniform and log-uniform pass
 *    a Kolmogorov-Smirnov test (log-uniform on the log scale, and it FAILS on the linear one, so the
 *    test can tell them apart); ints, stepped floats and categoricals pass a chi-square test against
 *    their exact probabilities (Optuna's log-int weights included); a seed gives the same trials
 *    again, another seed others, and a trial's values do not depend on the keys after theirs;
 *  - the grid: itertools.product order and size, stepped floats ending at high, continuous keys
 *    refused by name;
 *  - the driver with a scripted trial function: best by direction (minimize, maximize, a
 *    compute_objective), failing and non-finite trials recorded while the search goes on, a missing
 *    metric and an interruption stopping it, search_results.json / .csv and the table;
 *  - the C API (ct_trainer_hyperparameter_search) on in-memory data with a model_init hook: one fresh
 *    model per trial (equal trials give equal metrics), a failing model_init recorded, the best by
 *    direction, files in each trial's directory, setup->make_model as the hook, up-front errors;
 *  - run configs: unknown keys of every section refused before any trial with the reader's message,
 *    values left to the trials; the best config with relative dataset paths made absolute.
 * Fresh seed each run (CT_TEST_SEED to repeat).
 *
 * Why one file of over 600 lines: the spaces, the samplers and the driver of one area (search/)
 * share the statistical tests (Kolmogorov-Smirnov, chi-square) and the scripted trial written
 * here. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/rng.h"
#include "model/layers.h"
#include "search/hp_search.h"
#include "testlib.h"
#include "trainer_fixture.h"

static const char *tmpdir; /* the fixture's temporary root */

static json_t *parse(const char *text) {
    json_error_t e;
    json_t *j = json_loads(text, JSON_REJECT_DUPLICATES, &e);
    if (!j) {
        printf("bad test JSON: %s: %s\n", e.text, text);
        abort();
    }
    return j;
}

static ct_status space_of(const char *text, ct_hp_space *s) {
    json_t *j = parse(text);
    ct_status st = ct_hp_space_from_json(j, "space.json", s);
    json_decref(j);
    return st;
}

static bool file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

/* --- spaces ------------------------------------------------------------------------------------------ */

static void test_space_reading(void) {
    ct_hp_space s;
    CHECK_OK(space_of("{\"zeta\": {\"type\": \"loguniform\", \"low\": 1e-4, \"high\": 0.1},"
                      " \"alpha\": {\"type\": \"uniform\", \"low\": -1, \"high\": 2},"
                      " \"mid\": {\"type\": \"int\", \"low\": 2, \"high\": 11, \"step\": 3},"
                      " \"logint\": {\"type\": \"int\", \"low\": 1, \"high\": 64, \"log\": true},"
                      " \"f\": {\"type\": \"float\", \"low\": 0.1, \"high\": 0.3, \"step\": 0.1},"
                      " \"flog\": {\"type\": \"float\", \"low\": 1, \"high\": 10, \"log\": true},"
                      " \"cat\": {\"type\": \"categorical\", \"values\": [\"a\", 2, [3], null]},"
                      " \"plain\": [[8], [16, 8]]}",
                      &s));
    CHECK(s.n == 8, "8 keys, got %d", s.n);
    const char *order[] = {"zeta", "alpha", "mid", "logint", "f", "flog", "cat", "plain"};
    for (int i = 0; i < s.n && i < 8; i++) CHECK(strcmp(s.dims[i].key, order[i]) == 0, "key %d is %s", i, s.dims[i].key);
    if (s.n == 8) {
        CHECK(s.dims[0].kind == CT_HP_LOGUNIFORM && s.dims[0].low == 1e-4 && s.dims[0].high == 0.1, "loguniform");
        CHECK(s.dims[1].kind == CT_HP_UNIFORM && s.dims[1].low == -1 && s.dims[1].step == 0, "uniform");
        CHECK(s.dims[2].kind == CT_HP_INT && s.dims[2].step == 3 && !s.dims[2].log && ct_hp_dim_count(&s.dims[2]) == 4,
              "int with step: count %lld", (long long)ct_hp_dim_count(&s.dims[2]));
        CHECK(s.dims[3].kind == CT_HP_INT && s.dims[3].log && ct_hp_dim_count(&s.dims[3]) == 64, "log int");
        CHECK(s.dims[4].kind == CT_HP_UNIFORM && s.dims[4].step == 0.1 && ct_hp_dim_count(&s.dims[4]) == 3,
              "stepped float: count %lld", (long long)ct_hp_dim_count(&s.dims[4]));
        CHECK(s.dims[5].kind == CT_HP_LOGUNIFORM && ct_hp_dim_count(&s.dims[5]) == 0, "log float");
        CHECK(s.dims[6].kind == CT_HP_CATEGORICAL && ct_hp_dim_count(&s.dims[6]) == 4, "categorical");
        CHECK(s.dims[7].kind == CT_HP_CATEGORICAL && ct_hp_dim_count(&s.dims[7]) == 2, "plain list");
        CHECK(ct_hp_space_find(&s, "flog") == &s.dims[5] && !ct_hp_space_find(&s, "nope"), "find");
    }
    ct_hp_space_free(&s);

    /* Errors name the file, the key and what is wrong. */
    struct {
        const char *text, *msg;
    } bad[] = {
        {"[1, 2]", "space.json: expected an object of config keys and distributions"},
        {"{}", "space.json: the space has no keys"},
        {"{\"lr\": 3}", "space.json: lr: expected a distribution"},
        {"{\"lr\": []}", "space.json: lr: a categorical needs a non-empty list of values"},
        {"{\"lr\": {\"low\": 1, \"high\": 2}}", "space.json: lr: missing required key 'type'"},
        {"{\"lr\": {\"type\": \"loguniformm\", \"low\": 1, \"high\": 2}}",
         "space.json: lr.type: unknown distribution 'loguniformm', did you mean 'loguniform'?"},
        {"{\"lr\": {\"type\": \"uniform\", \"low\": 1}}", "space.json: lr: missing \"high\""},
        {"{\"lr\": {\"type\": \"uniform\", \"low\": 2, \"high\": 1}}", "space.json: lr: low (2) must not exceed high (1)"},
        {"{\"lr\": {\"type\": \"uniform\", \"low\": \"a\", \"high\": 1}}", "space.json: lr.low: expected a number"},
        {"{\"lr\": {\"type\": \"uniform\", \"low\": 0, \"high\": 1, \"step\": 0.1}}",
         "space.json: lr: unknown key 'step'"},
        {"{\"lr\": {\"type\": \"loguniform\", \"low\": 0, \"high\": 1}}",
         "space.json: lr: a log distribution needs low > 0, got 0"},
        {"{\"n\": {\"type\": \"int\", \"low\": 1.5, \"high\": 4}}", "space.json: n.low: expected an integer, got 1.5"},
        {"{\"n\": {\"type\": \"int\", \"low\": 1, \"high\": 4, \"step\": 0}}",
         "space.json: n.step: expected a positive integer, got 0"},
        {"{\"n\": {\"type\": \"int\", \"low\": 1, \"high\": 4, \"stepp\": 2}}",
         "space.json: n: unknown key 'stepp', did you mean 'step'?"},
        {"{\"n\": {\"type\": \"int\", \"low\": 1, \"high\": 64, \"step\": 2, \"log\": true}}",
         "space.json: n: \"step\" and \"log\" cannot be used together"},
        {"{\"n\": {\"type\": \"int\", \"low\": 0, \"high\": 64, \"log\": true}}",
         "space.json: n: a log distribution needs low > 0, got 0"},
        {"{\"f\": {\"type\": \"float\", \"low\": 1, \"high\": 2, \"step\": -1}}",
         "space.json: f.step: expected a positive number, got -1"},
        {"{\"f\": {\"type\": \"float\", \"low\": 1, \"high\": 2, \"log\": 1}}", "space.json: f.log: expected true or false"},
        {"{\"c\": {\"type\": \"categorical\", \"value\": [1]}}",
         "space.json: c: unknown key 'value', did you mean 'values'?"},
        {"{\"c\": {\"type\": \"categorical\"}}", "space.json: c: missing \"values\""},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ct_hp_space b;
        ct_status st = space_of(bad[i].text, &b);
        CHECK(st == CT_ERR_CONFIG && strstr(ct_last_error(), bad[i].msg),
              "space %s: %s: got '%s', want '%s'", bad[i].text, ct_status_str(st), ct_last_error(), bad[i].msg);
        CHECK(b.n == 0 && b.dims == NULL, "nothing left after a failure");
    }

    /* From a file: syntax errors with line:column, a missing file as an I/O error. */
    char file[512];
    snprintf(file, sizeof file, "%s/space.json", tmpdir);
    FILE *f = fopen(file, "w");
    fputs("{\"lr\": [1,\n  2,]}\n", f);
    fclose(f);
    ct_hp_space b;
    CHECK_ERR(ct_hp_space_load(file, &b), CT_ERR_CONFIG, "space.json:2:5:");
    snprintf(file, sizeof file, "%s/none.json", tmpdir);
    CHECK_ERR(ct_hp_space_load(file, &b), CT_ERR_IO, "none.json: cannot open");
}

/* --- statistics ---------------------------------------------------------------------------------------- */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Kolmogorov-Smirnov statistic of samples u (sorted in place) against U(0, 1). */
static double ks_uniform(double *u, int n) {
    qsort(u, (size_t)n, sizeof *u, cmp_double);
    double d = 0;
    for (int i = 0; i < n; i++) d = fmax(d, fmax((double)(i + 1) / n - u[i], u[i] - (double)i / n));
    return d;
}

/* The KS bound that a correct sampler exceeds with probability 1e-6. */
static double ks_bound(int n) { return sqrt(-0.5 * log(1e-6 / 2)) / sqrt((double)n); }

/* Pearson's chi-square of counts against probabilities p, and its 1 - 1e-6 quantile
 * (Wilson-Hilferty). */
static bool chi_square_ok(const int64_t *counts, const double *p, int k, int64_t n, double *stat, double *crit) {
    *stat = 0;
    for (int i = 0; i < k; i++) {
        double e = p[i] * (double)n;
        *stat += (counts[i] - e) * (counts[i] - e) / e;
    }
    double df = k - 1, z = 4.753;
    *crit = df * pow(1 - 2 / (9 * df) + z * sqrt(2 / (9 * df)), 3);
    return *stat < *crit;
}

/* --- the random sampler -------------------------------------------------------------------------------- */

enum { DRAWS = 20000 };

static void test_random_sampler(void) {
    ct_hp_space s;
    CHECK_OK(space_of("{\"lu\": {\"type\": \"loguniform\", \"low\": 1e-5, \"high\": 0.1},"
                      " \"u\": {\"type\": \"uniform\", \"low\": -2, \"high\": 3},"
                      " \"i\": {\"type\": \"int\", \"low\": -3, \"high\": 10, \"step\": 3},"
                      " \"li\": {\"type\": \"int\", \"low\": 1, \"high\": 8, \"log\": true},"
                      " \"fs\": {\"type\": \"float\", \"low\": 0.5, \"high\": 1.5, \"step\": 0.25},"
                      " \"c\": [\"x\", [1, 2], 7]}",
                      &s));
    double *lu = malloc(DRAWS * sizeof *lu), *lin = malloc(DRAWS * sizeof *lin), *u = malloc(DRAWS * sizeof *u);
    int64_t ci[5] = {0}, cli[8] = {0}, cfs[5] = {0}, cc[3] = {0};
    json_t *cats = parse("[\"x\", [1, 2], 7]");
    uint64_t seed = ct_test_seed;
    bool typed = true, bounded = true;
    for (int k = 0; k < DRAWS; k++) {
        json_t *p;
        if (ct_hp_sample_random(&s, seed, k, &p) != CT_OK) {
            CHECK(false, "sample %d: %s", k, ct_last_error());
            break;
        }
        const json_t *vlu = json_object_get(p, "lu"), *vu = json_object_get(p, "u"), *vi = json_object_get(p, "i"),
                     *vli = json_object_get(p, "li"), *vfs = json_object_get(p, "fs"), *vc = json_object_get(p, "c");
        typed &= json_is_real(vlu) && json_is_real(vu) && json_is_integer(vi) && json_is_integer(vli) &&
                 json_is_real(vfs) && vc != NULL && json_object_size(p) == 6;
        if (!typed) {
            json_decref(p);
            break;
        }
        double x = json_real_value(vlu);
        bounded &= x >= 1e-5 && x <= 0.1;
        lu[k] = (log(x) - log(1e-5)) / (log(0.1) - log(1e-5));
        lin[k] = (x - 1e-5) / (0.1 - 1e-5);
        double y = json_real_value(vu);
        bounded &= y >= -2 && y <= 3;
        u[k] = (y + 2) / 5;
        int64_t iv = json_integer_value(vi);
        bounded &= iv >= -3 && iv <= 10 && (iv + 3) % 3 == 0;
        if (bounded) ci[(iv + 3) / 3]++;
        int64_t li = json_integer_value(vli);
        bounded &= li >= 1 && li <= 8;
        if (bounded) cli[li - 1]++;
        double fs = json_real_value(vfs);
        double steps = (fs - 0.5) / 0.25;
        bounded &= fabs(steps - round(steps)) < 1e-12 && fs >= 0.5 && fs <= 1.5;
        if (bounded) cfs[(int)round(steps)]++;
        int which = -1;
        for (int j = 0; j < 3; j++)
            if (json_equal(vc, json_array_get(cats, (size_t)j))) which = j;
        bounded &= which >= 0;
        if (bounded) cc[which]++;
        json_decref(p);
        if (!bounded) {
            CHECK(false, "draw %d outside its distribution (lu %g, u %g, i %lld, li %lld, fs %g)", k, x, y,
                  (long long)iv, (long long)li, fs);
            break;
        }
    }
    CHECK(typed, "draws have the distributions' JSON types");
    if (typed && bounded) {
        double b = ks_bound(DRAWS);
        double d_log = ks_uniform(lu, DRAWS), d_lin = ks_uniform(lin, DRAWS), d_u = ks_uniform(u, DRAWS);
        CHECK(d_log < b, "loguniform: KS of log(x) against uniform %.4f >= %.4f", d_log, b);
        /* The same test on the linear scale must fail, by far: it can tell the two apart. */
        CHECK(d_lin > 20 * b, "loguniform looks linear-uniform: KS %.4f", d_lin);
        CHECK(d_u < b, "uniform: KS %.4f >= %.4f", d_u, b);
        double stat, crit;
        double p5[5] = {0.2, 0.2, 0.2, 0.2, 0.2};
        CHECK(chi_square_ok(ci, p5, 5, DRAWS, &stat, &crit), "int with step: chi2 %.2f >= %.2f", stat, crit);
        CHECK(chi_square_ok(cfs, p5, 5, DRAWS, &stat, &crit), "stepped float: chi2 %.2f >= %.2f", stat, crit);
        double p3[3] = {1 / 3.0, 1 / 3.0, 1 / 3.0};
        CHECK(chi_square_ok(cc, p3, 3, DRAWS, &stat, &crit), "categorical: chi2 %.2f >= %.2f", stat, crit);
        /* Optuna's log int: i has the weight log((i + 0.5) / (i - 0.5)) / log(8.5 / 0.5). */
        double p8[8];
        for (int i = 1; i <= 8; i++) p8[i - 1] = log((i + 0.5) / (i - 0.5)) / log(8.5 / 0.5);
        CHECK(chi_square_ok(cli, p8, 8, DRAWS, &stat, &crit), "log int: chi2 %.2f >= %.2f", stat, crit);
        /* ... and uniform weights would fail it. */
        double flat[8] = {0.125, 0.125, 0.125, 0.125, 0.125, 0.125, 0.125, 0.125};
        CHECK(!chi_square_ok(cli, flat, 8, DRAWS, &stat, &crit), "log int passes for uniform: chi2 %.2f", stat);
    }
    free(lu);
    free(lin);
    free(u);
    json_decref(cats);

    /* Reproducible: trial k again (alone, in any order) is the same; another seed gives other values. */
    json_t *a, *b, *c;
    CHECK_OK(ct_hp_sample_random(&s, seed, 17, &a));
    CHECK_OK(ct_hp_sample_random(&s, seed, 3, &c));
    json_decref(c);
    CHECK_OK(ct_hp_sample_random(&s, seed, 17, &b));
    CHECK(json_equal(a, b), "the same seed and trial give the same values");
    json_decref(b);
    CHECK_OK(ct_hp_sample_random(&s, seed + 1, 17, &b));
    CHECK(json_real_value(json_object_get(a, "lu")) != json_real_value(json_object_get(b, "lu")) &&
              json_real_value(json_object_get(a, "u")) != json_real_value(json_object_get(b, "u")),
          "another seed, other values");
    json_decref(b);
    CHECK_OK(ct_hp_sample_random(&s, seed, 18, &b));
    CHECK(json_real_value(json_object_get(a, "u")) != json_real_value(json_object_get(b, "u")), "trials differ");
    json_decref(b);
    /* A key added at the end leaves the values of the keys before it alone. */
    ct_hp_space s2;
    CHECK_OK(space_of("{\"lu\": {\"type\": \"loguniform\", \"low\": 1e-5, \"high\": 0.1},"
                      " \"u\": {\"type\": \"uniform\", \"low\": -2, \"high\": 3},"
                      " \"i\": {\"type\": \"int\", \"low\": -3, \"high\": 10, \"step\": 3},"
                      " \"li\": {\"type\": \"int\", \"low\": 1, \"high\": 8, \"log\": true},"
                      " \"fs\": {\"type\": \"float\", \"low\": 0.5, \"high\": 1.5, \"step\": 0.25},"
                      " \"c\": [\"x\", [1, 2], 7], \"extra\": {\"type\": \"uniform\", \"low\": 0, \"high\": 1}}",
                      &s2));
    CHECK_OK(ct_hp_sample_random(&s2, seed, 17, &b));
    json_object_del(b, "extra");
    CHECK(json_equal(a, b), "a key added at the end changes the others");
    json_decref(a);
    json_decref(b);
    ct_hp_space_free(&s2);
    /* Degenerate ranges are fine: low == high. */
    CHECK_OK(space_of("{\"x\": {\"type\": \"loguniform\", \"low\": 0.5, \"high\": 0.5}, \"n\": {\"type\": \"int\", "
                      "\"low\": 4, \"high\": 4}}",
                      &s2));
    CHECK_OK(ct_hp_sample_random(&s2, seed, 0, &a));
    CHECK(json_real_value(json_object_get(a, "x")) == 0.5 && json_integer_value(json_object_get(a, "n")) == 4,
          "low == high");
    json_decref(a);
    ct_hp_space_free(&s2);
    ct_hp_space_free(&s);
}

/* --- the grid ---------------------------------------------------------------------------------------------- */

static void test_grid(void) {
    ct_hp_space s;
    CHECK_OK(space_of("{\"z\": [\"a\", \"b\"], \"m\": {\"type\": \"int\", \"low\": 0, \"high\": 5, \"step\": 2},"
                      " \"f\": {\"type\": \"float\", \"low\": 0.1, \"high\": 0.3, \"step\": 0.1}}",
                      &s));
    int64_t size = 0;
    CHECK_OK(ct_hp_grid_size(&s, &size));
    CHECK(size == 18, "grid size %lld, want 2 x 3 x 3", (long long)size);
    int64_t k = 0;
    for (int iz = 0; iz < 2; iz++)
        for (int im = 0; im < 3; im++)
            for (int jf = 0; jf < 3; jf++, k++) {
                json_t *p;
                if (ct_hp_grid_point(&s, k, &p) != CT_OK) {
                    CHECK(false, "grid point %lld: %s", (long long)k, ct_last_error());
                    continue;
                }
                const char *key = json_object_iter_key(json_object_iter(p));
                CHECK(key && strcmp(key, "z") == 0, "point %lld: keys in the space's order, first %s", (long long)k,
                      key ? key : "none");
                CHECK(strcmp(json_string_value(json_object_get(p, "z")), iz ? "b" : "a") == 0 &&
                          json_integer_value(json_object_get(p, "m")) == 2 * im,
                      "point %lld: z %s, m %lld", (long long)k, json_string_value(json_object_get(p, "z")),
                      (long long)json_integer_value(json_object_get(p, "m")));
                double f = json_real_value(json_object_get(p, "f"));
                CHECK(fabs(f - (0.1 + 0.1 * jf)) < 1e-12 && f <= 0.3, "point %lld: f %.17g", (long long)k, f);
                json_decref(p);
            }
    ct_hp_space_free(&s);
    CHECK_OK(space_of("{\"a\": [1, 2], \"lr\": {\"type\": \"loguniform\", \"low\": 1e-4, \"high\": 0.1}}", &s));
    CHECK_ERR(ct_hp_grid_size(&s, &size), CT_ERR_CONFIG, "grid search: 'lr' is loguniform", "--method random");
    json_t *p = NULL;
    CHECK_ERR(ct_hp_grid_point(&s, 0, &p), CT_ERR_CONFIG, "'lr' is loguniform");
    ct_hp_space_free(&s);
    CHECK_OK(space_of("{\"u\": {\"type\": \"uniform\", \"low\": 0, \"high\": 1}}", &s));
    CHECK_ERR(ct_hp_grid_size(&s, &size), CT_ERR_CONFIG, "grid search: 'u' is uniform");
    ct_hp_space_free(&s);
}

/* --- the driver, with scripted trials --------------------------------------------------------------------- */

typedef struct script {
    int calls;
    int interrupt_at; /* trial number that reports an interruption (-1: none) */
} script;

/* The trial's metric eval_score is its "x"; x == 3 fails, x == 99 gives a non-finite value. */
static ct_status scripted(void *ctx, ct_hp_trial *t) {
    script *s = ctx;
    s->calls++;
    if (t->number == s->interrupt_at) return ct_error(CT_ERR_INTERRUPTED, "stopped by SIGINT");
    int64_t x = json_integer_value(json_object_get(t->params, "x"));
    if (x == 3) {
        t->exit_code = 2;
        return ct_error(CT_ERR_CONFIG, "x: 3, \"bad\", is refused");
    }
    /* Metrics hold a non-finite value as null (eval/metric.c). */
    t->metrics = json_pack("{s:o, s:f}", "eval_score", x == 99 ? json_null() : json_real((double)x), "eval_runtime", 0.5);
    return CT_OK;
}

static ct_status negate(void *ctx, const json_t *metrics, double *out) {
    (void)ctx;
    const json_t *v = json_object_get(metrics, "eval_score");
    *out = json_is_number(v) ? -json_number_value(v) : NAN;
    return CT_OK;
}

static char *slurp(const char *file) {
    FILE *f = fopen(file, "rb");
    if (!f) return NULL;
    char *buf = calloc(1, 1 << 16);
    size_t n = fread(buf, 1, (1 << 16) - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static void test_driver(void) {
    ct_hp_space s;
    CHECK_OK(space_of("{\"x\": [5, 1, 3, 9, 99, 2], \"tag\": [\"a,b\"]}", &s));
    char dir[512];
    snprintf(dir, sizeof dir, "%s/driver", tmpdir);
    ct_hp_search_opts o = {.method = CT_HP_GRID, .direction = CT_HP_MINIMIZE, .metric = "eval_score",
                           .output_dir = dir, .quiet = true};
    script sc = {.interrupt_at = -1};
    ct_hp_results r;
    CHECK_OK(ct_hp_search_run(&s, &o, scripted, &sc, &r));
    CHECK(sc.calls == 6 && r.n_trials == 6, "6 trials, %d calls, %lld results", sc.calls, (long long)r.n_trials);
    CHECK(r.best == 1 && r.trials[1].objective == 1, "minimize: best trial %lld", (long long)r.best);
    if (r.n_trials == 6) {
        CHECK(r.trials[2].failed && r.trials[2].exit_code == 2 && strstr(r.trials[2].message, "x: 3"),
              "the failing trial is recorded: %s", r.trials[2].message ? r.trials[2].message : "(no message)");
        CHECK(r.trials[4].failed && strstr(r.trials[4].message, "the objective eval_score is not finite"),
              "a non-finite objective is a failure: %s", r.trials[4].message ? r.trials[4].message : "(no message)");
        CHECK(!r.trials[5].failed && r.trials[5].objective == 2, "the search went on after failures");
        CHECK(strcmp(r.trials[3].output_dir, "") != 0 && strstr(r.trials[3].output_dir, "/driver/trial-3"),
              "trial directory %s", r.trials[3].output_dir);
    }
    /* The files. */
    char file[700];
    snprintf(file, sizeof file, "%s/search_results.json", dir);
    json_error_t e;
    json_t *j = json_load_file(file, 0, &e);
    CHECK(json_is_object(j), "search_results.json: %s", e.text);
    if (j) {
        CHECK(json_integer_value(json_object_get(j, "best_trial")) == 1 &&
                  json_number_value(json_object_get(j, "best_objective")) == 1 &&
                  strcmp(json_string_value(json_object_get(j, "direction")), "minimize") == 0 &&
                  strcmp(json_string_value(json_object_get(j, "method")), "grid") == 0 &&
                  strcmp(json_string_value(json_object_get(j, "objective")), "eval_score") == 0,
              "search_results.json header");
        json_t *trials = json_object_get(j, "trials");
        CHECK(json_array_size(trials) == 6, "6 trials in the file");
        json_t *t2 = json_array_get(trials, 2);
        CHECK(strcmp(json_string_value(json_object_get(t2, "status")), "failed") == 0 &&
                  json_is_null(json_object_get(t2, "objective")) &&
                  json_integer_value(json_object_get(t2, "exit_code")) == 2,
              "a failed trial in the file");
        CHECK(json_integer_value(json_object_get(json_object_get(json_array_get(trials, 3), "params"), "x")) == 9,
              "params in the file");
        json_decref(j);
    }
    snprintf(file, sizeof file, "%s/search_results.csv", dir);
    char *csv = slurp(file);
    CHECK(csv != NULL, "search_results.csv exists");
    if (csv) {
        int lines = 0;
        for (char *p = csv; *p; p++) lines += *p == '\n';
        CHECK(lines == 7, "CSV: header and 6 rows, got %d lines", lines);
        CHECK(strncmp(csv, "trial,status,eval_score,seconds,exit_code,x,tag,message\r\n", 57) == 0, "CSV header: %.80s",
              csv);
        CHECK(strstr(csv, "\r\n1,complete,1,") != NULL, "CSV row of trial 1");
        CHECK(strstr(csv, ",\"a,b\",\"x: 3, \"\"bad\"\", is refused\"\r\n") != NULL, "CSV quoting: %s", csv);
        free(csv);
    }
    /* The table. */
    FILE *f = tmpfile();
    ct_hp_results_print(&r, &s, f);
    rewind(f);
    char table[4096] = "";
    size_t n = fread(table, 1, sizeof table - 1, f);
    table[n] = '\0';
    fclose(f);
    CHECK(strstr(table, "trial  status    eval_score") && strstr(table, "best trial: 1 (minimize eval_score = 1) of 6 "
                                                                    "trials (2 failed)"),
          "table:\n%s", table);
    ct_hp_results_free(&r);

    /* maximize, and a compute_objective that negates: the best flips. */
    o.direction = CT_HP_MAXIMIZE;
    CHECK_OK(ct_hp_search_run(&s, &o, scripted, &sc, &r));
    CHECK(r.best == 3 && r.trials[3].objective == 9, "maximize: best %lld", (long long)r.best);
    ct_hp_results_free(&r);
    o.compute_objective = negate;
    CHECK_OK(ct_hp_search_run(&s, &o, scripted, &sc, &r));
    CHECK(r.best == 1 && r.trials[1].objective == -1 && strcmp(r.objective_name, "objective") == 0,
          "compute_objective: maximize -x: best %lld", (long long)r.best);
    ct_hp_results_free(&r);
    o.compute_objective = NULL;
    o.direction = CT_HP_MINIMIZE;

    /* n_trials caps the grid. */
    o.n_trials = 2;
    sc.calls = 0;
    CHECK_OK(ct_hp_search_run(&s, &o, scripted, &sc, &r));
    CHECK(r.n_trials == 2 && sc.calls == 2 && r.best == 1, "grid capped at 2 trials");
    ct_hp_results_free(&r);
    o.n_trials = 0;

    /* A metric the trials do not have stops the search at the first complete trial. */
    o.metric = "eval_accuracy";
    sc.calls = 0;
    CHECK_ERR(ct_hp_search_run(&s, &o, scripted, &sc, &r), CT_ERR_CONFIG,
              "the objective metric 'eval_accuracy' is not among the trial's metrics (eval_score, eval_runtime)");
    CHECK(sc.calls == 1 && r.n_trials == 1 && r.best == -1, "stopped after 1 trial (%d)", sc.calls);
    ct_hp_results_free(&r);
    o.metric = "eval_score";

    /* An interruption stops the search and keeps what ran. */
    sc.interrupt_at = 2;
    sc.calls = 0;
    CHECK_ERR(ct_hp_search_run(&s, &o, scripted, &sc, &r), CT_ERR_INTERRUPTED, "stopped by SIGINT");
    CHECK(sc.calls == 3 && r.n_trials == 3 && r.best == 1 && r.trials[2].failed, "interrupted at trial 2");
    ct_hp_results_free(&r);
    sc.interrupt_at = -1;

    /* Options. */
    o.method = CT_HP_RANDOM;
    CHECK_ERR(ct_hp_search_run(&s, &o, scripted, &sc, &r), CT_ERR_INVALID_ARG, "random search needs n_trials > 0");
    ct_hp_results_free(&r);
    o.n_trials = 4;
    o.output_dir = NULL;
    CHECK_ERR(ct_hp_search_run(&s, &o, scripted, &sc, &r), CT_ERR_INVALID_ARG, "no output directory");
    ct_hp_results_free(&r);
    o.output_dir = dir;
    CHECK_OK(ct_hp_search_run(&s, &o, scripted, &sc, &r));
    CHECK(r.n_trials == 4, "random: 4 trials");
    ct_hp_results_free(&r);
    ct_hp_space_free(&s);
}

/* --- the C API with a model ----------------------------------------------------------------------------------- */

enum { DIM = 6, CLASSES = 3, N_TRAIN = 192, N_EVAL = 96 };

static ct_dataset *make_data(int64_t n, ct_rng *rng) {
    return ct_fixture_dataset(
        &(ct_fixture_data){.kind = CT_FIXTURE_RULE, .n = n, .dim = DIM, .classes = CLASSES, .rng = rng});
}

static ct_status build_mlp(int64_t hidden, int64_t max_batch, ct_device dev, ct_model *m) {
    if (hidden <= 0) return ct_error(CT_ERR_CONFIG, "model.hidden: expected a positive size, got %lld", (long long)hidden);
    ct_fixture_mlp o = {.dim = DIM, .classes = CLASSES, .hidden = {hidden}, .device = dev, .max_batch = max_batch,
                        .seed = 11};
    return ct_fixture_mlp_build(&o, m);
}

typedef struct init_log {
    int calls;
    bool saw_lr; /* every call saw the trial's training_args.learning_rate */
} init_log;

static ct_status model_init(void *ctx, const json_t *params, int64_t max_batch, ct_device dev, ct_model *out) {
    init_log *l = ctx;
    l->calls++;
    l->saw_lr &= json_is_number(json_object_get(params, "training_args.learning_rate"));
    return build_mlp(json_integer_value(json_object_get(params, "model.hidden")), max_batch, dev, out);
}

static ct_status make_model(void *ctx, int64_t max_batch, ct_device dev, ct_model *out) {
    (*(int *)ctx)++;
    return build_mlp(12, max_batch, dev, out);
}

static void base_args(ct_training_args *a, const char *dir) {
    ct_training_args_default(a);
    a->num_train_epochs = 2;
    a->per_device_train_batch_size = 32;
    a->per_device_eval_batch_size = 48;
    a->save_strategy = CT_INTERVAL_NO;
    a->eval_bootstrap_resamples = 0;
    a->disable_tqdm = true;
    a->logging_steps = 100;
    snprintf(a->output_dir, sizeof a->output_dir, "%s", dir);
}

static void test_c_api(void) {
    ct_rng rng;
    ct_rng_init(&rng, ct_test_seed, 0, CT_RNG_USER);
    ct_dataset *train = make_data(N_TRAIN, &rng), *eval = make_data(N_EVAL, &rng);
    json_t *metrics = parse("[\"accuracy\"]");
    ct_trainer_setup setup = {.train_dataset = train, .n_eval = 1, .eval_datasets = {eval}, .metrics = metrics};
    char dir[512];
    snprintf(dir, sizeof dir, "%s/capi", tmpdir);
    ct_training_args a;
    base_args(&a, dir);
    ct_hp_space s;
    /* hidden 0 makes model_init fail; two equal learning rates give two equal trials. */
    CHECK_OK(space_of("{\"model.hidden\": [0, 8, 16], \"training_args.learning_rate\": [0.03, 0.03, 0.003]}", &s));
    init_log l = {.saw_lr = true};
    ct_hp_search_opts o = {.method = CT_HP_GRID, .direction = CT_HP_MINIMIZE, .quiet = true, .model_init = model_init,
                           .model_init_ctx = &l};
    ct_hp_results r;
    CHECK_OK(ct_trainer_hyperparameter_search(&setup, &a, &s, &o, &r));
    CHECK(r.n_trials == 9 && l.calls == 9 && l.saw_lr, "9 trials, model_init called %d times", l.calls);
    CHECK(strcmp(r.objective_name, "eval_loss") == 0, "default objective %s", r.objective_name);
    int64_t argmin = -1;
    for (int64_t i = 0; i < r.n_trials; i++) {
        const ct_hp_trial *t = &r.trials[i];
        bool zero = json_integer_value(json_object_get(t->params, "model.hidden")) == 0;
        CHECK(t->failed == zero, "trial %lld: failed %d: %s", (long long)i, t->failed, t->message ? t->message : "");
        if (zero && t->message)
            CHECK(strstr(t->message, "model_init: model.hidden: expected a positive size, got 0"), "message: %s",
                  t->message);
        if (t->failed) continue;
        CHECK(json_is_number(json_object_get(t->metrics, "eval_loss")) &&
                  json_is_number(json_object_get(t->metrics, "eval_accuracy")) &&
                  json_is_number(json_object_get(t->metrics, "train_loss")),
              "trial %lld: train and eval metrics", (long long)i);
        if (argmin < 0 || t->objective < r.trials[argmin].objective) argmin = i;
        char file[1024];
        snprintf(file, sizeof file, "%s/model.h5", t->output_dir);
        CHECK(file_exists(file), "%s", file);
        snprintf(file, sizeof file, "%s/all_results.json", t->output_dir);
        CHECK(file_exists(file), "%s", file);
    }
    CHECK(r.best == argmin && argmin >= 0, "minimize: best %lld, argmin %lld", (long long)r.best, (long long)argmin);
    /* Trials 3 and 4 (hidden 8, lr 0.03 twice): fresh models, same seed, the same numbers. */
    if (r.n_trials == 9) {
        CHECK(!r.trials[3].failed && r.trials[3].objective == r.trials[4].objective &&
                  json_equal(json_object_get(r.trials[3].metrics, "eval_accuracy"),
                             json_object_get(r.trials[4].metrics, "eval_accuracy")),
              "equal trials differ: %.17g vs %.17g (a model reused?)", r.trials[3].objective, r.trials[4].objective);
        CHECK(r.trials[3].objective != r.trials[5].objective, "the learning rate changes nothing");
    }
    char file[700];
    snprintf(file, sizeof file, "%s/search_results.json", dir);
    CHECK(file_exists(file), "%s", file);
    ct_hp_results_free(&r);

    /* maximize eval_accuracy: the best is the first of the most accurate. */
    o.direction = CT_HP_MAXIMIZE;
    o.metric = "eval_accuracy";
    snprintf(dir, sizeof dir, "%s/capi_max", tmpdir);
    o.output_dir = dir;
    CHECK_OK(ct_trainer_hyperparameter_search(&setup, &a, &s, &o, &r));
    int64_t argmax = -1;
    for (int64_t i = 0; i < r.n_trials; i++)
        if (!r.trials[i].failed && (argmax < 0 || r.trials[i].objective > r.trials[argmax].objective)) argmax = i;
    CHECK(r.best == argmax && argmax >= 0, "maximize: best %lld, argmax %lld", (long long)r.best, (long long)argmax);
    if (argmax >= 0)
        CHECK(r.trials[argmax].objective == json_real_value(json_object_get(r.trials[argmax].metrics, "eval_accuracy")),
              "objective = eval_accuracy");
    ct_hp_results_free(&r);
    ct_hp_space_free(&s);

    /* setup->make_model as the model_init: training arguments only. */
    int made = 0;
    setup.make_model = make_model;
    setup.make_model_ctx = &made;
    CHECK_OK(space_of("{\"training_args.learning_rate\": {\"type\": \"loguniform\", \"low\": 1e-3, \"high\": 0.1},"
                      " \"training_args.lr_scheduler_type\": [\"linear\", \"constant\"]}",
                      &s));
    ct_hp_search_opts o2 = {.method = CT_HP_RANDOM, .n_trials = 2, .direction = CT_HP_MINIMIZE, .quiet = true,
                            .seed = ct_test_seed};
    snprintf(dir, sizeof dir, "%s/capi_make_model", tmpdir);
    o2.output_dir = dir;
    CHECK_OK(ct_trainer_hyperparameter_search(&setup, &a, &s, &o2, &r));
    CHECK(r.n_trials == 2 && made == 2 && r.best >= 0 && !r.trials[0].failed && !r.trials[1].failed,
          "make_model: %d models, best %lld", made, (long long)r.best);
    ct_hp_results_free(&r);
    ct_hp_space_free(&s);

    /* Up-front errors: nothing runs. */
    made = 0;
    CHECK_OK(space_of("{\"training_args.learnin_rate\": [0.1]}", &s));
    CHECK_ERR(ct_trainer_hyperparameter_search(&setup, &a, &s, &o2, &r), CT_ERR_CONFIG,
              "training_args.learnin_rate: unknown key 'learnin_rate', did you mean 'learning_rate'?");
    ct_hp_results_free(&r);
    ct_hp_space_free(&s);
    CHECK_OK(space_of("{\"training_args.output_dir\": [\"x\"]}", &s));
    CHECK_ERR(ct_trainer_hyperparameter_search(&setup, &a, &s, &o2, &r), CT_ERR_CONFIG,
              "training_args.output_dir: the search sets it");
    ct_hp_results_free(&r);
    ct_hp_space_free(&s);
    CHECK_OK(space_of("{\"model.hidden\": [4]}", &s));
    CHECK_ERR(ct_trainer_hyperparameter_search(&setup, &a, &s, &o2, &r), CT_ERR_CONFIG,
              "model.hidden is not a training argument", "without a model_init");
    ct_hp_results_free(&r);
    ct_hp_space_free(&s);
    CHECK_OK(space_of("{\"training_args.seed\": [1]}", &s));
    setup.n_eval = 0;
    CHECK_ERR(ct_trainer_hyperparameter_search(&setup, &a, &s, &o2, &r), CT_ERR_INVALID_ARG,
              "the objective 'eval_loss' needs an evaluation set");
    ct_hp_results_free(&r);
    setup.n_eval = 1;
    setup.make_model = NULL;
    CHECK_ERR(ct_trainer_hyperparameter_search(&setup, &a, &s, &o2, &r), CT_ERR_INVALID_ARG, "no model_init");
    ct_hp_results_free(&r);
    CHECK(made == 0, "no model built by a refused search");
    /* An invalid value of a training argument fails its trial only. */
    ct_hp_space_free(&s);
    CHECK_OK(space_of("{\"training_args.per_device_train_batch_size\": [0, 16]}", &s));
    setup.make_model = make_model;
    o2.method = CT_HP_GRID;
    CHECK_OK(ct_trainer_hyperparameter_search(&setup, &a, &s, &o2, &r));
    CHECK(r.n_trials == 2 && r.trials[0].failed && !r.trials[1].failed && r.best == 1 && made == 1,
          "batch size 0 fails its trial (%s), the next runs", r.n_trials ? r.trials[0].message : "");
    ct_hp_results_free(&r);
    ct_hp_space_free(&s);

    ct_training_args_free(&a);
    json_decref(metrics);
    ct_dataset_free(train);
    ct_dataset_free(eval);
}

/* --- run configs ------------------------------------------------------------------------------------------------- */

static const char *CONFIG =
    "{\n"
    "  \"model\": {\"type\": \"sequential\", \"layers\": [{\"type\": \"flatten\"},\n"
    "            {\"type\": \"linear\", \"out_features\": 8}, {\"type\": \"relu\"},\n"
    "            {\"type\": \"linear\", \"out_features\": 3}]},\n"
    "  \"data\": {\"train\": {\"type\": \"idx\", \"images\": \"img.gz\", \"labels\": \"sub/lab.gz\"},\n"
    "           \"eval\": {\"a\": {\"type\": \"idx\", \"images\": \"/abs/e.gz\", \"labels\": \"l.gz\"},\n"
    "                    \"h\": {\"type\": \"hdf5\", \"path\": \"d.h5\", \"labels\": \"y\"}}},\n"
    "  \"metrics\": [\"accuracy\", {\"type\": \"top_k_accuracy\", \"k\": 2}],\n"
    "  \"loss\": {\"type\": \"cross_entropy\"},\n"
    "  \"callbacks\": [{\"type\": \"jsonl\", \"path\": \"x.jsonl\"}],\n"
    "  \"training_args\": {\"learning_rate\": 0.01, \"output_dir\": \"out\"}\n"
    "}\n";

static ct_status check_keys(const ct_run_config *c, const char *space) {
    ct_hp_space s;
    CT_TRY(space_of(space, &s));
    ct_status st = ct_hp_check_config_keys(&s, "space.json", c);
    ct_hp_space_free(&s);
    return st;
}

static void test_run_config(void) {
    ct_run_config c;
    CHECK_OK(ct_run_config_parse(CONFIG, "cfg.json", &c));
    /* Keys the readers know, with values good and bad: nothing to say before the trials. */
    CHECK_OK(check_keys(&c, "{\"training_args.learning_rate\": {\"type\": \"loguniform\", \"low\": 1e-4, \"high\": 1},"
                            " \"training_args.lr_scheduler_type\": [\"linear\", \"bogus\"],"
                            " \"model.layers[1].out_features\": {\"type\": \"int\", \"low\": -4, \"high\": 64},"
                            " \"metrics[1].k\": [1, 2], \"loss.label_smoothing\": [0, 2],"
                            " \"data.train.limit\": [10, 20], \"data.eval.a.limit\": [5],"
                            " \"callbacks[0].path\": [\"y.jsonl\"], \"model.layers[3]\": [{\"type\": \"linear\", "
                            "\"out_features\": 3}], \"training_args.seed\": [\"not a number\"]}"));
    struct {
        const char *space, *msg;
    } bad[] = {
        {"{\"training_args.learnin_rate\": [0.1]}",
         "space.json: training_args.learnin_rate: unknown key 'learnin_rate', did you mean 'learning_rate'?"},
        {"{\"training_args.output_dir\": [\"x\"]}", "space.json: training_args.output_dir: the search sets it"},
        {"{\"model.layers[1].out_feature\": [4]}",
         "space.json: model.layers[1].out_feature: model.layers[1]: unknown key 'out_feature', did you mean "
         "'out_features'?"},
        {"{\"model.layers[9].out_features\": [4]}", "space.json: model.layers[9].out_features: "},
        {"{\"model.hidden.x\": [4]}", "space.json: model.hidden.x: model: unknown key 'hidden'"},
        {"{\"modle.layers\": [[]]}", "space.json: modle.layers: unknown section 'modle', did you mean 'model'?"},
        {"{\"metrics[1].kk\": [3]}", "space.json: metrics[1].kk: metrics[1]: unknown key 'kk'"},
        {"{\"loss.label_smothing\": [0.1]}",
         "space.json: loss.label_smothing: loss: unknown key 'label_smothing', did you mean 'label_smoothing'?"},
        {"{\"data.train.limt\": [3]}", "space.json: data.train.limt: data.train: unknown key 'limt', did you mean 'limit'?"},
        {"{\"data.eval.a.limt\": [3]}", "space.json: data.eval.a.limt: data.eval.a: unknown key 'limt'"},
        {"{\"data.tset.limit\": [3]}", "space.json: data.tset.limit: data: unknown key 'tset', did you mean 'test'?"},
        {"{\"callbacks[0].pth\": [\"a\"]}", "space.json: callbacks[0].pth: callbacks[0]: unknown key 'pth'"},
        {"{\"training_args.seed\": [1], \"model.layers[1].bias_\": [true]}",
         "space.json: model.layers[1].bias_: model.layers[1]: unknown key 'bias_'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ct_status st = check_keys(&c, bad[i].space);
        CHECK(st == CT_ERR_CONFIG && strstr(ct_last_error(), bad[i].msg), "%s: %s: got '%s', want '%s'", bad[i].space,
              ct_status_str(st), ct_last_error(), bad[i].msg);
    }
    ct_run_config_free(&c);

    /* The best config: the trial's values in, relative dataset files made absolute (not an hdf5
     * file's "labels", which is inside the file), the rest as it was; it loads again. */
    char sub[512], file[600], best[600], real[4096];
    snprintf(sub, sizeof sub, "%s/cfgdir", tmpdir);
    mkdir(sub, 0755);
    snprintf(file, sizeof file, "%s/run.json", sub);
    FILE *f = fopen(file, "w");
    fputs(CONFIG, f);
    fclose(f);
    if (!realpath(sub, real)) abort();
    CHECK_OK(ct_run_config_load(file, &c));
    json_t *params = parse("{\"model.layers[1].out_features\": 16, \"training_args.learning_rate\": 0.5,"
                           " \"data.train.limit\": 7}");
    snprintf(best, sizeof best, "%s/best_config.json", tmpdir);
    CHECK_OK(ct_hp_write_best_config(&c, params, best));
    ct_run_config b;
    CHECK_OK(ct_run_config_load(best, &b));
    if (b.root) {
        json_t *data = json_object_get(b.root, "data");
        json_t *tr = json_object_get(data, "train"), *ea = json_object_get(json_object_get(data, "eval"), "a"),
               *eh = json_object_get(json_object_get(data, "eval"), "h");
        char want[8192];
        snprintf(want, sizeof want, "%s/img.gz", real);
        CHECK(strcmp(json_string_value(json_object_get(tr, "images")), want) == 0, "images %s, want %s",
              json_string_value(json_object_get(tr, "images")), want);
        snprintf(want, sizeof want, "%s/sub/lab.gz", real);
        CHECK(strcmp(json_string_value(json_object_get(tr, "labels")), want) == 0, "labels %s",
              json_string_value(json_object_get(tr, "labels")));
        CHECK(json_integer_value(json_object_get(tr, "limit")) == 7, "limit applied");
        CHECK(strcmp(json_string_value(json_object_get(ea, "images")), "/abs/e.gz") == 0, "absolute paths stay");
        snprintf(want, sizeof want, "%s/d.h5", real);
        CHECK(strcmp(json_string_value(json_object_get(eh, "path")), want) == 0 &&
                  strcmp(json_string_value(json_object_get(eh, "labels")), "y") == 0,
              "hdf5: path %s, labels %s", json_string_value(json_object_get(eh, "path")),
              json_string_value(json_object_get(eh, "labels")));
        json_t *layer = json_array_get(json_object_get(json_object_get(b.root, "model"), "layers"), 1);
        CHECK(json_integer_value(json_object_get(layer, "out_features")) == 16, "model value applied");
        json_t *ta = json_object_get(b.root, "training_args");
        CHECK(json_real_value(json_object_get(ta, "learning_rate")) == 0.5 &&
                  strcmp(json_string_value(json_object_get(ta, "output_dir")), "out") == 0,
              "training_args applied, output_dir kept");
        CHECK(json_equal(json_object_get(b.root, "callbacks"), json_object_get(c.root, "callbacks")), "callbacks kept");
        const char *first = json_object_iter_key(json_object_iter(b.root));
        CHECK(first && strcmp(first, "model") == 0, "sections in the config's order");
    }
    ct_run_config_free(&b);
    /* ct_hp_assignment round-trips values through --set. */
    char *as = ct_hp_assignment("training_args.learning_rate", json_object_get(params, "training_args.learning_rate"));
    CHECK(as && strcmp(as, "training_args.learning_rate=0.5") == 0, "assignment %s", as ? as : "NULL");
    free(as);
    json_t *odd = json_real(0.1 + 0.2);
    as = ct_hp_assignment("training_args.learning_rate", odd);
    CHECK_OK(ct_run_config_set(&c, as));
    CHECK(json_real_value(json_object_get(ct_run_config_section(&c, "training_args"), "learning_rate")) == 0.1 + 0.2,
          "a real survives --set exactly: %s", as);
    free(as);
    json_decref(odd);
    json_decref(params);
    ct_run_config_free(&c);
}

int main(void) {
    ct_test_begin("test_hp_search");
    if (!(tmpdir = ct_fixture_tmp_root("ct_hp_search"))) return 1;
    test_space_reading();
    test_random_sampler();
    test_grid();
    test_driver();
    test_c_api();
    test_run_config();
    if (ct_test_failed == 0) ct_fixture_cleanup(); /* a failed run's files stay for a look */
    return ct_test_finish();
}
