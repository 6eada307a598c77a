/* Training curves and the log history they read (report/plot.h, report/plot_impl.h,
 * report/log_history.h), with fresh random ranges and histories each run:
 *   - nice tick steps are 1, 2 or 5 x 10^k, the smallest such that leaves at most `target` intervals;
 *   - linear axes contain their data, ticks are evenly spaced inside, labels read back as the tick
 *     values and are all different; step axes tick at whole steps; log axes tick at 1, 2, 5 x 10^k;
 *   - evaluation keys split into set and metric (longest set name first; bookkeeping, intervals and
 *     memory reports are no metrics), set names come from the history;
 *   - trainer_state.json files: Python's NaN / Infinity read as null (not inside strings), malformed
 *     files and fields fail with file:line:column or the field, a missing file names its path;
 *   - the figure's data: panels in reading order, every finite value once, the rest skipped;
 *   - the figure itself: nothing to plot is an error, one point or a history full of NaN draws a PNG
 *     and an SVG, an unwritable path names the file. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "report/log_history.h"
#include "report/plot.h"
#include "report/plot_impl.h"
#include "testlib.h"

static ct_rng rng;
static char tmpdir[256];

static double uniform(double lo, double hi) { return lo + (hi - lo) * ct_rng_uniform(&rng); }

/* --- axes ---------------------------------------------------------------------------------------- */

static bool is_nice(double step) {
    double m = step / pow(10, floor(log10(step) + 1e-12));
    return fabs(m - 1) < 1e-9 || fabs(m - 2) < 1e-9 || fabs(m - 5) < 1e-9 || fabs(m - 10) < 1e-9;
}

/* The nice step just below `step` (5 -> 2 -> 1 -> 0.5 ...). */
static double smaller_nice(double step) {
    double e = pow(10, floor(log10(step) + 1e-12));
    double m = step / e;
    return m > 4.5 ? 2 * e : m > 1.5 ? e : 0.5 * e;
}

static void nice_steps(void) {
    for (int trial = 0; trial < 2000; trial++) {
        double scale = pow(10, uniform(-9, 9));
        double lo = uniform(-1, 1) * scale, span = uniform(1e-3, 10) * scale, hi = lo + span;
        int target = 2 + (int)ct_rng_below(&rng, 9);
        double step = ct_plot_nice_step(lo, hi, target);
        CHECK(is_nice(step), "step %.17g of [%g, %g] is not 1, 2 or 5 x 10^k", step, lo, hi);
        CHECK(span / step <= target * (1 + 1e-9), "[%g, %g] / %g: more than %d intervals", lo, hi, step, target);
        CHECK(span / smaller_nice(step) > target * (1 - 1e-9), "[%g, %g]: step %g is not the smallest (target %d)", lo,
              hi, step, target);
    }
}

/* Labels read back as their ticks ("20k" as 20000) and no two are alike. */
static void check_labels(const ct_plot_axis *a, bool thousands, const char *what) {
    char labels[CT_PLOT_MAX_TICKS][64];
    for (int i = 0; i < a->n_ticks; i++) {
        ct_plot_format_tick(a, a->ticks[i], thousands, labels[i], sizeof labels[i]);
        char *end;
        double v = strtod(labels[i], &end);
        if (*end == 'k') v *= 1000, end++;
        double tol = a->log ? 1e-9 * a->ticks[i] : 1e-6 * a->step;
        CHECK(*end == '\0' && fabs(v - a->ticks[i]) <= tol, "%s: label '%s' of tick %.17g", what, labels[i], a->ticks[i]);
        for (int j = 0; j < i; j++)
            CHECK(strcmp(labels[i], labels[j]) != 0, "%s: ticks %.17g and %.17g both read '%s'", what, a->ticks[j],
                  a->ticks[i], labels[i]);
    }
}

static void linear_axes(void) {
    for (int trial = 0; trial < 1000; trial++) {
        double scale = pow(10, uniform(-8, 8));
        double lo = uniform(-1, 1) * scale, hi = lo + (trial % 10 == 0 ? 0 : uniform(1e-3, 5) * scale);
        ct_plot_axis a;
        ct_plot_axis_linear(lo, hi, 0.05, 6, &a);
        char what[128];
        snprintf(what, sizeof what, "linear axis over [%.6g, %.6g]", lo, hi);
        CHECK(a.lo <= lo && a.hi >= hi && a.lo < a.hi, "%s: range [%g, %g]", what, a.lo, a.hi);
        CHECK(a.n_ticks >= 2, "%s: %d ticks", what, a.n_ticks);
        for (int i = 0; i < a.n_ticks; i++) {
            CHECK(a.ticks[i] >= a.lo - 1e-9 * a.step && a.ticks[i] <= a.hi + 1e-9 * a.step, "%s: tick %g outside", what,
                  a.ticks[i]);
            if (i) CHECK(fabs(a.ticks[i] - a.ticks[i - 1] - a.step) <= 1e-6 * a.step, "%s: uneven ticks", what);
        }
        check_labels(&a, false, what);
    }
    /* steps: whole numbers, "k" for thousands */
    for (int trial = 0; trial < 300; trial++) {
        double hi = trial < 100 ? (double)(1 + ct_rng_below(&rng, 9)) : floor(pow(10, uniform(1, 7)));
        ct_plot_axis a;
        ct_plot_axis_steps(0, hi, 0.02, 8, &a);
        char what[64];
        snprintf(what, sizeof what, "step axis up to %.0f", hi);
        for (int i = 0; i < a.n_ticks; i++) CHECK(a.ticks[i] == floor(a.ticks[i]), "%s: tick %g", what, a.ticks[i]);
        CHECK(a.n_ticks >= 2 && a.ticks[0] == 0, "%s: %d ticks from %g", what, a.n_ticks, a.ticks[0]);
        check_labels(&a, true, what);
    }
    /* the labels a reader expects */
    struct {
        double lo, hi, v;
        bool thousands;
        const char *want;
    } cases[] = {{0, 2.2, 1.5, false, "1.5"},        {0, 0.0029, 0.0025, false, "0.0025"},
                 {0, 2.9e-4, 2.5e-4, false, "2.5e-4"}, {0, 1e5, 20000, true, "20k"},
                 {0, 1e5, 20000, false, "20000"},      {0, 3.1e6, 2e6, false, "2e6"},
                 {-1.1, 1.1, -0.5, false, "-0.5"},     {-1.1, 1.1, 0, false, "0"},
                 {0, 64, 60, true, "60"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ct_plot_axis a;
        ct_plot_axis_linear(cases[i].lo, cases[i].hi, 0, 6, &a);
        char label[64];
        ct_plot_format_tick(&a, cases[i].v, cases[i].thousands, label, sizeof label);
        CHECK(strcmp(label, cases[i].want) == 0, "tick %g on [%g, %g] (step %g) reads '%s', not '%s'", cases[i].v,
              cases[i].lo, cases[i].hi, a.step, label, cases[i].want);
    }
}

static void log_axes(void) {
    for (int trial = 0; trial < 500; trial++) {
        double lo = pow(10, uniform(-8, 4)), hi = lo * pow(10, uniform(1, 9));
        ct_plot_axis a;
        ct_plot_axis_log(lo, hi, &a);
        char what[96];
        snprintf(what, sizeof what, "log axis over [%g, %g]", lo, hi);
        CHECK(a.log && a.lo <= log10(lo) && a.hi >= log10(hi), "%s: range [%g, %g]", what, a.lo, a.hi);
        CHECK(a.n_ticks >= 2, "%s: %d ticks", what, a.n_ticks);
        for (int i = 0; i < a.n_ticks; i++) {
            CHECK(a.ticks[i] > 0 && is_nice(a.ticks[i]), "%s: tick %g", what, a.ticks[i]);
            CHECK(log10(a.ticks[i]) >= a.lo - 1e-9 && log10(a.ticks[i]) <= a.hi + 1e-9, "%s: tick %g outside", what,
                  a.ticks[i]);
            if (i) CHECK(a.ticks[i] > a.ticks[i - 1], "%s: ticks not increasing", what);
        }
        check_labels(&a, false, what);
    }
}

/* --- log history ----------------------------------------------------------------------------------- */

static void eval_keys(void) {
    ct_log_eval_sets sets = {.n = 4};
    snprintf(sets.name[0], CT_LOG_NAME_MAX, "small");
    snprintf(sets.name[1], CT_LOG_NAME_MAX, "a");
    snprintf(sets.name[2], CT_LOG_NAME_MAX, "a_b");
    snprintf(sets.name[3], CT_LOG_NAME_MAX, "other");
    struct {
        const char *key;
        bool metric;
        int set;
        const char *name;
    } cases[] = {{"eval_small_top_3_accuracy", true, 0, "top_3_accuracy"},
                 {"eval_a_b_loss", true, 2, "loss"},
                 {"eval_a_x", true, 1, "x"},
                 {"eval_accuracy", true, -1, "accuracy"},
                 {"eval_loss", true, -1, "loss"},
                 {"eval_other_perplexity", true, 3, "perplexity"},
                 {"eval_small", true, -1, "small"}, /* no metric after the set name: a metric "small" */
                 {"eval_loss_ci_low", false, 0, NULL},
                 {"eval_small_accuracy_ci_high", false, 0, NULL},
                 {"eval_small_accuracy_stderr", false, 0, NULL},
                 {"eval_runtime", false, 0, NULL},
                 {"eval_small_samples_per_second", false, 0, NULL},
                 {"eval_steps_per_second", false, 0, NULL},
                 {"eval_mem_cpu_alloc_delta", false, 0, NULL},
                 {"eval_small_mem_gpu_peaked_delta", false, 0, NULL},
                 {"loss", false, 0, NULL},
                 {"train_loss", false, 0, NULL},
                 {"eval_", false, 0, NULL}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int set = 99;
        const char *metric = NULL;
        bool is = ct_log_eval_key(cases[i].key, &sets, &set, &metric);
        CHECK(is == cases[i].metric, "'%s': metric %d, expected %d", cases[i].key, is, cases[i].metric);
        if (is && cases[i].metric)
            CHECK(set == cases[i].set && strcmp(metric, cases[i].name) == 0, "'%s' -> set %d metric '%s', not %d '%s'",
                  cases[i].key, set, metric, cases[i].set, cases[i].name);
    }

    /* set names from a history: each named set's own entry has eval_<name>_loss and no eval_loss */
    json_t *h = json_loads("[{\"loss\": 1, \"step\": 1}, {\"eval_small_loss\": 1, \"eval_small_accuracy\": 0.5},"
                           " {\"eval_other_loss\": 2}, {\"eval_small_loss\": 0.5}]",
                           0, NULL);
    ct_log_eval_sets found;
    ct_log_eval_sets_find(h, &found);
    CHECK(found.n == 2 && strcmp(found.name[0], "small") == 0 && strcmp(found.name[1], "other") == 0,
          "sets: %d (%s, %s)", found.n, found.name[0], found.name[1]);
    json_decref(h);
    h = json_loads("[{\"eval_loss\": 1, \"eval_nll_loss\": 2, \"step\": 3}]", 0, NULL);
    ct_log_eval_sets_find(h, &found);
    CHECK(found.n == 0, "eval_nll_loss next to eval_loss is a metric, not a set (found %d sets)", found.n);
    json_decref(h);

    char name[64];
    ct_log_display_name("top_3_accuracy", name, sizeof name);
    CHECK(strcmp(name, "Top 3 Accuracy") == 0, "display name '%s'", name);
    ct_log_display_name("f1_MACRO", name, sizeof name);
    CHECK(strcmp(name, "F1 Macro") == 0, "display name '%s'", name); /* Python's str.capitalize */
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    CHECK(f != NULL, "cannot write %s", path);
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

static void history_files(void) {
    char path[512];
    json_t *h = NULL;
    snprintf(path, sizeof path, "%s/hf_state.json", tmpdir);
    /* what Python's json.dumps writes for float('nan') and float('inf') */
    write_file(path, "{\"global_step\": 3, \"log_history\": [\n"
                     "  {\"loss\": NaN, \"step\": 1, \"note\": \"NaN, Infinity and \\\"-Infinity\\\" stay text\"},\n"
                     "  {\"loss\": 1.5, \"grad_norm\": Infinity, \"learning_rate\": -Infinity, \"step\": 2},\n"
                     "  {\"NaN\": 1, \"step\": 3}]}\n");
    CHECK_OK(ct_log_history_load(path, &h));
    if (h) {
        json_t *e0 = json_array_get(h, 0), *e1 = json_array_get(h, 1);
        CHECK(json_is_null(json_object_get(e0, "loss")), "NaN reads as null");
        CHECK(strcmp(json_string_value(json_object_get(e0, "note")), "NaN, Infinity and \"-Infinity\" stay text") == 0,
              "a string's NaN was changed: %s", json_string_value(json_object_get(e0, "note")));
        CHECK(json_is_null(json_object_get(e1, "grad_norm")) && json_is_null(json_object_get(e1, "learning_rate")),
              "Infinity and -Infinity read as null");
        CHECK(json_object_get(json_array_get(h, 2), "NaN") != NULL, "the key \"NaN\" is a key");
        double v;
        CHECK(!ct_log_number(e0, "loss", &v) && ct_log_number(e1, "loss", &v) && v == 1.5, "numbers of the entries");
        CHECK(ct_plot_count_values(h) == 1, "only the finite loss is drawn (%lld)", (long long)ct_plot_count_values(h));
        json_decref(h);
        h = NULL;
    }

    snprintf(path, sizeof path, "%s/malformed.json", tmpdir);
    write_file(path, "{\"log_history\": [\n  {\"loss\": 1},\n  {\"loss\": }\n]}\n");
    CHECK_ERR(ct_log_history_load(path, &h), CT_ERR_FORMAT, "malformed.json:3:");
    snprintf(path, sizeof path, "%s/not_a_list.json", tmpdir);
    write_file(path, "{\"log_history\": {\"loss\": 1}}");
    CHECK_ERR(ct_log_history_load(path, &h), CT_ERR_FORMAT, "not_a_list.json", "'log_history' must be a list");
    snprintf(path, sizeof path, "%s/not_objects.json", tmpdir);
    write_file(path, "{\"log_history\": [{\"loss\": 1}, 7]}");
    CHECK_ERR(ct_log_history_load(path, &h), CT_ERR_FORMAT, "not_objects.json", "log_history[1] must be an object");
    snprintf(path, sizeof path, "%s/no/such/trainer_state.json", tmpdir);
    CHECK_ERR(ct_log_history_load(path, &h), CT_ERR_IO, path, "cannot open");
    snprintf(path, sizeof path, "%s/empty.json", tmpdir);
    write_file(path, "{\"log_history\": []}");
    CHECK_OK(ct_log_history_load(path, &h));
    CHECK(h && json_array_size(h) == 0, "an empty history");
    json_decref(h);
}

/* --- the figure's data ----------------------------------------------------------------------------- */

static json_t *random_history(int64_t *n_finite, int n_sets) {
    json_t *h = json_array();
    *n_finite = 0;
    int64_t steps = 15 + (int64_t)ct_rng_below(&rng, 200), every = 1 + (int64_t)ct_rng_below(&rng, 5);
    if (ct_rng_uniform(&rng) < 0.5) {
        /* eval_on_start: an evaluation before any training log */
        char key[64], lo[80], hi[80];
        snprintf(key, sizeof key, n_sets ? "eval_set0_loss" : "eval_loss");
        snprintf(lo, sizeof lo, "%s_ci_low", key);
        snprintf(hi, sizeof hi, "%s_ci_high", key);
        json_array_append_new(h, json_pack("{sfsfsfsisf}", key, 2.5, lo, 2.45, hi, 2.55, "step", 0, "epoch", 0.0));
        (*n_finite)++;
    }
    for (int64_t s = every; s <= steps; s += every) {
        json_t *e = json_object();
        const char *keys[] = {"loss", "learning_rate", "grad_norm"};
        for (int k = 0; k < 3; k++) {
            /* The first entry is whole, so that every panel has a finite value to draw. */
            double u = s == every ? 1.0 : ct_rng_uniform(&rng);
            if (u < 0.1) continue;                                        /* absent */
            if (u < 0.2) json_object_set_new(e, keys[k], json_null());    /* NaN in Python's file */
            else if (u < 0.25) json_object_set_new(e, keys[k], json_string("nan"));
            else {
                json_object_set_new(e, keys[k], json_real(uniform(1e-4, 3)));
                (*n_finite)++;
            }
        }
        json_object_set_new(e, "epoch", json_real((double)s / steps * 3));
        json_object_set_new(e, "step", json_integer(s));
        json_array_append_new(h, e);
        if (s % (3 * every) == 0) {
            for (int set = 0; set < (n_sets ? n_sets : 1); set++) {
                char prefix[32], key[96];
                snprintf(prefix, sizeof prefix, n_sets ? "eval_set%d" : "eval", set);
                e = json_object();
                const char *metrics[] = {"loss", "accuracy", "top_3_accuracy"};
                for (int m = 0; m < 3; m++) {
                    double v = uniform(0.1, 0.9);
                    snprintf(key, sizeof key, "%s_%s", prefix, metrics[m]);
                    json_object_set_new(e, key, json_real(v));
                    snprintf(key, sizeof key, "%s_%s_ci_low", prefix, metrics[m]);
                    json_object_set_new(e, key, json_real(v - 0.05));
                    snprintf(key, sizeof key, "%s_%s_ci_high", prefix, metrics[m]);
                    json_object_set_new(e, key, json_real(v + 0.05));
                    (*n_finite)++;
                }
                snprintf(key, sizeof key, "%s_runtime", prefix);
                json_object_set_new(e, key, json_real(0.5));
                json_object_set_new(e, "step", json_integer(s));
                json_array_append_new(h, e);
            }
        }
    }
    /* the end-of-training summary and an entry without a step draw nothing */
    json_array_append_new(h, json_pack("{sfsfsi}", "train_loss", 1.0, "train_runtime", 2.0, "step", (int)steps));
    json_array_append_new(h, json_pack("{sf}", "loss", 1.0));
    return h;
}

static void figure_data(void) {
    for (int trial = 0; trial < 40; trial++) {
        int n_sets = trial % 3;
        int64_t n_finite;
        json_t *h = random_history(&n_finite, n_sets);
        ct_plot_data *d = NULL;
        CHECK_OK(ct_plot_data_build(h, &d));
        if (!d) {
            json_decref(h);
            continue;
        }
        CHECK(d->n_values == n_finite, "trial %d: %lld values drawn, %lld finite", trial, (long long)d->n_values,
              (long long)n_finite);
        int64_t sum = 0;
        for (int i = 0; i < d->n_panels; i++)
            for (int j = 0; j < d->panels[i].n_series; j++) {
                const ct_plot_series *s = &d->panels[i].series[j];
                sum += s->n;
                for (int64_t k = 0; k < s->n; k++) CHECK(isfinite(s->y[k]) && isfinite(s->x[k]), "a non-finite point");
                for (int64_t k = 0; s->eval && k < s->n; k++)
                    CHECK(fabs(s->hi[k] - s->lo[k] - 0.1) < 1e-9 && s->lo[k] < s->y[k], "interval of '%s'", s->label);
                if (j > 0) CHECK(strcmp(s->label, d->panels[i].series[0].label) != 0, "series twice in a panel");
            }
        CHECK(sum == d->n_values, "series hold every value");
        CHECK(strcmp(d->panels[0].series[0].label, "train") == 0, "trial %d: the loss panel starts with '%s', not train",
              trial, d->panels[0].series[0].label);
        /* reading order: loss, the metrics, learning rate, gradient norm */
        const char *want[] = {"loss", "accuracy", "top_3_accuracy", "learning_rate", "grad_norm"};
        CHECK(d->n_panels == 5, "trial %d: %d panels", trial, d->n_panels);
        for (int i = 0; i < d->n_panels && i < 5; i++)
            CHECK(strcmp(d->panels[i].key, want[i]) == 0, "panel %d is '%s', not '%s'", i, d->panels[i].key, want[i]);
        /* one evaluation series per set, each set in its own colour in every panel */
        const ct_plot_panel *acc = &d->panels[1];
        CHECK(acc->n_series == (n_sets ? n_sets : 1), "accuracy has %d series", acc->n_series);
        for (int j = 0; j < acc->n_series; j++) {
            char label[32];
            snprintf(label, sizeof label, n_sets ? "eval: set%d" : "eval", j);
            CHECK(strcmp(acc->series[j].label, label) == 0 && acc->series[j].color == 1 + j,
                  "accuracy series %d: '%s' colour %d", j, acc->series[j].label, acc->series[j].color);
        }
        CHECK(d->steps_per_epoch > 0, "steps per epoch from the training logs");
        ct_plot_data_free(d);
        json_decref(h);
    }
}

static bool file_starts_with(const char *path, const char *magic, size_t n) {
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    char buf[64] = {0};
    size_t got = fread(buf, 1, n, f);
    fclose(f);
    return got == n && memcmp(buf, magic, n) == 0;
}

static void figure_files(void) {
    char png[512], svg[512];
    snprintf(png, sizeof png, "%s/curves.png", tmpdir);
    snprintf(svg, sizeof svg, "%s/curves.svg", tmpdir);
    json_t *h = json_array();
    CHECK_ERR(ct_plot_training_curves(h, NULL, png, svg), CT_ERR_INVALID_ARG, "nothing to plot", "(0 entries)");
    json_array_append_new(h, json_pack("{sfsfsi}", "train_loss", 1.0, "train_runtime", 2.0, "step", 10));
    json_array_append_new(h, json_pack("{sssi}", "loss", "NaN", "step", 11));
    CHECK_ERR(ct_plot_training_curves(h, NULL, png, svg), CT_ERR_INVALID_ARG, "nothing to plot", "(2 entries)");
    CHECK(access(png, F_OK) != 0 && access(svg, F_OK) != 0, "no file when there is nothing to plot");
    /* one point */
    json_array_append_new(h, json_pack("{sfsfsi}", "loss", 0.7, "epoch", 0.5, "step", 3));
    CHECK_OK(ct_plot_training_curves(h, NULL, png, svg));
    CHECK(file_starts_with(png, "\x89PNG\r\n\x1a\n", 8), "%s is a PNG", png);
    CHECK(file_starts_with(svg, "<?xml", 5), "%s is XML", svg);
    snprintf(png, sizeof png, "%s/curves_only.png", tmpdir);
    ct_plot_options o = {.title = "one", .scale = 2, .no_epoch_markers = true};
    CHECK_OK(ct_plot_training_curves(h, &o, png, NULL));
    CHECK(file_starts_with(png, "\x89PNG\r\n\x1a\n", 8), "%s is a PNG", png);
    snprintf(png, sizeof png, "%s/no/such/dir/curves.png", tmpdir);
    CHECK_ERR(ct_plot_training_curves(h, NULL, png, NULL), CT_ERR_IO, "no/such/dir/curves.png.tmp", "No such file");
    snprintf(svg, sizeof svg, "%s/no/such/dir/curves.svg", tmpdir);
    CHECK_ERR(ct_plot_training_curves(h, NULL, NULL, svg), CT_ERR_IO, "no/such/dir/curves.svg.tmp");
    CHECK_ERR(ct_plot_training_curves(json_object_get(json_array_get(h, 0), "step"), NULL, NULL, NULL),
              CT_ERR_INVALID_ARG, "must be a list");
    json_decref(h);
}

int main(void) {
    ct_test_begin("test_plot");
    ct_rng_init(&rng, ct_test_seed, 0, 0);
    snprintf(tmpdir, sizeof tmpdir, "/tmp/ct_test_plot_XXXXXX");
    if (!mkdtemp(tmpdir)) {
        fprintf(stderr, "cannot create a temporary directory\n");
        return 1;
    }
    nice_steps();
    linear_axes();
    log_axes();
    eval_keys();
    history_files();
    figure_data();
    figure_files();
    ct_plot_release_fonts();
    ct_plot_release_fonts(); /* twice is harmless */
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return ct_test_finish();
}
