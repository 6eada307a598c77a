/* A model's weights as a PyTorch state_dict in safetensors (see model_safetensors.h): the extras
 * PyTorch's state_dict has (batch-norm counters, the GPT's tied head) added on save and matched on
 * load, and the strict name, shape and dtype checks of load_state_dict. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "core/log.h"
#include "model/model_safetensors.h"

#define WTE "transformer.wte.weight"
#define LM_HEAD "lm_head.weight"
#define RUNNING_MEAN ".running_mean"
#define RUNNING_VAR ".running_var"
#define COUNTER ".num_batches_tracked"
#define LIST_MAX 8 /* names listed in one message before "and N more" */

static bool has_suffix(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* "prefix" + "suffix" into a new string (NULL when out of memory). */
static char *join(const char *prefix, size_t prefix_len, const char *suffix) {
    size_t m = strlen(suffix);
    char *s = malloc(prefix_len + m + 1);
    if (!s) return NULL;
    memcpy(s, prefix, prefix_len);
    memcpy(s + prefix_len, suffix, m + 1);
    return s;
}

/* --- saving ------------------------------------------------------------------------------------- */

static int find_item(const ct_named_tensor *items, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (strcmp(items[i].name, name) == 0) return i;
    return -1;
}

static const int64_t ZERO_COUNT = 0;

ct_status ct_state_dict_save_safetensors(const char *model_type, const ct_named_tensor *items, int n, ct_st_dtype dtype,
                                         const char *file) {
    CT_ASSERT(n >= 0 && (items || n == 0) && file);
    CT_ASSERT(dtype == CT_ST_NUM_DTYPES || ct_st_dtype_is_float(dtype));
    /* n tensors, at most one counter per running_mean, and the head */
    ct_st_entry *entries = calloc((size_t)(2 * n + 1), sizeof *entries);
    void **owned = calloc((size_t)(2 * n + 1), sizeof *owned);
    json_t *meta = json_pack("{s:s}", "format", "pt");
    int count = 0, n_owned = 0;
    ct_status s = entries && owned && meta ? CT_OK : ct_error(CT_ERR_NOMEM, "%s: out of memory", file);
    for (int i = 0; s == CT_OK && i < n; i++) {
        const ct_tensor *v = &items[i].value;
        CT_ASSERT(v->device.kind == CT_DEVICE_CPU && (v->dtype == CT_F32 || v->dtype == CT_F64));
        ct_st_dtype dt = dtype == CT_ST_NUM_DTYPES ? ct_st_dtype_of(v->dtype) : dtype;
        const void *data = v->data;
        if (dt != ct_st_dtype_of(v->dtype)) {
            int64_t numel = ct_tensor_numel(v);
            void *buf = malloc((size_t)(numel ? numel : 1) * (size_t)(ct_st_dtype_bits(dt) / 8));
            if (!buf) {
                s = ct_error(CT_ERR_NOMEM, "%s: out of memory converting '%s'", file, items[i].name);
                break;
            }
            ct_st_convert_from(v->data, v->dtype, dt, buf, numel);
            owned[n_owned++] = buf;
            data = buf;
        }
        entries[count++] = (ct_st_entry){items[i].name, dt, v->ndim, v->shape, data};
    }
    /* PyTorch's batch norms count their training batches beside the running statistics. */
    for (int i = 0; s == CT_OK && i < n; i++) {
        const char *name = items[i].name;
        if (!has_suffix(name, RUNNING_MEAN)) continue;
        size_t plen = strlen(name) - strlen(RUNNING_MEAN);
        char *var = join(name, plen, RUNNING_VAR), *counter = join(name, plen, COUNTER);
        if (!var || !counter) {
            free(var);
            free(counter);
            s = ct_error(CT_ERR_NOMEM, "%s: out of memory", file);
            break;
        }
        bool add = find_item(items, n, var) >= 0 && find_item(items, n, counter) < 0;
        free(var);
        if (!add) {
            free(counter);
            continue;
        }
        owned[n_owned++] = counter;
        entries[count++] = (ct_st_entry){counter, CT_ST_I64, 0, NULL, &ZERO_COUNT};
    }
    /* The GPT's head is wte (tied); nanoGPT's state_dict has it under both names. */
    int wte = find_item(items, n, WTE);
    if (s == CT_OK && model_type && strcmp(model_type, "gpt") == 0 && wte >= 0 && find_item(items, n, LM_HEAD) < 0) {
        entries[count] = entries[wte];
        entries[count++].name = LM_HEAD;
    }
    if (s == CT_OK) s = ct_st_write(file, entries, count, meta);
    for (int i = 0; i < n_owned; i++) free(owned[i]);
    free(owned);
    free(entries);
    json_decref(meta);
    return s;
}

ct_status ct_model_save_safetensors(const ct_model *m, ct_st_dtype dtype, const char *file) {
    int n = m->params.count;
    ct_named_tensor *items = calloc((size_t)(n ? n : 1), sizeof *items);
    if (!items) return ct_error(CT_ERR_NOMEM, "%s: out of memory", file);
    ct_status s = CT_OK;
    int copies = 0;
    for (int i = 0; s == CT_OK && i < n; i++) {
        const ct_param *p = &m->params.items[i];
        items[i].name = p->name;
        if (p->value->device.kind == CT_DEVICE_CPU) {
            items[i].value = *p->value;
            continue;
        }
        /* a model on a GPU: through host copies */
        s = ct_tensor_alloc(&items[i].value, p->value->dtype, CT_CPU, p->ndim, p->shape);
        if (s == CT_OK) {
            copies = i + 1;
            s = ct_tensor_copy_to(&items[i].value, p->value);
        }
    }
    if (s == CT_OK) s = ct_state_dict_save_safetensors(m->root->ops->type, items, n, dtype, file);
    for (int i = 0; i < copies; i++)
        if (m->params.items[i].value->device.kind != CT_DEVICE_CPU) ct_tensor_free(&items[i].value);
    free(items);
    return s;
}

/* --- loading ------------------------------------------------------------------------------------ */

/* Appends "'name'" items to buf (at most LIST_MAX, then "and N more"). */
static void append_list(char *buf, size_t cap, const char *const *names, int n) {
    for (int i = 0; i < n && i < LIST_MAX; i++) {
        size_t at = strlen(buf);
        snprintf(buf + at, cap - at, "%s'%s'", i ? ", " : "", names[i]);
    }
    if (n > LIST_MAX) {
        size_t at = strlen(buf);
        snprintf(buf + at, cap - at, " and %d more", n - LIST_MAX);
    }
}

/* The missing model name an unexpected file name most likely stands for: the same name under a
 * wrapper's prefix ("model.1.weight" for "1.weight") or without one, else the closest by edits. */
static const char *did_you_mean(const char *name, const char *const *missing, int n_missing) {
    size_t n = strlen(name);
    for (int i = 0; i < n_missing; i++) {
        size_t m = strlen(missing[i]);
        if (n > m && name[n - m - 1] == '.' && strcmp(name + n - m, missing[i]) == 0) return missing[i];
        if (m > n && missing[i][m - n - 1] == '.' && strcmp(missing[i] + m - n, name) == 0) return missing[i];
    }
    return n_missing ? ct_closest_word(name, missing) : NULL;
}

/* A tensor of the file the model has no parameter for, but which PyTorch's module has: a batch
 * norm's counter, the GPT's head (compared with wte later), nanoGPT's causal-mask buffer. */
static bool torch_only(const ct_model *m, bool gpt, const ct_st_tensor *t) {
    if (has_suffix(t->name, COUNTER)) {
        size_t plen = strlen(t->name) - strlen(COUNTER);
        char *mean = join(t->name, plen, RUNNING_MEAN);
        const ct_param *p = mean ? ct_params_find(&m->params, mean) : NULL;
        free(mean);
        if (p && (p->flags & CT_PARAM_BUFFER)) return true;
    }
    if (gpt && strcmp(t->name, LM_HEAD) == 0) return true;
    int layer, end = 0;
    if (gpt && t->ndim == 4 && sscanf(t->name, "transformer.h.%d.attn.bias%n", &layer, &end) == 1 &&
        t->name[end] == '\0' && end > 0)
        return true;
    return false;
}

static ct_status mismatch_error(const ct_st_file *f, const char *const *missing, int n_missing,
                                const char *const *unexpected, int n_unexpected) {
    char msg[8192] = "";
    if (n_missing) {
        snprintf(msg, sizeof msg, "%d of the model's tensors %s missing from the file: ", n_missing,
                 n_missing == 1 ? "is" : "are");
        append_list(msg, sizeof msg, missing, n_missing);
    }
    if (n_unexpected) {
        size_t at = strlen(msg);
        snprintf(msg + at, sizeof msg - at, "%sthe file has %d tensor%s the model does not: ", n_missing ? "; " : "",
                 n_unexpected, n_unexpected == 1 ? "" : "s");
        append_list(msg, sizeof msg, unexpected, n_unexpected);
        /* One prefix in front of every missing name (a wrapper module's state_dict) is said once. */
        size_t plen = 0;
        bool one_prefix = n_unexpected == n_missing && n_missing > 1;
        for (int i = 0; one_prefix && i < n_unexpected; i++) {
            const char *hint = did_you_mean(unexpected[i], missing, n_missing);
            size_t u = strlen(unexpected[i]), h = hint ? strlen(hint) : 0;
            one_prefix = hint && u > h && strcmp(unexpected[i] + u - h, hint) == 0 &&
                         (i == 0 || (u - h == plen && strncmp(unexpected[i], unexpected[0], plen) == 0));
            plen = u - h;
        }
        at = strlen(msg);
        if (one_prefix)
            snprintf(msg + at, sizeof msg - at,
                     " (the model's names with the prefix '%.*s': a wrapper's state_dict? "
                     "strip the prefix)",
                     (int)plen, unexpected[0]);
        for (int i = 0; !one_prefix && i < n_unexpected && i < LIST_MAX; i++) {
            const char *hint = did_you_mean(unexpected[i], missing, n_missing);
            at = strlen(msg);
            if (hint) snprintf(msg + at, sizeof msg - at, " ('%s': did you mean '%s'?)", unexpected[i], hint);
        }
    }
    return ct_error(CT_ERR_FORMAT, "%s: the file does not fit the model (a different architecture or size?): %s",
                    ct_st_path(f), msg);
}

/* Which tensor of f each parameter of m reads (src[i]), or the mismatch error. */
static ct_status match_names(const ct_model *m, const ct_st_file *f, const ct_st_tensor **src) {
    bool gpt = strcmp(m->root->ops->type, "gpt") == 0;
    int np = m->params.count, nf = ct_st_count(f), n_missing = 0, n_unexpected = 0;
    const char **missing = calloc((size_t)np + 1, sizeof *missing);
    const char **unexpected = calloc((size_t)nf + 1, sizeof *unexpected);
    bool *used = calloc((size_t)nf + 1, sizeof *used);
    if (!missing || !unexpected || !used) {
        free(missing);
        free(unexpected);
        free(used);
        return ct_error(CT_ERR_NOMEM, "%s: out of memory", ct_st_path(f));
    }
    const json_t *meta = ct_st_metadata(f);
    for (int i = 0; i < np; i++) {
        const char *name = m->params.items[i].name;
        const ct_st_tensor *t = ct_st_find(f, name);
        if (!t && gpt && strcmp(name, WTE) == 0) t = ct_st_find(f, LM_HEAD);
        const json_t *alias = meta ? json_object_get(meta, name) : NULL;
        if (!t && json_is_string(alias)) t = ct_st_find(f, json_string_value(alias));
        src[i] = t;
        if (t)
            used[t - ct_st_get(f, 0)] = true;
        else
            missing[n_missing++] = name;
    }
    for (int j = 0; j < nf; j++) {
        const ct_st_tensor *t = ct_st_get(f, j);
        if (!used[j] && !torch_only(m, gpt, t)) unexpected[n_unexpected++] = t->name;
    }
    ct_status s = n_missing || n_unexpected ? mismatch_error(f, missing, n_missing, unexpected, n_unexpected) : CT_OK;
    free(missing);
    free(unexpected);
    free(used);
    return s;
}

static bool same_shape(const ct_st_tensor *t, int ndim, const int64_t *shape) {
    if (t->ndim != ndim) return false;
    for (int d = 0; d < ndim; d++)
        if (t->shape[d] != shape[d]) return false;
    return true;
}

static ct_status check_tensor(const ct_st_file *f, const ct_param *p, const ct_st_tensor *t) {
    char want[128], got[128] = "[";
    const char *via = strcmp(t->name, p->name) == 0 ? "" : " (read from '";
    if (!same_shape(t, p->ndim, p->shape)) {
        for (int d = 0; d < t->ndim && strlen(got) < 100; d++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", d ? ", " : "", (long long)t->shape[d]);
        strcat(got, "]");
        return ct_error(CT_ERR_FORMAT, "%s: tensor '%s'%s%s%s: shape %s in the file, but the model's is %s",
                        ct_st_path(f), p->name, via, *via ? t->name : "", *via ? "')" : "", got,
                        ct_shape_str(p->ndim, p->shape, want, sizeof want));
    }
    if (!ct_st_dtype_is_float(t->dtype))
        return ct_error(CT_ERR_FORMAT,
                        "%s: tensor '%s' is %s in the file; only F16, BF16, F32 and F64 load into the "
                        "model's %s",
                        ct_st_path(f), t->name, ct_st_dtype_name(t->dtype), ct_dtype_name(p->value->dtype));
    return CT_OK;
}

/* Reads t into v (any device), converted to v's dtype; refuses a tensor with a NaN or infinity, which
 * would otherwise train and evaluate without nan_inf_policy ever seeing a bad step. */
static ct_status read_finite(ct_st_file *f, const ct_st_tensor *t, ct_tensor *host) {
    CT_TRY(ct_st_read_float(f, t, host));
    ct_status s = ct_tensor_check_finite(host);
    return s == CT_OK ? s : ct_error_prefix(s, "%s: tensor '%s': ", ct_st_path(f), t->name);
}

static ct_status read_into(ct_st_file *f, const ct_st_tensor *t, ct_tensor *v) {
    if (v->device.kind == CT_DEVICE_CPU) return read_finite(f, t, v);
    ct_tensor host;
    CT_TRY(ct_tensor_alloc(&host, v->dtype, CT_CPU, v->ndim, v->shape));
    ct_status s = read_finite(f, t, &host);
    if (s == CT_OK) s = ct_tensor_copy_to(v, &host);
    ct_tensor_free(&host);
    return s;
}

/* A file with both names of the GPT's tied head must hold one tensor under them: compared as the
 * model's dtype, before anything is loaded. */
static ct_status check_tied_head(const ct_model *m, ct_st_file *f, const ct_st_tensor *wte_src) {
    const ct_st_tensor *head = ct_st_find(f, LM_HEAD);
    const ct_param *wte = ct_params_find(&m->params, WTE);
    if (!head || !wte || !wte_src || head == wte_src) return CT_OK;
    if (!same_shape(head, wte->ndim, wte->shape) || !ct_st_dtype_is_float(head->dtype))
        return ct_error(CT_ERR_FORMAT,
                        "%s: '" LM_HEAD "' (%s) does not have the shape of '" WTE "': ctrainer's GPT ties "
                        "its head to the token embedding",
                        ct_st_path(f), ct_st_dtype_name(head->dtype));
    ct_tensor a, b;
    CT_TRY(ct_tensor_alloc(&a, wte->value->dtype, CT_CPU, wte->ndim, wte->shape));
    ct_status s = ct_tensor_alloc(&b, wte->value->dtype, CT_CPU, wte->ndim, wte->shape);
    if (s == CT_OK) {
        s = ct_st_read_float(f, head, &a);
        if (s == CT_OK) s = ct_st_read_float(f, wte_src, &b);
        if (s == CT_OK && memcmp(a.data, b.data, ct_tensor_nbytes(&a)) != 0)
            s = ct_error(CT_ERR_FORMAT,
                         "%s: '" LM_HEAD "' differs from '" WTE "': ctrainer's GPT ties its head to the "
                         "token embedding, so the two must be the same tensor (an untied model cannot be loaded)",
                         ct_st_path(f));
        ct_tensor_free(&b);
    }
    ct_tensor_free(&a);
    return s;
}

static ct_status load(ct_model *m, ct_st_file *f) {
    int np = m->params.count;
    const ct_st_tensor **src = calloc((size_t)np + 1, sizeof *src);
    if (!src) return ct_error(CT_ERR_NOMEM, "%s: out of memory", ct_st_path(f));
    ct_status s = match_names(m, f, src);
    for (int i = 0; s == CT_OK && i < np; i++) s = check_tensor(f, &m->params.items[i], src[i]);
    const ct_param *wte = ct_params_find(&m->params, WTE);
    if (s == CT_OK && strcmp(m->root->ops->type, "gpt") == 0 && wte)
        s = check_tied_head(m, f, src[wte - m->params.items]);
    for (int i = 0; s == CT_OK && i < np; i++) s = read_into(f, src[i], m->params.items[i].value);
    free(src);
    return s;
}

ct_status ct_model_load_safetensors(ct_model *m, const char *file) {
    CT_ASSERT(m && m->root && file);
    ct_st_file *f;
    CT_TRY(ct_st_open(file, &f));
    ct_status s = load(m, f);
    ct_st_close(f);
    if (s == CT_OK) ct_log_info("Loaded %d tensors of the model from %s", m->params.count, file);
    return s;
}

ct_status ct_model_init_from_json(ct_model *m, const json_t *value, const char *base_dir) {
    if (!json_is_string(value) || json_string_length(value) == 0)
        return ct_error(CT_ERR_CONFIG, "init_from: expected the path of a .safetensors file");
    const char *path = json_string_value(value);
    char full[4096];
    if (path[0] == '/' || !base_dir || !*base_dir)
        snprintf(full, sizeof full, "%s", path);
    else if (snprintf(full, sizeof full, "%s/%s", base_dir, path) >= (int)sizeof full)
        return ct_error(CT_ERR_CONFIG, "init_from: path too long: %s", path);
    ct_status s = ct_model_load_safetensors(m, full);
    return s == CT_OK ? s : ct_error_prefix(s, "init_from: ");
}
