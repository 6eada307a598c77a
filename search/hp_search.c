/* The search driver and its results (see hp_search.h): sampling, trial directories, objectives, the
 * best trial, progress lines, the table, and search_results.json / .csv. Every kind of search (in
 * this process, or `ctrainer search` with subprocesses) goes through ct_hp_search_run, so they
 * cannot differ in how they sample, score or report. */
#include "search/hp_search.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fs.h"
#include "trainer/trainer_impl.h"
#include "core/util.h"

void ct_hp_results_free(ct_hp_results *r) {
    for (int64_t i = 0; r->trials && i < r->n_trials; i++) {
        json_decref(r->trials[i].params);
        json_decref(r->trials[i].metrics);
        free(r->trials[i].message);
    }
    free(r->trials);
    memset(r, 0, sizeof *r);
    r->best = -1;
}

void ct_hp_default_metric(const ct_training_args *a, char *buf, size_t cap) {
    const char *m = a->metric_for_best_model;
    if (!m[0]) snprintf(buf, cap, "eval_loss");
    else if (strncmp(m, "eval_", 5) == 0) snprintf(buf, cap, "%s", m);
    else snprintf(buf, cap, "eval_%s", m);
}

static const char *direction_name(ct_hp_direction d) { return d == CT_HP_MAXIMIZE ? "maximize" : "minimize"; }
static const char *method_name(ct_hp_method m) { return m == CT_HP_GRID ? "grid" : "random"; }

static bool better(const ct_hp_results *r, double a, double b) {
    return r->direction == CT_HP_MAXIMIZE ? a > b : a < b;
}

/* A value as the table shows it: integers as such, reals with 6 significant digits, strings bare,
 * anything else as compact JSON. */
static void format_value(const json_t *v, char *buf, size_t cap) {
    if (!v) snprintf(buf, cap, "-");
    else if (json_is_integer(v)) snprintf(buf, cap, "%lld", (long long)json_integer_value(v));
    else if (json_is_real(v)) snprintf(buf, cap, "%.6g", json_real_value(v));
    else if (json_is_string(v)) snprintf(buf, cap, "%s", json_string_value(v));
    else {
        char *text = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
        snprintf(buf, cap, "%s", text ? text : "?");
        free(text);
    }
}

/* The trial's objective, or a failure (message set). A metric that is not there is a search-level
 * problem: *stop gets CT_ERR_CONFIG. */
static ct_status score(const ct_hp_search_opts *o, const ct_hp_results *r, ct_hp_trial *t, ct_status *stop) {
    double x;
    if (o->compute_objective) {
        ct_status s = o->compute_objective(o->objective_ctx, t->metrics, &x);
        if (s != CT_OK) return ct_error_prefix(s, "compute_objective: ");
    } else {
        const json_t *v = json_object_get(t->metrics, r->objective_name);
        /* Metrics write a non-finite value as null (a diverged run): this trial failed, not the search. */
        if (json_is_null(v)) return ct_error(CT_ERR_NUMERIC, "the objective %s is not finite (null)", r->objective_name);
        if (!json_is_number(v)) {
            char have[1024] = "";
            size_t used = 0;
            const char *k;
            const json_t *m;
            json_object_foreach(t->metrics, k, m) {
                if (!json_is_number(m) || used + strlen(k) + 3 >= sizeof have) continue;
                used += (size_t)snprintf(have + used, sizeof have - used, "%s%s", used ? ", " : "", k);
            }
            *stop = ct_error(CT_ERR_CONFIG, "the objective metric '%s' is not among the trial's metrics (%s)",
                             r->objective_name, have[0] ? have : "none");
            return *stop;
        }
        x = json_number_value(v);
    }
    if (!isfinite(x)) return ct_error(CT_ERR_NUMERIC, "the objective %s is %g", r->objective_name, x);
    t->objective = x;
    return CT_OK;
}

static ct_status prepare(const ct_hp_space *space, const ct_hp_search_opts *o, int64_t *n) {
    if (!o->output_dir || !o->output_dir[0])
        return ct_error(CT_ERR_INVALID_ARG, "hyperparameter search: no output directory");
    if (o->direction != CT_HP_MINIMIZE && o->direction != CT_HP_MAXIMIZE)
        return ct_error(CT_ERR_INVALID_ARG, "hyperparameter search: direction %d is neither minimize nor maximize",
                        (int)o->direction);
    if (o->n_trials < 0)
        return ct_error(CT_ERR_INVALID_ARG, "hyperparameter search: n_trials must not be negative, got %lld",
                        (long long)o->n_trials);
    if (o->method == CT_HP_GRID) {
        int64_t size;
        CT_TRY(ct_hp_grid_size(space, &size));
        *n = o->n_trials > 0 && o->n_trials < size ? o->n_trials : size;
    } else if (o->method == CT_HP_RANDOM) {
        if (o->n_trials == 0)
            return ct_error(CT_ERR_INVALID_ARG, "hyperparameter search: random search needs n_trials > 0");
        *n = o->n_trials;
    } else {
        return ct_error(CT_ERR_INVALID_ARG, "hyperparameter search: method %d is neither random nor grid",
                        (int)o->method);
    }
    if (*n > 1000000)
        return ct_error(CT_ERR_INVALID_ARG, "hyperparameter search: %lld trials is more than 1000000",
                        (long long)*n);
    return CT_OK;
}

static void progress(const ct_hp_results *r, const ct_hp_trial *t, int64_t n) {
    if (t->failed) {
        char code[32] = "";
        if (t->exit_code) snprintf(code, sizeof code, " (exit %d)", t->exit_code);
        fprintf(stderr, "[search] trial %lld of %lld failed after %.2f s%s: %s\n", (long long)t->number, (long long)n,
                t->seconds, code, t->message ? t->message : "");
    } else {
        fprintf(stderr, "[search] trial %lld of %lld complete in %.2f s: %s = %.6g%s\n", (long long)t->number,
                (long long)n, t->seconds, r->objective_name, t->objective,
                r->best == t->number ? " (best so far)" : "");
    }
    fflush(stderr);
}

ct_status ct_hp_search_run(const ct_hp_space *space, const ct_hp_search_opts *o, ct_hp_trial_fn run_trial,
                           void *ctx, ct_hp_results *out) {
    memset(out, 0, sizeof *out);
    out->best = -1;
    out->direction = o->direction;
    out->method = o->method;
    out->seed = o->seed;
    snprintf(out->objective_name, sizeof out->objective_name, "%s",
             o->compute_objective ? "objective" : o->metric ? o->metric : "eval_loss");
    int64_t n = 0;
    CT_TRY(prepare(space, o, &n));
    CT_TRY(ct_make_dirs(o->output_dir));
    out->trials = calloc((size_t)n, sizeof *out->trials);
    if (!out->trials) return ct_error(CT_ERR_NOMEM, "hyperparameter search: out of memory");
    ct_status stop = CT_OK;
    for (int64_t k = 0; k < n && stop == CT_OK; k++) {
        ct_hp_trial *t = &out->trials[k];
        t->number = k;
        t->objective = NAN;
        stop = o->method == CT_HP_GRID ? ct_hp_grid_point(space, k, &t->params)
                                       : ct_hp_sample_random(space, o->seed, k, &t->params);
        if (stop != CT_OK) break;
        out->n_trials = k + 1;
        if (snprintf(t->output_dir, sizeof t->output_dir, "%s/trial-%lld", o->output_dir, (long long)k) >=
            (int)sizeof t->output_dir) {
            stop = ct_error(CT_ERR_INVALID_ARG, "hyperparameter search: output directory '%s' is too long",
                            o->output_dir);
            break;
        }
        if (!o->quiet) {
            char *p = json_dumps(t->params, JSON_COMPACT | JSON_REAL_PRECISION(6));
            fprintf(stderr, "[search] trial %lld of %lld in %s: %s\n", (long long)k, (long long)n, t->output_dir,
                    p ? p : "");
            fflush(stderr);
            free(p);
        }
        double t0 = ct_monotonic_seconds();
        ct_status s = run_trial(ctx, t);
        if (s == CT_OK) s = score(o, out, t, &stop);
        t->seconds = ct_monotonic_seconds() - t0;
        if (s != CT_OK) {
            t->failed = true;
            t->objective = NAN;
            t->message = strdup(ct_last_error()[0] ? ct_last_error() : ct_status_str(s));
            if (s == CT_ERR_INTERRUPTED) stop = s;
        } else if (out->best < 0 || better(out, t->objective, out->trials[out->best].objective)) {
            out->best = k;
        }
        if (!o->quiet) progress(out, t, n);
        ct_status w = ct_hp_results_write(out, space, o->output_dir);
        if (stop == CT_OK && w != CT_OK) stop = w;
        /* The stopping trial's message is the search's message. */
        if (stop != CT_OK && w == CT_OK && t->message) ct_error(stop, "%s", t->message);
    }
    if (!o->quiet) {
        ct_hp_results_print(out, space, stdout);
        fflush(stdout);
    }
    return stop;
}

/* --- results files ----------------------------------------------------------------------------------- */

json_t *ct_hp_results_to_json(const ct_hp_results *r) {
    json_t *trials = json_array();
    for (int64_t i = 0; trials && i < r->n_trials; i++) {
        const ct_hp_trial *t = &r->trials[i];
        json_t *o = json_object();
        if (!o) break;
        json_object_set_new(o, "number", json_integer((json_int_t)t->number));
        json_object_set_new(o, "status", json_string(t->failed ? "failed" : "complete"));
        json_object_set_new(o, "objective", t->failed ? json_null() : json_real(t->objective));
        json_object_set(o, "params", t->params ? t->params : json_object());
        json_object_set_new(o, "seconds", json_real(t->seconds));
        json_object_set_new(o, "exit_code", json_integer(t->exit_code));
        json_object_set_new(o, "message", t->message ? json_string(t->message) : json_null());
        json_object_set_new(o, "output_dir", json_string(t->output_dir));
        json_object_set(o, "metrics", t->metrics ? t->metrics : json_null());
        json_array_append_new(trials, o);
    }
    const ct_hp_trial *best = r->best >= 0 ? &r->trials[r->best] : NULL;
    return json_pack("{s:s, s:s, s:I, s:s, s:I, s:o, s:o, s:o, s:o}", "direction", direction_name(r->direction),
                     "method", method_name(r->method), "seed", (json_int_t)r->seed, "objective", r->objective_name,
                     "n_trials", (json_int_t)r->n_trials, "best_trial",
                     best ? json_integer((json_int_t)best->number) : json_null(), "best_objective",
                     best ? json_real(best->objective) : json_null(), "best_params",
                     best ? json_deep_copy(best->params) : json_null(), "trials", trials ? trials : json_array());
}

/* A growing string. */
typedef struct text {
    char *s;
    size_t len, cap;
    bool oom;
} text;

static void put(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(text *t, const char *fmt, ...) {
    if (t->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(t->s ? t->s + t->len : NULL, t->s ? t->cap - t->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            t->oom = true;
            return;
        }
        if (t->s && t->len + (size_t)n < t->cap) {
            t->len += (size_t)n;
            return;
        }
        size_t cap = (t->cap ? t->cap * 2 : 1024) + (size_t)n;
        char *s = realloc(t->s, cap);
        if (!s) {
            t->oom = true;
            return;
        }
        t->s = s;
        t->cap = cap;
    }
}

/* A CSV field (RFC 4180): quoted when it holds a comma, a quote or a line break. */
static void put_csv(text *t, const char *field) {
    if (!strpbrk(field, ",\"\r\n")) {
        put(t, "%s", field);
        return;
    }
    put(t, "\"");
    for (const char *p = field; *p; p++) {
        if (*p == '"') put(t, "\"\"");
        else put(t, "%c", *p);
    }
    put(t, "\"");
}

/* A value for the CSV: full precision, strings bare, other JSON compact. */
static void csv_value(text *t, const json_t *v) {
    char buf[64];
    if (!v || json_is_null(v)) return;
    if (json_is_real(v)) {
        snprintf(buf, sizeof buf, "%.17g", json_real_value(v));
        put(t, "%s", buf);
    } else if (json_is_string(v)) {
        put_csv(t, json_string_value(v));
    } else {
        char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT | JSON_REAL_PRECISION(17));
        put_csv(t, s ? s : "");
        free(s);
    }
}

static char *results_csv(const ct_hp_results *r, const ct_hp_space *space) {
    text t = {0};
    put(&t, "trial,status,");
    put_csv(&t, r->objective_name);
    put(&t, ",seconds,exit_code");
    for (int i = 0; i < space->n; i++) {
        put(&t, ",");
        put_csv(&t, space->dims[i].key);
    }
    put(&t, ",message\r\n");
    for (int64_t i = 0; i < r->n_trials; i++) {
        const ct_hp_trial *tr = &r->trials[i];
        put(&t, "%lld,%s,", (long long)tr->number, tr->failed ? "failed" : "complete");
        if (!tr->failed) put(&t, "%.17g", tr->objective);
        put(&t, ",%.3f,%d", tr->seconds, tr->exit_code);
        for (int k = 0; k < space->n; k++) {
            put(&t, ",");
            csv_value(&t, json_object_get(tr->params, space->dims[k].key));
        }
        put(&t, ",");
        if (tr->message) put_csv(&t, tr->message);
        put(&t, "\r\n");
    }
    if (t.oom) {
        free(t.s);
        return NULL;
    }
    return t.s;
}

ct_status ct_hp_write_json(const json_t *v, const char *file) {
    char *s = json_dumps(v, JSON_INDENT(2) | JSON_REAL_PRECISION(17));
    if (!s) return ct_error(CT_ERR_NOMEM, "%s: out of memory", file);
    size_t len = strlen(s);
    char *line = realloc(s, len + 2);
    if (!line) {
        free(s);
        return ct_error(CT_ERR_NOMEM, "%s: out of memory", file);
    }
    line[len] = '\n';
    line[len + 1] = '\0';
    ct_status st = ct_write_file_atomic(file, line, strlen(line));
    free(line);
    return st;
}

ct_status ct_hp_results_write(const ct_hp_results *r, const ct_hp_space *space, const char *dir) {
    char file[4096];
    json_t *j = ct_hp_results_to_json(r);
    if (!j) return ct_error(CT_ERR_NOMEM, "search results: out of memory");
    snprintf(file, sizeof file, "%s/search_results.json", dir);
    ct_status st = ct_hp_write_json(j, file);
    json_decref(j);
    CT_TRY(st);
    char *s = results_csv(r, space);
    if (!s) return ct_error(CT_ERR_NOMEM, "search results: out of memory");
    snprintf(file, sizeof file, "%s/search_results.csv", dir);
    st = ct_write_file_atomic(file, s, strlen(s));
    free(s);
    return st;
}

/* --- the table ---------------------------------------------------------------------------------------- */

#define CELL 256

void ct_hp_results_print(const ct_hp_results *r, const ct_hp_space *space, FILE *f) {
    /* Columns: trial, status, objective, time, then one per key; widths fit the widest cell. */
    int ncol = 4 + space->n;
    int *width = calloc((size_t)ncol, sizeof *width);
    char(*cells)[CELL] = calloc((size_t)(r->n_trials + 1) * (size_t)ncol, CELL);
    if (!width || !cells) {
        free(width);
        free(cells);
        return;
    }
    snprintf(cells[0], CELL, "trial");
    snprintf(cells[1], CELL, "status");
    snprintf(cells[2], CELL, "%s", r->objective_name);
    snprintf(cells[3], CELL, "time (s)");
    for (int k = 0; k < space->n; k++) snprintf(cells[4 + k], CELL, "%s", space->dims[k].key);
    for (int64_t i = 0; i < r->n_trials; i++) {
        const ct_hp_trial *t = &r->trials[i];
        char(*row)[CELL] = cells + (i + 1) * ncol;
        snprintf(row[0], CELL, "%lld%s", (long long)t->number, i == r->best ? "*" : "");
        snprintf(row[1], CELL, "%s", t->failed ? "failed" : "complete");
        if (t->failed) snprintf(row[2], CELL, "-");
        else snprintf(row[2], CELL, "%.6g", t->objective);
        snprintf(row[3], CELL, "%.2f", t->seconds);
        for (int k = 0; k < space->n; k++) format_value(json_object_get(t->params, space->dims[k].key), row[4 + k], CELL);
    }
    for (int64_t i = 0; i <= r->n_trials; i++)
        for (int c = 0; c < ncol; c++) {
            int w = (int)strlen(cells[i * ncol + c]);
            if (w > width[c]) width[c] = w;
        }
    for (int64_t i = 0; i <= r->n_trials; i++) {
        for (int c = 0; c < ncol; c++) {
            /* Numbers right-aligned, text left-aligned; the last column unpadded. */
            bool right = c == 0 || c == 2 || c == 3;
            const char *cell = cells[i * ncol + c];
            if (c == ncol - 1 && !right) fprintf(f, "%s", cell);
            else fprintf(f, right ? "%*s" : "%-*s", width[c], cell);
            fprintf(f, c == ncol - 1 ? "\n" : "  ");
        }
    }
    int64_t failed = 0;
    for (int64_t i = 0; i < r->n_trials; i++) failed += r->trials[i].failed;
    if (r->best >= 0) {
        const ct_hp_trial *b = &r->trials[r->best];
        char *p = json_dumps(b->params, JSON_COMPACT | JSON_REAL_PRECISION(17));
        fprintf(f, "best trial: %lld (%s %s = %.10g) of %lld trials (%lld failed), in %s: %s\n", (long long)b->number,
                direction_name(r->direction), r->objective_name, b->objective, (long long)r->n_trials,
                (long long)failed, b->output_dir, p ? p : "");
        free(p);
    } else {
        fprintf(f, "no trial completed (%lld trials, %lld failed)\n", (long long)r->n_trials, (long long)failed);
    }
    free(width);
    free(cells);
}
