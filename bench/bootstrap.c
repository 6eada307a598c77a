/* Bootstrap throughput: the confidence intervals of accuracy and macro-F1 over N samples and C
 * classes with R resamples (issue 5: N 10000, C 10, R 100000), through the public metric API the
 * Trainer uses: metrics from their JSON specs, fed batch by batch, then ct_metric_uncertainty.
 * Both metrics come from the confusion matrix and resample its C x C cells (one multinomial draw of N
 * per resample, O(R x C^2)); accuracy is bootstrapped as micro-F1 ({"type": "f1", "average":
 * "micro"}), which equals accuracy for single-label data, because the "accuracy" metric uses its
 * closed form (Wilson interval, also reported) and resamples nothing. Also timed: the bootstrap of
 * accuracy's own sufficient statistic, the 2-cell table (correct, wrong), through
 * ct_bootstrap_cells: one binomial draw per resample, the same law as resampling the samples one by
 * one. bench/bootstrap.py runs this and lm-evaluation-harness's way (Python resampling of the
 * per-sample lists) side by side.
 *
 * Usage: bench_bootstrap [N] [CLASSES] [RESAMPLES] [SEED] [DATA]. DATA: raw little-endian int64,
 * N labels then N predictions (bench/bootstrap.py writes it so both sides see the same samples);
 * without it the samples are drawn here (70% correct). Threads: OMP_NUM_THREADS. Prints one JSON
 * line. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/rng.h"
#include "eval/metric.h"
#include "eval/uncertainty.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int fail(const char *what) {
    fprintf(stderr, "bench_bootstrap: %s: %s\n", what, ct_last_error());
    return 1;
}

/* Reads N labels and N predictions, or draws them (label uniform, prediction right with p 0.7). */
static int load(const char *path, int64_t n, int64_t c, uint64_t seed, int64_t *labels, int64_t *preds) {
    if (path) {
        FILE *f = fopen(path, "rb");
        if (!f || fread(labels, sizeof *labels, (size_t)n, f) != (size_t)n ||
            fread(preds, sizeof *preds, (size_t)n, f) != (size_t)n) {
            fprintf(stderr, "bench_bootstrap: %s: cannot read %lld labels and predictions\n", path, (long long)n);
            if (f) fclose(f);
            return 1;
        }
        fclose(f);
        for (int64_t i = 0; i < n; i++)
            if (labels[i] < 0 || labels[i] >= c || preds[i] < 0 || preds[i] >= c) {
                fprintf(stderr, "bench_bootstrap: %s: sample %lld is outside [0, %lld)\n", path, (long long)i,
                        (long long)c);
                return 1;
            }
        return 0;
    }
    ct_rng r;
    ct_rng_init(&r, seed, 0, CT_RNG_USER);
    for (int64_t i = 0; i < n; i++) {
        labels[i] = (int64_t)ct_rng_below(&r, (uint64_t)c);
        preds[i] = ct_rng_uniform(&r) < 0.7 ? labels[i] : (int64_t)ct_rng_below(&r, (uint64_t)c);
    }
    return 0;
}

/* Accuracy from the table (correct, wrong). */
static void accuracy_stat(const int64_t *cells, int64_t k, const void *ctx, void *scratch, double *values) {
    values[0] = (double)cells[0] / (double)(cells[0] + cells[1]);
}

typedef struct timed {
    const char *spec, *key;
    ct_metric *m;
    double update_s, bootstrap_s;
    json_t *out;
} timed;

int main(int argc, char **argv) {
    int64_t n = argc > 1 ? atoll(argv[1]) : 10000, c = argc > 2 ? atoll(argv[2]) : 10;
    int64_t resamples = argc > 3 ? atoll(argv[3]) : 100000;
    uint64_t seed = argc > 4 ? strtoull(argv[4], NULL, 10) : 1234;
    const char *data = argc > 5 ? argv[5] : NULL;
    if (n < 1 || c < 2 || resamples < 0) {
        fprintf(stderr, "usage: bench_bootstrap [N >= 1] [CLASSES >= 2] [RESAMPLES >= 0] [SEED] [DATA]\n");
        return 2;
    }
    int64_t *labels = malloc((size_t)n * sizeof *labels), *preds = malloc((size_t)n * sizeof *preds);
    float *logits = calloc((size_t)(n * c), sizeof *logits);
    if (!labels || !preds || !logits) return fprintf(stderr, "bench_bootstrap: out of memory\n"), 1;
    if (load(data, n, c, seed, labels, preds)) return 1;
    for (int64_t i = 0; i < n; i++) logits[i * c + preds[i]] = 1.0f; /* argmax = the prediction */

    timed runs[] = {{.spec = "{\"type\": \"f1\", \"average\": \"micro\"}", .key = "f1_micro"},
                    {.spec = "{\"type\": \"f1\", \"average\": \"macro\"}", .key = "f1_macro"},
                    {.spec = "\"accuracy\"", .key = "accuracy"}};
    int n_runs = (int)(sizeof runs / sizeof runs[0]);
    ct_uncertainty_config cfg = {.resamples = resamples, .confidence = 0.95, .seed = seed};
    const int64_t batch = 256; /* as an evaluation loop would feed them */
    for (int r = 0; r < n_runs; r++) {
        json_t *spec = json_loads(runs[r].spec, JSON_DECODE_ANY, NULL);
        ct_status s = ct_metric_from_json(spec, "metric", &runs[r].m);
        json_decref(spec);
        if (s != CT_OK) return fail(runs[r].spec);
        double t0 = now();
        for (int64_t start = 0; start < n; start += batch) {
            int64_t len = n - start < batch ? n - start : batch, os[2] = {len, c};
            ct_tensor o = ct_tensor_view(logits + start * c, CT_F32, CT_CPU, 2, os);
            ct_tensor l = ct_tensor_view(labels + start, CT_I64, CT_CPU, 1, &len);
            if (ct_metric_update(runs[r].m, &(ct_eval_batch){.outputs = &o, .labels = &l}) != CT_OK)
                return fail("update");
        }
        double t1 = now();
        runs[r].out = json_object();
        if (ct_metric_compute(runs[r].m, "", runs[r].out) != CT_OK ||
            ct_metric_uncertainty(runs[r].m, &cfg, "", runs[r].out) != CT_OK)
            return fail(runs[r].key);
        double t2 = now();
        runs[r].update_s = t1 - t0;
        runs[r].bootstrap_s = t2 - t1;
    }

    /* accuracy's 2-cell table */
    int64_t cells[2] = {0, 0};
    for (int64_t i = 0; i < n; i++) cells[preds[i] == labels[i] ? 0 : 1]++;
    double *acc = malloc((size_t)(resamples ? resamples : 1) * sizeof *acc), lo = 0, hi = 0;
    double t0 = now();
    if (!acc || (resamples > 0 && (ct_bootstrap_cells(&cfg, cells, 2, accuracy_stat, NULL, 0, 1, acc) != CT_OK ||
                                   ct_bootstrap_interval(acc, resamples, cfg.confidence, &lo, &hi) != CT_OK)))
        return fail("accuracy cells");
    double se = resamples > 0 ? ct_bootstrap_stderr(acc, resamples) : 0, cells_s = now() - t0;
    free(acc);

    printf("{\"bench\": \"bootstrap\", \"n\": %lld, \"classes\": %lld, \"resamples\": %lld, \"threads\": %d",
           (long long)n, (long long)c, (long long)resamples, omp_get_max_threads());
    printf(", \"accuracy_cells\": {\"seconds\": %.6f, \"values\": {\"accuracy\": %.10g, \"accuracy_stderr\": %.10g, "
           "\"accuracy_ci_low\": %.10g, \"accuracy_ci_high\": %.10g}}",
           cells_s, (double)cells[0] / (double)n, se, lo, hi);
    for (int r = 0; r < n_runs; r++) {
        char *values = json_dumps(runs[r].out, JSON_REAL_PRECISION(10) | JSON_SORT_KEYS);
        printf(", \"%s\": {\"update_seconds\": %.6f, \"seconds\": %.6f, \"values\": %s}", runs[r].key, runs[r].update_s,
               runs[r].bootstrap_s, values);
        free(values);
        json_decref(runs[r].out);
        ct_metric_free(runs[r].m);
    }
    printf("}\n");
    free(labels);
    free(preds);
    free(logits);
    return 0;
}
