/* JsonlCallback: every on_log entry becomes one JSON line in a file, flushed at once, so a run
 * can be followed with `tail -f` and read by any tool (pandas.read_json(lines=True)). Evaluation
 * metrics come through on_log as well (the Trainer logs them), so they are not written twice.
 * Entries get "step": global_step when they lack it, as HF's log_history entries have it. The file
 * is opened (appending) at train begin, or at the first entry outside training, on the world's
 * process zero only; it is closed at train end. A relative path is inside output_dir. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "callbacks/callback.h"
#include "callbacks/pyrepr.h"
#include "core/fs.h"
#include "core/util.h"

typedef struct jsonl_cb {
    ct_callback base;
    char *given;    /* the path as given: a relative one is resolved at each opening, because the */
    char path[4096]; /* output_dir may change between runs of one trainer; `path` is the last resolved */
    FILE *f;
} jsonl_cb;

/* Appending goes only to a new or empty file, or to one whose first line is a JSON object: an earlier
 * run's events. Anything else (the run's config, its data, a model) would be damaged by the lines. */
static ct_status check_appendable(const char *path) {
    FILE *f;
    if (access(path, F_OK) != 0) return CT_OK; /* a new file */
    CT_TRY(ct_fopen_read(path, &f));           /* a regular file, readable */
    char line[65536];
    bool empty = !fgets(line, sizeof line, f);
    fclose(f);
    json_t *first = empty ? NULL : json_loads(line, JSON_DISABLE_EOF_CHECK, NULL);
    bool events = empty || json_is_object(first);
    json_decref(first);
    if (events) return CT_OK;
    return ct_error(CT_ERR_CONFIG, "JsonlCallback: %s exists and is not a JSON-lines file (its first line is not a "
                    "JSON object); the callback appends only to its own event files: give it another path", path);
}

/* A relative path is taken inside output_dir (created if needed), where the run's other files are. */
static ct_status open_file(jsonl_cb *j, const ct_training_args *args) {
    if (j->f) return CT_OK;
    bool inside = j->given[0] != '/' && args && args->output_dir[0];
    if (inside) CT_TRY(ct_make_dirs(args->output_dir));
    int n = inside ? snprintf(j->path, sizeof j->path, "%s/%s", args->output_dir, j->given)
                   : snprintf(j->path, sizeof j->path, "%s", j->given);
    if (n < 0 || (size_t)n >= sizeof j->path)
        return ct_error(CT_ERR_INVALID_ARG, "JsonlCallback: the path %s%s%s is too long",
                        inside ? args->output_dir : "", inside ? "/" : "", j->given);
    CT_TRY(check_appendable(j->path));
    j->f = fopen(j->path, "a");
    if (!j->f) return ct_error(CT_ERR_IO, "%s: cannot open for appending: %s", j->path, strerror(errno));
    return CT_OK;
}

static ct_status jsonl_train_begin(ct_callback *cb, const ct_callback_args *a) {
    jsonl_cb *j = ct_container_of(cb, jsonl_cb, base);
    if (!a->state->is_world_process_zero) return CT_OK;
    return open_file(j, a->args);
}

static ct_status jsonl_log(ct_callback *cb, const ct_callback_args *a) {
    jsonl_cb *j = ct_container_of(cb, jsonl_cb, base);
    if (!a->state->is_world_process_zero || !a->logs) return CT_OK;
    if (!json_is_object(a->logs)) return ct_error(CT_ERR_INVALID_ARG, "logs must be a JSON object");
    CT_TRY(open_file(j, a->args));
    const json_t *line = a->logs;
    json_t *with_step = NULL;
    if (!json_object_get(a->logs, "step")) {
        with_step = json_copy((json_t *)a->logs);
        if (!with_step || json_object_set_new(with_step, "step", json_integer(a->state->global_step)) != 0) {
            json_decref(with_step);
            return ct_error(CT_ERR_NOMEM, "out of memory");
        }
        line = with_step;
    }
    ct_json_dump_line(j->f, line);
    fputc('\n', j->f);
    json_decref(with_step);
    if (fflush(j->f) != 0 || ferror(j->f))
        return ct_error(CT_ERR_IO, "%s: cannot write: %s", j->path, strerror(errno));
    return CT_OK;
}

static ct_status jsonl_train_end(ct_callback *cb, const ct_callback_args *a) {
    (void)a;
    jsonl_cb *j = ct_container_of(cb, jsonl_cb, base);
    if (!j->f) return CT_OK;
    int rc = fclose(j->f);
    j->f = NULL;
    if (rc != 0) return ct_error(CT_ERR_IO, "%s: cannot close: %s", j->path, strerror(errno));
    return CT_OK;
}

static void jsonl_destroy(ct_callback *cb) {
    jsonl_cb *j = ct_container_of(cb, jsonl_cb, base);
    if (j->f) fclose(j->f);
    free(j->given);
    free(j);
}

static const ct_callback_ops jsonl_ops = {
    .size = sizeof(ct_callback_ops),
    .name = "JsonlCallback",
    .on_train_begin = jsonl_train_begin,
    .on_log = jsonl_log,
    .on_train_end = jsonl_train_end,
    .destroy = jsonl_destroy,
};

ct_status ct_jsonl_callback_create(const char *path, ct_callback **out) {
    if (!path || !path[0]) return ct_error(CT_ERR_INVALID_ARG, "JsonlCallback: the path must not be empty");
    jsonl_cb *j = calloc(1, sizeof *j);
    char *copy = strdup(path);
    if (!j || !copy) {
        free(j);
        free(copy);
        return ct_error(CT_ERR_NOMEM, "JsonlCallback: out of memory");
    }
    j->base.ops = &jsonl_ops;
    j->given = copy;
    *out = &j->base;
    return CT_OK;
}
