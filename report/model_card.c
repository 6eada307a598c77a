/* The model card (see model_card.h): README.md built section by section into memory, then written
 * through a temporary file. Numbers are printed the way Hugging Face's card prints them, which is
 * Python's: repr() for floats (0.003, 5e-05, 2.0) and, in the results, 4 decimals for values that
 * have more (_maybe_round).
 *
 * Why one long file: each section follows Hugging Face's modelcard.py in order (metadata, results,
 * hyperparameters, the training-results table, framework versions), and the Python number formatting
 * they share is only used here. */
#include "report/model_card.h"

#include <H5public.h>
#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/fs.h"
#include "report/log_history.h"
#include "report/plot.h"
#include "trainer/trainer.h"

#ifndef CT_VERSION
#define CT_VERSION "unknown"
#endif

/* --- Python's number formatting ------------------------------------------------------------------- */

/* repr(float): the shortest digits that read back to v, fixed notation for exponents -4..15 and
 * scientific (two-digit exponent at least) otherwise. */
static void py_float(double v, char *buf, size_t cap) {
    if (isnan(v)) {
        snprintf(buf, cap, "nan");
        return;
    }
    if (isinf(v)) {
        snprintf(buf, cap, v > 0 ? "inf" : "-inf");
        return;
    }
    char e_form[64];
    for (int p = 1; p <= 17; p++) {
        snprintf(e_form, sizeof e_form, "%.*e", p - 1, v);
        if (strtod(e_form, NULL) == v) break;
    }
    /* e_form: [-]d[.ddd]e[+-]XX */
    bool neg = e_form[0] == '-';
    const char *m = e_form + neg;
    char digits[32];
    int nd = 0;
    for (const char *c = m; *c && *c != 'e'; c++)
        if (*c != '.') digits[nd++] = *c;
    digits[nd] = '\0';
    while (nd > 1 && digits[nd - 1] == '0') digits[--nd] = '\0';
    int exp = atoi(strchr(e_form, 'e') + 1);
    char out[96];
    int o = 0;
    if (neg) out[o++] = '-';
    if (exp >= -4 && exp < 16) {
        if (exp < 0) {
            o += snprintf(out + o, sizeof out - (size_t)o, "0.");
            for (int i = 0; i < -exp - 1; i++) out[o++] = '0';
            o += snprintf(out + o, sizeof out - (size_t)o, "%s", digits);
        } else {
            for (int i = 0; i <= exp; i++) out[o++] = i < nd ? digits[i] : '0';
            out[o++] = '.';
            if (nd > exp + 1) o += snprintf(out + o, sizeof out - (size_t)o, "%s", digits + exp + 1);
            else out[o++] = '0';
        }
        out[o] = '\0';
    } else {
        out[o++] = digits[0];
        if (nd > 1) o += snprintf(out + o, sizeof out - (size_t)o, ".%s", digits + 1);
        snprintf(out + o, sizeof out - (size_t)o, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    }
    snprintf(buf, cap, "%s", out);
}

/* Hugging Face's _maybe_round(v, 4): a float whose repr has more than 4 decimals is printed with
 * 4; anything else as str(). */
static void maybe_round(const json_t *v, char *buf, size_t cap) {
    if (json_is_integer(v)) {
        snprintf(buf, cap, "%lld", (long long)json_integer_value(v));
    } else if (json_is_real(v)) {
        char r[96];
        py_float(json_real_value(v), r, sizeof r);
        const char *dot = strchr(r, '.');
        if (dot && strlen(dot + 1) > 4) snprintf(buf, cap, "%.4f", json_real_value(v));
        else snprintf(buf, cap, "%s", r);
    } else if (json_is_string(v)) {
        snprintf(buf, cap, "%s", json_string_value(v));
    } else if (json_is_boolean(v)) {
        snprintf(buf, cap, "%s", json_is_true(v) ? "True" : "False");
    } else {
        snprintf(buf, cap, "None");
    }
}

static void maybe_round_double(double x, char *buf, size_t cap) {
    json_t *v = json_real(x);
    if (v) maybe_round(v, buf, cap);
    else py_float(x, buf, cap); /* NaN and inf have no JSON value */
    json_decref(v);
}

/* 25450 -> "25,450" */
static void grouped(int64_t n, char *buf, size_t cap) {
    char raw[32];
    snprintf(raw, sizeof raw, "%lld", (long long)(n < 0 ? -n : n));
    size_t len = strlen(raw), o = 0;
    char out[48];
    if (n < 0) out[o++] = '-';
    for (size_t i = 0; i < len; i++) {
        if (i > 0 && (len - i) % 3 == 0) out[o++] = ',';
        out[o++] = raw[i];
    }
    out[o] = '\0';
    snprintf(buf, cap, "%s", out);
}

/* A table cell or inline text: '|' would end the cell. */
static void cell(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '|') fputc('\\', f);
        fputc(*s == '\n' ? ' ' : *s, f);
    }
}

/* --- metrics ------------------------------------------------------------------------------------- */

/* The evaluation sets named in one metrics object ("eval_small_loss", ...). */
static void sets_of(const json_t *metrics, ct_log_eval_sets *sets) {
    json_t *one = json_array();
    if (one && json_array_append(one, (json_t *)metrics) == 0) ct_log_eval_sets_find(one, sets);
    else memset(sets, 0, sizeof *sets);
    json_decref(one);
}

/* The last evaluation of the history, all sets' values at its step merged: what the card reports
 * when the caller has no final evaluation (Hugging Face takes the log's last eval entry). */
static json_t *last_evaluation(const json_t *history, const ct_log_eval_sets *sets) {
    double last = -1;
    size_t i;
    const json_t *e;
    json_array_foreach(history, i, e) {
        const char *k;
        const json_t *v;
        double step;
        if (!ct_log_number(e, "step", &step)) continue;
        json_object_foreach((json_t *)e, k, v) {
            int set;
            const char *metric;
            if (ct_log_eval_key(k, sets, &set, &metric)) last = step;
        }
    }
    if (last < 0) return NULL;
    json_t *merged = json_object();
    json_array_foreach(history, i, e) {
        double step;
        if (!merged || !ct_log_number(e, "step", &step) || step != last) continue;
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)e, k, v) {
            if (strncmp(k, "eval_", 5) == 0) json_object_set(merged, k, v);
        }
    }
    return merged;
}

/* "- Accuracy: 0.718 (95% CI [0.6770, 0.7557])" for each metric of set `want` (-1: unnamed) in m,
 * whose keys start with prefix ("eval" or "test"). */
static void metric_lines(FILE *f, const json_t *m, const char *prefix, const ct_log_eval_sets *sets, int want,
                         double confidence) {
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)m, k, v) {
        /* test_* keys split exactly as eval_* ones */
        char as_eval[256];
        size_t pl = strlen(prefix);
        if (strncmp(k, prefix, pl) != 0 || k[pl] != '_') continue;
        snprintf(as_eval, sizeof as_eval, "eval%s", k + pl);
        int set;
        const char *metric;
        if (!ct_log_eval_key(as_eval, sets, &set, &metric) || set != want) continue;
        char name[128], value[64], lo[64], hi[64];
        ct_log_display_name(metric, name, sizeof name);
        maybe_round(v, value, sizeof value);
        fprintf(f, "- ");
        cell(f, name);
        fprintf(f, ": %s", value);
        double l, h;
        if (ct_log_interval(m, k, &l, &h)) {
            maybe_round_double(l, lo, sizeof lo);
            maybe_round_double(h, hi, sizeof hi);
            fprintf(f, " (%g%% CI [%s, %s])", confidence * 100, lo, hi);
        }
        fprintf(f, "\n");
    }
}

static void results_block(FILE *f, const json_t *m, const char *prefix, const char *what, double confidence) {
    ct_log_eval_sets sets;
    sets_of(m, &sets);
    if (sets.n == 0) {
        fprintf(f, "It achieves the following results on the %s set:\n", what);
        metric_lines(f, m, prefix, &sets, -1, confidence);
        return;
    }
    fprintf(f, "It achieves the following results on the %s sets:\n", what);
    for (int s = 0; s < sets.n; s++) {
        fprintf(f, "\n**%s**\n\n", sets.name[s]);
        metric_lines(f, m, prefix, &sets, s, confidence);
    }
}

/* --- sections ------------------------------------------------------------------------------------ */

/* A name YAML reads back as this string when written plain: letters first (not a number), and not
 * one of the words YAML 1.1 takes for a boolean or null. */
static bool simple_name(const char *s) {
    static const char *const WORDS[] = {"true", "false", "yes", "no", "on", "off", "null", "y", "n", NULL};
    for (int i = 0; WORDS[i]; i++)
        if (strcasecmp(s, WORDS[i]) == 0) return false;
    if (!(('a' <= *s && *s <= 'z') || ('A' <= *s && *s <= 'Z'))) return false;
    for (; *s; s++)
        if (!(('a' <= *s && *s <= 'z') || ('A' <= *s && *s <= 'Z') || ('0' <= *s && *s <= '9') || *s == '_' ||
              *s == '-' || *s == '.'))
            return false;
    return true;
}

/* A YAML scalar: plain when it is a simple name, else a JSON string (valid YAML double-quoted). */
static void yaml_scalar(FILE *f, const char *s) {
    if (*s && simple_name(s)) {
        fputs(s, f);
        return;
    }
    json_t *j = json_string(s);
    char *text = j ? json_dumps(j, JSON_ENCODE_ANY) : NULL;
    fputs(text ? text : "\"\"", f);
    free(text);
    json_decref(j);
}

/* The data specs of the run config: (split label, spec) pairs. */
typedef struct data_split {
    char label[96];
    const json_t *spec;
    int64_t samples; /* -1: unknown */
} data_split;

static int data_splits(const ct_trainer *t, data_split *out, int cap) {
    int n = 0;
    const json_t *data = t->config ? json_object_get(t->config, "data") : NULL;
    const json_t *train = json_object_get(data, "train"), *eval = json_object_get(data, "eval"),
                 *test = json_object_get(data, "test");
    if (n < cap && (train || t->train_dataset))
        out[n++] = (data_split){"train", train, t->train_dataset ? ct_dataset_length(t->train_dataset) : -1};
    for (int i = 0; i < t->n_eval && n < cap; i++) {
        data_split d = {.spec = NULL, .samples = ct_dataset_length(t->eval_datasets[i])};
        if (t->eval_names[i][0]) {
            snprintf(d.label, sizeof d.label, "eval: %s", t->eval_names[i]);
            d.spec = json_object_get(eval, t->eval_names[i]);
        } else {
            snprintf(d.label, sizeof d.label, "eval");
            d.spec = eval && json_object_get(eval, "type") ? eval : NULL;
        }
        out[n++] = d;
    }
    if (test && n < cap) out[n++] = (data_split){"test", test, -1};
    return n;
}

static bool file_backed(const json_t *spec) {
    return json_object_get(spec, "path") || json_object_get(spec, "images");
}

/* The datasets with a name (fashion_mnist), in split order, each once; files have no name worth
 * listing. */
static int named_datasets(const ct_trainer *t, const char **names, int cap) {
    data_split splits[CT_TRAINER_MAX_EVAL_SETS + 2];
    int n = data_splits(t, splits, CT_TRAINER_MAX_EVAL_SETS + 2), m = 0;
    for (int i = 0; i < n; i++) {
        const char *type = json_string_value(json_object_get(splits[i].spec, "type"));
        if (!type || file_backed(splits[i].spec)) continue;
        bool dup = false;
        for (int j = 0; j < m && !dup; j++) dup = strcmp(names[j], type) == 0;
        if (!dup && m < cap) names[m++] = type;
    }
    return m;
}

static void write_front_matter(FILE *f, const ct_trainer *t, const char *name, const json_t *final) {
    fprintf(f, "---\nlibrary_name: ctrainer\ntags:\n- generated_from_trainer\n- ctrainer\n");
    const char *datasets[CT_TRAINER_MAX_EVAL_SETS + 2];
    int n = named_datasets(t, datasets, CT_TRAINER_MAX_EVAL_SETS + 2);
    for (int i = 0; i < n; i++) {
        if (i == 0) fprintf(f, "datasets:\n");
        fprintf(f, "- ");
        yaml_scalar(f, datasets[i]);
        fprintf(f, "\n");
    }
    if (final) {
        ct_log_eval_sets sets;
        sets_of(final, &sets);
        const char *names[64];
        int nm = 0;
        const char *k;
        const json_t *v;
        json_object_foreach((json_t *)final, k, v) {
            int set;
            const char *metric;
            if (!ct_log_eval_key(k, &sets, &set, &metric) || strcmp(metric, "loss") == 0) continue;
            bool dup = false;
            for (int j = 0; j < nm && !dup; j++) dup = strcmp(names[j], metric) == 0;
            if (dup || nm == 64) continue;
            if (nm == 0) fprintf(f, "metrics:\n");
            names[nm++] = metric;
            fprintf(f, "- ");
            yaml_scalar(f, metric);
            fprintf(f, "\n");
        }
    }
    fprintf(f, "model-index:\n- name: ");
    yaml_scalar(f, name);
    fprintf(f, "\n  results: []\n---\n\n");
}

/* The run config's "init_from" (the weights training started from), or NULL. */
static const char *init_weights(const ct_trainer *t) {
    return t->config ? json_string_value(json_object_get(t->config, "init_from")) : NULL;
}

static void write_model(FILE *f, const ct_trainer *t) {
    const json_t *spec = t->config ? json_object_get(t->config, "model") : NULL;
    const char *type = json_string_value(json_object_get(spec, "type"));
    if (!type && t->model->root) type = t->model->root->ops->type;
    char params[48];
    grouped(ct_params_count(&t->model->params), params, sizeof params);
    fprintf(f, "## Model description\n\n");
    /* "f32" -> "float32", as PyTorch names it */
    const char *dt = ct_dtype_name(t->model->params.dtype);
    char dtype[32];
    if (dt[0] == 'f') snprintf(dtype, sizeof dtype, "float%s", dt + 1);
    else if (strncmp(dt, "bf", 2) == 0) snprintf(dtype, sizeof dtype, "bfloat%s", dt + 2);
    else snprintf(dtype, sizeof dtype, "%s", dt);
    const char *init_from = init_weights(t);
    fprintf(f, "A `%s` model with %s trainable parameters (%s), trained with ctrainer %s", type ? type : "custom",
            params, dtype, init_from ? "from the weights in `" : "from scratch.\n");
    if (init_from) {
        cell(f, init_from);
        fprintf(f, "`.\n");
    }
    if (spec) {
        char *text = json_dumps(spec, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        if (text) fprintf(f, "\n<details>\n<summary>Model config</summary>\n\n```json\n%s\n```\n\n</details>\n", text);
        free(text);
    }
    fprintf(f, "\n## Intended uses & limitations\n\nMore information needed\n\n");
}

/* "`fashion_mnist` (split: train, limit: 2048)": the type, then the spec's plain values. */
static void describe_spec(FILE *f, const json_t *spec) {
    const char *type = json_string_value(json_object_get(spec, "type"));
    fprintf(f, "`");
    cell(f, type ? type : "?");
    fprintf(f, "`");
    bool first = true;
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)spec, k, v) {
        if (strcmp(k, "type") == 0 || json_is_object(v) || json_is_array(v)) continue;
        char value[512];
        maybe_round(v, value, sizeof value);
        if (json_is_real(v)) py_float(json_real_value(v), value, sizeof value);
        fprintf(f, "%s", first ? " (" : ", ");
        cell(f, k);
        fprintf(f, ": ");
        cell(f, value);
        first = false;
    }
    if (!first) fprintf(f, ")");
}

static void write_data(FILE *f, const ct_trainer *t) {
    fprintf(f, "## Training and evaluation data\n\n");
    data_split splits[CT_TRAINER_MAX_EVAL_SETS + 2];
    int n = data_splits(t, splits, CT_TRAINER_MAX_EVAL_SETS + 2);
    if (n == 0) {
        fprintf(f, "More information needed\n\n");
        return;
    }
    fprintf(f, "| Split | Dataset | Samples |\n|:------|:--------|--------:|\n");
    for (int i = 0; i < n; i++) {
        fprintf(f, "| ");
        cell(f, splits[i].label);
        fprintf(f, " | ");
        if (splits[i].spec) describe_spec(f, splits[i].spec);
        else fprintf(f, "(given in code)");
        if (splits[i].samples >= 0) {
            char count[48];
            grouped(splits[i].samples, count, sizeof count);
            fprintf(f, " | %s |\n", count);
        } else {
            fprintf(f, " |  |\n");
        }
    }
    fprintf(f, "\n");
}

/* The line on how long the run was, from the end-of-training summary in the log. */
static void run_summary(FILE *f, const ct_trainer *t) {
    const json_t *history = t->state.log_history, *summary = NULL, *e;
    size_t i;
    json_array_foreach(history, i, e) if (json_object_get(e, "train_runtime")) summary = e;
    char epochs[64];
    maybe_round_double(t->state.epoch, epochs, sizeof epochs);
    fprintf(f, "Trained for %lld optimizer steps (%s epochs)", (long long)t->state.global_step, epochs);
    double runtime, loss;
    if (summary && ct_log_number(summary, "train_runtime", &runtime)) {
        char r[64];
        py_float(runtime, r, sizeof r);
        fprintf(f, " in %s s", r);
    }
    fprintf(f, " on %d process%s", t->world_size, t->world_size == 1 ? "" : "es");
    if (summary && ct_log_number(summary, "train_loss", &loss)) {
        char l[64];
        maybe_round_double(loss, l, sizeof l);
        fprintf(f, "; mean training loss %s", l);
    }
    fprintf(f, ".\n\n");
}

/* What the card says about the curves: drawn, nothing to draw, or no drawing in this build. */
typedef enum { CURVES_DRAWN, CURVES_NOTHING_LOGGED, CURVES_NOT_BUILT } curves_state;

static void write_curves(FILE *f, curves_state curves) {
    if (curves == CURVES_DRAWN)
        fprintf(f, "![Training curves](training_curves.png)\n\n"
                   "The curves are also in training_curves.svg; `ctrainer plot` draws them again from "
                   "trainer_state.json.\n\n");
    else if (curves == CURVES_NOT_BUILT)
        fprintf(f, "No training curves: drawing them needs a ctrainer built with cairo (-DCTRAINER_PLOT=ON), whose "
                   "`ctrainer plot` draws them from trainer_state.json.\n\n");
    else
        fprintf(f, "No training curves: nothing was logged during training (see logging_steps).\n\n");
}

static void hp(FILE *f, const char *name, const char *value) { fprintf(f, "- %s: %s\n", name, value); }

static void hp_real(FILE *f, const char *name, double v) {
    char b[64];
    py_float(v, b, sizeof b);
    hp(f, name, b);
}

static void hp_int(FILE *f, const char *name, long long v) {
    char b[32];
    snprintf(b, sizeof b, "%lld", v);
    hp(f, name, b);
}

/* Hugging Face's extract_hyperparameters_from_trainer, item for item, then ctrainer's own
 * settings that change the result. */
static void write_hyperparameters(FILE *f, const ct_trainer *t) {
    const ct_training_args *a = &t->args;
    int w = t->world_size > 0 ? t->world_size : 1;
    fprintf(f, "### Training hyperparameters\n\nThe following hyperparameters were used during training:\n");
    hp_real(f, "learning_rate", a->learning_rate);
    hp_int(f, "train_batch_size", a->per_device_train_batch_size);
    hp_int(f, "eval_batch_size", a->per_device_eval_batch_size);
    hp_int(f, "seed", a->seed);
    if (w > 1) {
        hp(f, "distributed_type", "multi-process");
        hp_int(f, "num_devices", w);
    }
    if (a->gradient_accumulation_steps > 1) hp_int(f, "gradient_accumulation_steps", a->gradient_accumulation_steps);
    int64_t total_train = a->per_device_train_batch_size * w * a->gradient_accumulation_steps;
    if (total_train != a->per_device_train_batch_size) hp_int(f, "total_train_batch_size", total_train);
    int64_t total_eval = a->per_device_eval_batch_size * w;
    if (total_eval != a->per_device_eval_batch_size) hp_int(f, "total_eval_batch_size", total_eval);
    char b1[32], b2[32], eps[32], opt[512];
    py_float(a->adam_beta1, b1, sizeof b1);
    py_float(a->adam_beta2, b2, sizeof b2);
    py_float(a->adam_epsilon, eps, sizeof eps);
    if (strstr(a->optim, "adam"))
        snprintf(opt, sizeof opt,
                 "Use %s with betas=(%s,%s) and epsilon=%s and optimizer_args=No additional optimizer arguments",
                 a->optim, b1, b2, eps);
    else
        snprintf(opt, sizeof opt, "Use %s and the args are:\nNo additional optimizer arguments", a->optim);
    hp(f, "optimizer", opt);
    hp(f, "lr_scheduler_type", a->lr_scheduler_type);
    if (a->warmup_ratio != 0) hp_real(f, "lr_scheduler_warmup_ratio", a->warmup_ratio);
    if (a->warmup_steps != 0) {
        if (a->warmup_steps == floor(a->warmup_steps)) hp_int(f, "lr_scheduler_warmup_steps", (long long)a->warmup_steps);
        else hp_real(f, "lr_scheduler_warmup_steps", a->warmup_steps);
    }
    if (a->max_steps > 0) hp_int(f, "training_steps", a->max_steps);
    else hp_real(f, "num_epochs", a->num_train_epochs);
    /* ctrainer's additions: settings Hugging Face's card leaves out that change what was trained */
    if (a->weight_decay != 0) hp_real(f, "weight_decay", a->weight_decay);
    if (a->max_grad_norm != 1.0) hp_real(f, "max_grad_norm", a->max_grad_norm);
    if (strcmp(a->optimizer_sharding, "none") != 0 && a->optimizer_sharding[0])
        hp(f, "optimizer_sharding", a->optimizer_sharding);
    fprintf(f, "\n");
}

/* --- the training results table ------------------------------------------------------------------ */

#define MAX_COLS 40

typedef struct table {
    int n_cols, n_rows, cap_rows;
    char cols[MAX_COLS][128];
    size_t width[MAX_COLS];
    char *(*cells)[MAX_COLS]; /* rows x cols; NULL cell = empty */
} table;

static int column(table *tb, const char *name) {
    for (int i = 0; i < tb->n_cols; i++)
        if (strcmp(tb->cols[i], name) == 0) return i;
    if (tb->n_cols == MAX_COLS) return -1;
    snprintf(tb->cols[tb->n_cols], sizeof tb->cols[0], "%s", name);
    tb->width[tb->n_cols] = strlen(name);
    return tb->n_cols++;
}

static bool put_cell(table *tb, int row, const char *col, const char *value) {
    int c = column(tb, col);
    if (c < 0) return true;
    char *copy = strdup(value);
    if (!copy) return false;
    free(tb->cells[row][c]);
    tb->cells[row][c] = copy;
    if (strlen(value) > tb->width[c]) tb->width[c] = strlen(value);
    return true;
}

static bool new_row(table *tb) {
    if (tb->n_rows == tb->cap_rows) {
        int cap = tb->cap_rows ? 2 * tb->cap_rows : 16;
        char *(*grown)[MAX_COLS] = realloc(tb->cells, (size_t)cap * sizeof *grown);
        if (!grown) return false;
        tb->cells = grown;
        tb->cap_rows = cap;
    }
    memset(tb->cells[tb->n_rows], 0, sizeof tb->cells[0]);
    tb->n_rows++;
    return true;
}

static void table_free(table *tb) {
    for (int r = 0; r < tb->n_rows; r++)
        for (int c = 0; c < MAX_COLS; c++) free(tb->cells[r][c]);
    free(tb->cells);
}

/* Hugging Face's parse_log_history: one row per evaluation logged before the end-of-training
 * summary, with the latest training loss ("No log" before the first), the epoch and step, the
 * validation loss and every other metric (intervals and timings left out). With named evaluation
 * sets each set's evaluation is its own row, named in an "Eval Set" column. */
static bool build_table(const json_t *history, table *tb) {
    ct_log_eval_sets sets;
    ct_log_eval_sets_find(history, &sets);
    column(tb, "Training Loss");
    column(tb, "Epoch");
    column(tb, "Step");
    if (sets.n > 0) column(tb, "Eval Set");
    column(tb, "Validation Loss");
    char train_loss[64] = "No log";
    size_t i;
    const json_t *e;
    json_array_foreach(history, i, e) {
        if (json_object_get(e, "train_runtime")) break;
        const json_t *loss = json_object_get(e, "loss");
        if (loss && json_is_number(loss)) maybe_round(loss, train_loss, sizeof train_loss);
        int row = -1;
        const char *k;
        const json_t *v;
        json_object_foreach((json_t *)e, k, v) {
            int set;
            const char *metric;
            if (!ct_log_eval_key(k, &sets, &set, &metric)) continue;
            char value[64];
            if (row < 0) {
                if (!new_row(tb)) return false;
                row = tb->n_rows - 1;
                const json_t *epoch = json_object_get(e, "epoch"), *step = json_object_get(e, "step");
                char ev[64] = "None", sv[64] = "None";
                if (epoch) maybe_round(epoch, ev, sizeof ev);
                if (json_is_real(epoch)) py_float(json_real_value(epoch), ev, sizeof ev);
                if (step) maybe_round(step, sv, sizeof sv);
                if (!put_cell(tb, row, "Training Loss", train_loss) || !put_cell(tb, row, "Epoch", ev) ||
                    !put_cell(tb, row, "Step", sv))
                    return false;
                if (sets.n > 0 && !put_cell(tb, row, "Eval Set", set >= 0 ? sets.name[set] : "eval")) return false;
            }
            maybe_round(v, value, sizeof value);
            char name[128];
            if (strcmp(metric, "loss") == 0) snprintf(name, sizeof name, "Validation Loss");
            else ct_log_display_name(metric, name, sizeof name);
            if (!put_cell(tb, row, name, value)) return false;
        }
    }
    return true;
}

/* Hugging Face's make_markdown_table: every column padded to its widest value, centred. */
static void print_table(FILE *f, const table *tb) {
    for (int c = 0; c < tb->n_cols; c++) {
        fprintf(f, "| ");
        cell(f, tb->cols[c]);
        fprintf(f, "%*s", (int)(tb->width[c] - strlen(tb->cols[c]) + 1), "");
    }
    fprintf(f, "|\n");
    for (int c = 0; c < tb->n_cols; c++) {
        fprintf(f, "|:");
        for (size_t j = 0; j < tb->width[c]; j++) fputc('-', f);
        fputc(':', f);
    }
    fprintf(f, "|\n");
    for (int r = 0; r < tb->n_rows; r++) {
        for (int c = 0; c < tb->n_cols; c++) {
            const char *v = tb->cells[r][c] ? tb->cells[r][c] : "";
            fprintf(f, "| ");
            cell(f, v);
            fprintf(f, "%*s", (int)(tb->width[c] - strlen(v) + 1), "");
        }
        fprintf(f, "|\n");
    }
}

static ct_status write_results_table(FILE *f, const json_t *history) {
    table tb = {0};
    bool ok = build_table(history, &tb);
    if (ok && tb.n_rows > 0) {
        fprintf(f, "### Training results\n\n");
        print_table(f, &tb);
        fprintf(f, "\n");
    }
    table_free(&tb);
    return ok ? CT_OK : ct_error(CT_ERR_NOMEM, "model card: out of memory building the results table");
}

static void write_versions(FILE *f) {
    unsigned maj = 0, min = 0, rel = 0;
    H5get_libversion(&maj, &min, &rel);
    /* "OpenBLAS 0.3.21 DYNAMIC_ARCH ...": the first two words */
    char blas[64] = "OpenBLAS";
    const char *config = openblas_get_config();
    if (config) {
        const char *sp = strchr(config, ' ');
        const char *end = sp ? strchr(sp + 1, ' ') : NULL;
        snprintf(blas, sizeof blas, "%.*s", (int)(end ? end - config : (long)strlen(config)), config);
    }
    fprintf(f, "### Framework versions\n\n- ctrainer %s\n- %s\n- HDF5 %u.%u.%u\n- jansson %s\n", CT_VERSION, blas, maj,
            min, rel, JANSSON_VERSION);
    if (ct_plot_cairo_version()) fprintf(f, "- cairo %s\n", ct_plot_cairo_version());
}

/* --- the card ------------------------------------------------------------------------------------ */

static ct_status write_card(ct_trainer *t, const json_t *eval_metrics, const json_t *test_metrics,
                            curves_state curves, FILE *f) {
    char name[256];
    ct_path_base_name(t->args.output_dir, name, sizeof name);

    ct_log_eval_sets hist_sets;
    ct_log_eval_sets_find(t->state.log_history, &hist_sets);
    json_t *fallback = eval_metrics ? NULL : last_evaluation(t->state.log_history, &hist_sets);
    const json_t *final = eval_metrics ? eval_metrics : fallback;

    write_front_matter(f, t, name, final);
    fprintf(f, "<!-- This model card has been generated automatically according to the information the Trainer had "
               "access to. You\nshould probably proofread and complete it, then remove this comment. -->\n\n");
    fprintf(f, "# ");
    cell(f, name);
    fprintf(f, "\n\n");
    /* Hugging Face's sentence; a run whose config starts from "init_from" weights is a fine-tuned one */
    const char *datasets[CT_TRAINER_MAX_EVAL_SETS + 2];
    int nd = named_datasets(t, datasets, CT_TRAINER_MAX_EVAL_SETS + 2);
    const char *init_from = init_weights(t);
    if (init_from) {
        fprintf(f, "This model is a fine-tuned version of `");
        cell(f, init_from);
        fprintf(f, "` on ");
    } else {
        fprintf(f, "This model was trained from scratch on ");
    }
    if (nd == 0) fprintf(f, "the data described below.");
    else if (nd == 1) fprintf(f, "the %s dataset.", datasets[0]);
    for (int i = 0; nd > 1 && i < nd; i++)
        fprintf(f, "%sthe %s%s", i == 0 ? "" : i == nd - 1 ? " and " : ", ", datasets[i], i == nd - 1 ? " datasets." : "");
    fprintf(f, "\n");
    double conf = t->args.eval_confidence_level;
    if (final) results_block(f, final, "eval", "evaluation", conf);
    if (test_metrics) {
        fprintf(f, "\n");
        results_block(f, test_metrics, "test", "test", conf);
    }
    fprintf(f, "\n");
    json_decref(fallback);

    write_model(f, t);
    write_data(f, t);
    fprintf(f, "## Training procedure\n\n");
    run_summary(f, t);
    write_curves(f, curves);
    write_hyperparameters(f, t);
    CT_TRY(write_results_table(f, t->state.log_history));
    write_versions(f);
    return CT_OK;
}

ct_status ct_trainer_create_model_card(ct_trainer *t, const json_t *eval_metrics, const json_t *test_metrics) {
    if (!ct_trainer_is_world_process_zero(t)) return CT_OK;
    const char *dir = t->args.output_dir;
    CT_TRY(ct_make_dirs(dir));
    char png[4096], svg[4096], card[4096];
    snprintf(png, sizeof png, "%s/training_curves.png", dir);
    snprintf(svg, sizeof svg, "%s/training_curves.svg", dir);
    snprintf(card, sizeof card, "%s/README.md", dir);

    /* The curves of training: the history up to its end-of-training summary, which is what
     * trainer_state.json holds (evaluations after training are logged at the last step again, and
     * with load_best_model_at_end they are another model's). `ctrainer plot OUTPUT_DIR` draws the
     * same figure. */
    json_t *trained = json_array();
    if (!trained) return ct_error(CT_ERR_NOMEM, "model card: out of memory");
    size_t i;
    json_t *e;
    json_array_foreach(t->state.log_history, i, e) {
        json_array_append(trained, e);
        if (json_object_get(e, "train_runtime")) break;
    }
    curves_state curves = ct_plot_count_values(trained) == 0 ? CURVES_NOTHING_LOGGED
                          : ct_plot_cairo_version()        ? CURVES_DRAWN
                                                           : CURVES_NOT_BUILT;
    if (curves == CURVES_DRAWN) {
        char name[256], title[512];
        ct_path_base_name(dir, name, sizeof name);
        snprintf(title, sizeof title, "Training curves: %s", name);
        ct_plot_options o = {.title = title};
        ct_status ps = ct_plot_training_curves(trained, &o, png, svg);
        if (ps != CT_OK) {
            json_decref(trained);
            return ct_error_prefix(ps, "model card: ");
        }
    }
    json_decref(trained);

    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    if (!mem) return ct_error(CT_ERR_NOMEM, "model card: out of memory");
    ct_status s = write_card(t, eval_metrics, test_metrics, curves, mem);
    if (fclose(mem) != 0 && s == CT_OK) s = ct_error(CT_ERR_NOMEM, "model card: out of memory");
    if (s == CT_OK) {
        s = ct_write_file_atomic(card, text, len);
        if (s != CT_OK) s = ct_error_prefix(s, "model card: ");
    }
    free(text);
    return s;
}
