/* What the Trainer writes to output_dir, as Hugging Face writes it: the model, trainer_state.json,
 * <split>_results.json and all_results.json, and the metrics printed at the end of a run. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "trainer/model_io.h"
#include "trainer/trainer_impl.h"

/* mkdir -p */
ct_status ct_make_dirs(const char *dir) {
    char path[4096];
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path)
        return ct_error(CT_ERR_INVALID_ARG, "path too long: %s", dir);
    for (char *p = path + 1;; p++) {
        if (*p != '/' && *p != '\0') continue;
        char c = *p;
        *p = '\0';
        if (mkdir(path, 0777) != 0 && errno != EEXIST)
            return ct_error(CT_ERR_IO, "cannot create directory '%s': %s", path, strerror(errno));
        *p = c;
        if (!c) break;
    }
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) return ct_error(CT_ERR_IO, "'%s' is not a directory", dir);
    return CT_OK;
}

/* Writes a JSON value to `file` through a temporary name, indented as Hugging Face's files. */
ct_status ct_write_json_file(const json_t *v, const char *file) {
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", file) >= (int)sizeof tmp)
        return ct_error(CT_ERR_INVALID_ARG, "path too long: %s", file);
    if (json_dump_file(v, tmp, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_REAL_PRECISION(17)) != 0) {
        remove(tmp);
        return ct_error(CT_ERR_IO, "cannot write '%s'", tmp);
    }
    if (rename(tmp, file) != 0) {
        remove(tmp);
        return ct_error(CT_ERR_IO, "cannot rename '%s' to '%s': %s", tmp, file, strerror(errno));
    }
    return CT_OK;
}

ct_status ct_trainer_save_model(ct_trainer *t, const char *dir) {
    if (!ct_trainer_is_world_process_zero(t)) return CT_OK;
    if (!dir) dir = t->args.output_dir;
    CT_TRY(ct_make_dirs(dir));
    char path[4096];
    const json_t *spec = t->config ? json_object_get(t->config, "model") : NULL;
    snprintf(path, sizeof path, "%s/model.h5", dir);
    CT_TRY(ct_model_save_h5(t->model, spec, path));
    json_t *args;
    CT_TRY(ct_training_args_to_json(&t->args, &args));
    snprintf(path, sizeof path, "%s/training_args.json", dir);
    ct_status s = ct_write_json_file(args, path);
    json_decref(args);
    if (s == CT_OK && t->config) {
        snprintf(path, sizeof path, "%s/run_config.json", dir);
        s = ct_write_json_file(t->config, path);
    }
    return s;
}

ct_status ct_trainer_store_callback_state(ct_trainer *t) {
    CT_TRY(ct_callbacks_save_state(&t->callbacks, t->state.stateful_callbacks));
    json_t *control;
    CT_TRY(ct_trainer_control_save_state(&t->control, &control));
    if (json_object_set_new(t->state.stateful_callbacks, "TrainerControl", control) != 0)
        return ct_error(CT_ERR_NOMEM, "out of memory");
    return CT_OK;
}

ct_status ct_trainer_save_state(ct_trainer *t) {
    if (!ct_trainer_is_world_process_zero(t)) return CT_OK;
    CT_TRY(ct_make_dirs(t->args.output_dir));
    char path[4096];
    snprintf(path, sizeof path, "%s/trainer_state.json", t->args.output_dir);
    CT_TRY(ct_trainer_store_callback_state(t));
    return ct_trainer_state_save(&t->state, path);
}

/* Hugging Face prints "  key = value" with keys padded to the longest; reals as Python would. */
void ct_trainer_log_metrics(ct_trainer *t, const char *split, const json_t *metrics) {
    if (!ct_trainer_is_world_process_zero(t)) return;
    printf("***** %s metrics *****\n", split);
    size_t width = 0;
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)metrics, k, v) if (strlen(k) > width) width = strlen(k);
    json_object_foreach((json_t *)metrics, k, v) {
        if (json_is_integer(v)) printf("  %-*s = %lld\n", (int)width, k, (long long)json_integer_value(v));
        else if (json_is_real(v)) printf("  %-*s = %.4g\n", (int)width, k, json_real_value(v));
        else {
            char *text = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
            printf("  %-*s = %s\n", (int)width, k, text ? text : "?");
            free(text);
        }
    }
    fflush(stdout);
}

ct_status ct_trainer_save_metrics(ct_trainer *t, const char *split, const json_t *metrics) {
    if (!ct_trainer_is_world_process_zero(t)) return CT_OK;
    CT_TRY(ct_make_dirs(t->args.output_dir));
    char path[4096];
    snprintf(path, sizeof path, "%s/%s_results.json", t->args.output_dir, split);
    CT_TRY(ct_write_json_file(metrics, path));
    /* all_results.json accumulates every split's metrics, as Hugging Face's save_metrics(combined=True). */
    snprintf(path, sizeof path, "%s/all_results.json", t->args.output_dir);
    json_error_t err;
    json_t *all = json_load_file(path, 0, &err);
    if (!json_is_object(all)) {
        json_decref(all);
        all = json_object();
    }
    json_object_update(all, (json_t *)metrics);
    ct_status s = ct_write_json_file(all, path);
    json_decref(all);
    return s;
}
