/* What the Trainer writes to output_dir, as Hugging Face writes it: the model, trainer_state.json,
 * <split>_results.json and all_results.json, and the metrics printed at the end of a run; and the
 * lock a training run holds on output_dir while it writes there. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_io.h"
#include "core/dir_lock.h"
#include "core/fs.h"
#include "core/json.h"
#include "core/log.h"
#include "model/model_io.h"
#include "model/model_safetensors.h"
#include "trainer/trainer_impl.h"

static ct_status claim(void *ctx);

ct_status ct_trainer_save_model(ct_trainer *t, const char *dir) { return ct_trainer_save_model_from(t, dir, NULL, NULL); }

ct_status ct_trainer_save_model_from(ct_trainer *t, const char *dir, const ct_tensor *values, const ct_tensor *buffers) {
    if (!ct_trainer_is_world_process_zero(t)) return CT_OK;
    if (!dir) {
        CT_TRY(claim(t)); /* held already after training */
        dir = t->args.output_dir;
    }
    CT_TRY(ct_make_dirs(dir));
    char path[4096];
    const json_t *spec = t->config ? json_object_get(t->config, "model") : NULL;
    snprintf(path, sizeof path, "%s/model.h5", dir);
    CT_TRY(ct_model_save_h5_values(t->model, values, buffers, spec, path));
    json_t *args;
    CT_TRY(ct_training_args_to_json(&t->args, &args));
    snprintf(path, sizeof path, "%s/training_args.json", dir);
    ct_status s = ct_json_write_file(args, path);
    json_decref(args);
    if (s == CT_OK && t->config) {
        snprintf(path, sizeof path, "%s/run_config.json", dir);
        s = ct_json_write_file(t->config, path);
    }
    /* save_safetensors (HF's default true): the model PyTorch reads too; the model's own weights, so
     * not for a copy of other values (a best-model checkpoint written from a snapshot) */
    if (s == CT_OK && t->args.save_safetensors && !values) {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        s = ct_model_save_safetensors(t->model, CT_ST_F32, path);
    }
    /* its own manifest, so that every reader can verify it (ct_checkpoint_load_model); the other files
     * of output_dir change later and are not listed */
    static const char *const files[] = {"model.h5", "training_args.json", "run_config.json"};
    if (s == CT_OK) s = ct_checkpoint_write_manifest_of(dir, files, t->config ? 3 : 2);
    return s;
}

/* The world's process zero's part of ct_trainer_claim_output_dir (the others have nothing to do). */
static ct_status claim(void *ctx) {
    ct_trainer *t = ctx;
    const char *dir = t->args.output_dir;
    if (t->rank != 0 || !dir[0]) return CT_OK;
    struct ct_trainer_private *p = t->priv;
    if (p->output_lock && strcmp(ct_dir_lock_dir(p->output_lock), dir) == 0) return CT_OK; /* trained before */
    ct_dir_lock_release(p->output_lock); /* another output_dir than the last training's */
    p->output_lock = NULL;
    ct_status s = ct_dir_lock_acquire(dir, "output_dir", &p->output_lock);
    /* a directory that cannot be made: said at the start, not at the first save; on_save_error
     * 'continue' asked to train on without checkpoints, so it trains on with a warning */
    if (s == CT_ERR_IO && t->args.on_save_error == CT_SAVE_ERROR_CONTINUE) {
        ct_log_warning("%s: training goes on (on_save_error 'continue'), but nothing can be saved", ct_last_error());
        return CT_OK;
    }
    CT_TRY(s);
    /* unlocked (nothing can be written there): another run could be writing what looks left over */
    return p->output_lock ? ct_checkpoint_clean_leftovers(dir) : CT_OK;
}

ct_status ct_trainer_claim_output_dir(ct_trainer *t) {
    return ct_comm_main_process_first(t->world_size > 1 ? t->comm : NULL, false, "output_dir lock", claim, t);
}

ct_status ct_trainer_store_callback_state(ct_trainer *t) {
    return ct_checkpoint_store_callback_state(&t->callbacks, &t->control, &t->state);
}

ct_status ct_trainer_save_state(ct_trainer *t) {
    if (!ct_trainer_is_world_process_zero(t)) return CT_OK;
    CT_TRY(claim(t)); /* held already after training */
    CT_TRY(ct_make_dirs(t->args.output_dir));
    char path[4096];
    snprintf(path, sizeof path, "%s/trainer_state.json", t->args.output_dir);
    CT_TRY(ct_trainer_store_callback_state(t));
    return ct_trainer_state_save(&t->state, path);
}

static bool has_suffix(const char *k, const char *suffix) {
    size_t n = strlen(k), m = strlen(suffix);
    return n > m && strcmp(k + n - m, suffix) == 0;
}

/* A value as printed in the table: integers as such, reals with 4 significant digits. */
static void format_value(const json_t *v, char *buf, size_t cap) {
    if (json_is_integer(v)) snprintf(buf, cap, "%lld", (long long)json_integer_value(v));
    else if (json_is_real(v)) snprintf(buf, cap, "%.4g", json_real_value(v));
    else if (json_is_null(v)) snprintf(buf, cap, "nan");
    else {
        char *text = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
        snprintf(buf, cap, "%s", text ? text : "?");
        free(text);
    }
}

/* Hugging Face's metrics_format for printing: memory in MB (bytes >> 20), runtimes as H:MM:SS.ss,
 * total_flos in GF (>> 30); other values as format_value. */
static void format_metric(const char *key, const json_t *v, char *buf, size_t cap) {
    if (!json_is_number(v)) {
        format_value(v, buf, cap);
        return;
    }
    double x = json_number_value(v);
    if (strstr(key, "_mem_")) {
        snprintf(buf, cap, "%lldMB", (long long)floor(x / 1048576.0)); /* Python's >> floors */
    } else if (has_suffix(key, "_runtime") && isfinite(x) && x >= 0 && x < 1e12) {
        long long whole = (long long)x, cs = (long long)((x - (double)whole) * 100);
        snprintf(buf, cap, "%lld:%02lld:%02lld.%02lld", whole / 3600, whole / 60 % 60, whole % 60, cs);
    } else if (strcmp(key, "total_flos") == 0 && isfinite(x) && fabs(x) < 9e18) {
        snprintf(buf, cap, "%lldGF", (long long)floor((double)(long long)x / 1073741824.0));
    } else {
        format_value(v, buf, cap);
    }
}

/* Hugging Face's "  key = value" lines, as a table: a metric with an uncertainty (the keys
 * <key>_stderr, <key>_ci_low, <key>_ci_high) gets them on its own row. */
void ct_trainer_log_metrics(ct_trainer *t, const char *split, const json_t *metrics) {
    if (!ct_trainer_is_world_process_zero(t)) return;
    printf("***** %s metrics *****\n", split);
    int width = 6;
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)metrics, k, v) if ((int)strlen(k) > width && strlen(k) < 80) width = (int)strlen(k);
    bool any_interval = false;
    json_object_foreach((json_t *)metrics, k, v) any_interval |= has_suffix(k, "_stderr");
    if (any_interval)
        printf("  %-*s %12s %12s   %.0f%% interval\n", width, "metric", "value", "stderr",
               t->args.eval_confidence_level * 100);
    json_object_foreach((json_t *)metrics, k, v) {
        if (has_suffix(k, "_stderr") || has_suffix(k, "_ci_low") || has_suffix(k, "_ci_high")) continue;
        char value[256], key[256];
        format_metric(k, v, value, sizeof value);
        snprintf(key, sizeof key, "%s_stderr", k);
        const json_t *se = json_object_get(metrics, key);
        if (!any_interval) {
            printf("  %-*s = %s\n", width, k, value);
        } else if (!se) {
            printf("  %-*s %12s\n", width, k, value);
        } else {
            char lo[64] = "", hi[64] = "", sev[64];
            format_value(se, sev, sizeof sev);
            snprintf(key, sizeof key, "%s_ci_low", k);
            const json_t *l = json_object_get(metrics, key);
            snprintf(key, sizeof key, "%s_ci_high", k);
            const json_t *h = json_object_get(metrics, key);
            if (l && h) {
                format_value(l, lo, sizeof lo);
                format_value(h, hi, sizeof hi);
                printf("  %-*s %12s %12s   [%s, %s]\n", width, k, value, sev, lo, hi);
            } else {
                printf("  %-*s %12s %12s\n", width, k, value, sev);
            }
        }
    }
    fflush(stdout);
}

ct_status ct_trainer_save_metrics(ct_trainer *t, const char *split, const json_t *metrics) {
    if (!ct_trainer_is_world_process_zero(t)) return CT_OK;
    CT_TRY(claim(t)); /* held already after training */
    CT_TRY(ct_make_dirs(t->args.output_dir));
    char path[4096];
    snprintf(path, sizeof path, "%s/%s_results.json", t->args.output_dir, split);
    CT_TRY(ct_json_write_file(metrics, path));
    /* all_results.json accumulates every split's metrics, as Hugging Face's save_metrics(combined=True). */
    snprintf(path, sizeof path, "%s/all_results.json", t->args.output_dir);
    json_error_t err;
    FILE *f = NULL;
    /* a file that is not ours to read (a FIFO, a device) is an error, not replaced; missing: a new one */
    ct_status os = access(path, F_OK) == 0 ? ct_fopen_read(path, &f) : CT_OK;
    if (os != CT_OK) return os;
    json_t *all = f ? json_loadf(f, 0, &err) : NULL;
    if (f) fclose(f);
    if (!json_is_object(all)) {
        json_decref(all);
        all = json_object();
    }
    json_object_update(all, (json_t *)metrics);
    ct_status s = ct_json_write_file(all, path);
    json_decref(all);
    return s;
}
