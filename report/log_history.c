/* Log history reading (see log_history.h): the file with Python's non-finite tokens tolerated, the
 * evaluation sets, and the split of evaluation keys into set and metric. */
#include "report/log_history.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "callbacks/state.h"
#include "core/fs.h"

/* --- the file ------------------------------------------------------------------------------------ */

static ct_status read_text(const char *file, char **out, size_t *len) {
    FILE *f;
    CT_TRY(ct_fopen_read(file, &f));
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break;
        char *bigger = realloc(buf, 2 * cap + 1);
        if (!bigger) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = bigger;
        cap *= 2;
    }
    bool failed = buf && ferror(f);
    int err = errno;
    fclose(f);
    if (!buf) return ct_error(CT_ERR_NOMEM, "%s: out of memory reading it", file);
    if (failed) {
        free(buf);
        return ct_error(CT_ERR_IO, "%s: cannot read: %s", file, strerror(err));
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return CT_OK;
}

static bool word_at(const char *s, size_t i, size_t n, const char *word) {
    size_t m = strlen(word);
    if (i + m > n || memcmp(s + i, word, m) != 0) return false;
    /* a whole token: not part of a longer name */
    return i + m == n || !(isalnum((unsigned char)s[i + m]) || s[i + m] == '_');
}

/* text with NaN, Infinity and -Infinity outside strings replaced by null; NULL when there were none
 * (or no memory). Python's json.dumps writes these for float('nan') and float('inf'). */
static char *nulled_non_finite(const char *s, size_t n) {
    char *out = malloc(n + n / 2 + 8); /* "NaN" (3) -> "null" (4) grows at most by a third */
    if (!out) return NULL;
    size_t o = 0;
    bool in_string = false, replaced = false;
    for (size_t i = 0; i < n;) {
        char c = s[i];
        if (in_string) {
            out[o++] = c;
            if (c == '\\' && i + 1 < n) out[o++] = s[++i];
            else if (c == '"') in_string = false;
            i++;
            continue;
        }
        if (c == '"') in_string = true;
        const char *word = word_at(s, i, n, "NaN")         ? "NaN"
                           : word_at(s, i, n, "Infinity")  ? "Infinity"
                           : word_at(s, i, n, "-Infinity") ? "-Infinity"
                                                           : NULL;
        if (word) {
            memcpy(out + o, "null", 4);
            o += 4;
            i += strlen(word);
            replaced = true;
            continue;
        }
        out[o++] = c;
        i++;
    }
    out[o] = '\0';
    if (!replaced) {
        free(out);
        return NULL;
    }
    return out;
}

ct_status ct_log_history_load(const char *state_file, json_t **history) {
    char *text = NULL;
    size_t len = 0;
    CT_TRY(read_text(state_file, &text, &len));
    json_error_t err;
    json_t *root = json_loadb(text, len, 0, &err);
    if (!root) {
        /* Strict JSON first, so that an error's line:column is the file's own; only a file that
         * fails is tried again with Python's non-finite tokens read as null. */
        json_error_t first = err;
        char *nulled = nulled_non_finite(text, len);
        if (nulled) root = json_loads(nulled, 0, &err);
        free(nulled);
        if (!root) {
            free(text);
            return ct_error(CT_ERR_FORMAT, "%s:%d:%d: %s", state_file, first.line, first.column, first.text);
        }
    }
    free(text);
    ct_trainer_state st;
    ct_status s = ct_trainer_state_init(&st);
    if (s == CT_OK) s = ct_trainer_state_from_json(&st, root, state_file);
    json_decref(root);
    if (s == CT_OK) *history = json_incref(st.log_history);
    ct_trainer_state_free(&st);
    return s;
}

/* --- keys ------------------------------------------------------------------------------------------ */

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n > m && strcmp(s + n - m, suffix) == 0;
}

void ct_log_eval_sets_find(const json_t *history, ct_log_eval_sets *sets) {
    memset(sets, 0, sizeof *sets);
    size_t i;
    const json_t *e;
    json_array_foreach(history, i, e) {
        if (!json_is_object(e) || json_object_get(e, "eval_loss")) continue;
        const char *k;
        const json_t *v;
        json_object_foreach((json_t *)e, k, v) {
            size_t n = strlen(k);
            if (strncmp(k, "eval_", 5) != 0 || !ends_with(k, "_loss") || n <= 10) continue;
            size_t name_len = n - 5 - 5;
            if (name_len >= CT_LOG_NAME_MAX) continue;
            char name[CT_LOG_NAME_MAX];
            memcpy(name, k + 5, name_len);
            name[name_len] = '\0';
            bool known = false;
            for (int j = 0; j < sets->n && !known; j++) known = strcmp(sets->name[j], name) == 0;
            if (!known && sets->n < CT_LOG_MAX_EVAL_SETS) snprintf(sets->name[sets->n++], CT_LOG_NAME_MAX, "%s", name);
        }
    }
}

static const char *const NOT_METRICS[] = {"_runtime", "_samples_per_second", "_steps_per_second",
                                          "_jit_compilation_time", "_model_preparation_time",
                                          "_stderr", "_ci_low", "_ci_high", NULL};

bool ct_log_eval_key(const char *key, const ct_log_eval_sets *sets, int *set, const char **metric) {
    if (strncmp(key, "eval_", 5) != 0 || !key[5]) return false;
    for (int i = 0; NOT_METRICS[i]; i++)
        if (ends_with(key, NOT_METRICS[i])) return false;
    /* the longest set name that prefixes the key ("a_b" before "a") */
    int best = -1;
    size_t best_len = 0;
    for (int i = 0; i < sets->n; i++) {
        size_t n = strlen(sets->name[i]);
        if (n > best_len && strncmp(key + 5, sets->name[i], n) == 0 && key[5 + n] == '_' && key[6 + n]) {
            best = i;
            best_len = n;
        }
    }
    const char *m = best >= 0 ? key + 5 + best_len + 1 : key + 5;
    if (strncmp(m, "mem_", 4) == 0) return false;
    *set = best;
    *metric = m;
    return true;
}

bool ct_log_number(const json_t *entry, const char *key, double *out) {
    const json_t *v = json_object_get(entry, key);
    if (!v || !json_is_number(v)) return false;
    double x = json_number_value(v);
    if (!isfinite(x)) return false;
    *out = x;
    return true;
}

bool ct_log_interval(const json_t *entry, const char *key, double *lo, double *hi) {
    char k[256];
    double l, h;
    snprintf(k, sizeof k, "%s_ci_low", key);
    if (!ct_log_number(entry, k, &l)) return false;
    snprintf(k, sizeof k, "%s_ci_high", key);
    if (!ct_log_number(entry, k, &h)) return false;
    *lo = l;
    *hi = h;
    return true;
}

void ct_log_display_name(const char *metric, char *buf, size_t cap) {
    if (cap == 0) return;
    size_t o = 0;
    bool word_start = true;
    for (const char *p = metric; *p && o + 1 < cap; p++) {
        char c = *p == '_' ? ' ' : *p;
        /* Python's str.capitalize: first letter upper, the rest lower */
        buf[o++] = (char)(word_start ? toupper((unsigned char)c) : tolower((unsigned char)c));
        word_start = *p == '_';
    }
    buf[o] = '\0';
}
