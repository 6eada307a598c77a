/* Callbacks from their JSON specs (a run config's "callbacks" list):
 *   {"type": "early_stopping", "early_stopping_patience": 1, "early_stopping_threshold": 0.0}
 *   {"type": "jsonl", "path": "run/log.jsonl"}
 *   {"type": "printer"}      log lines on stdout (HF's print(logs))
 *   {"type": "progress"}     the progress bar on stderr (tqdm writes there too)
 * Unknown types and keys get "did you mean"; the defaults are HF's constructor defaults. */
#include <string.h>

#include "callbacks/callback.h"
#include "core/json.h"

static const char *const types[] = {"early_stopping", "jsonl", "printer", "progress", NULL};

ct_status ct_callback_from_json(const json_t *spec, const char *path, ct_callback **out) {
    if (!json_is_object(spec)) return ct_error(CT_ERR_CONFIG, "%s: expected an object with a \"type\"", path);
    const char *type;
    CT_TRY(ct_json_string(spec, path, "type", true, NULL, &type));
    ct_status st;
    if (strcmp(type, "early_stopping") == 0) {
        static const char *const keys[] = {"type", "early_stopping_patience", "early_stopping_threshold", NULL};
        CT_TRY(ct_json_check_keys(spec, path, keys));
        int64_t patience;
        double threshold;
        CT_TRY(ct_json_int(spec, path, "early_stopping_patience", false, 1, &patience));
        CT_TRY(ct_json_real(spec, path, "early_stopping_threshold", false, 0.0, &threshold));
        if (patience < 1)
            return ct_error(CT_ERR_CONFIG, "%s.early_stopping_patience: must be at least 1, got %lld", path,
                            (long long)patience);
        if (!(threshold >= 0))
            return ct_error(CT_ERR_CONFIG, "%s.early_stopping_threshold: must be >= 0, got %g", path, threshold);
        st = ct_early_stopping_callback_create(patience, threshold, out);
    } else if (strcmp(type, "jsonl") == 0) {
        static const char *const keys[] = {"type", "path", NULL};
        CT_TRY(ct_json_check_keys(spec, path, keys));
        const char *file;
        CT_TRY(ct_json_string(spec, path, "path", true, NULL, &file));
        if (!file[0]) return ct_error(CT_ERR_CONFIG, "%s.path: must not be empty", path);
        st = ct_jsonl_callback_create(file, out);
    } else if (strcmp(type, "printer") == 0 || strcmp(type, "progress") == 0) {
        static const char *const keys[] = {"type", NULL};
        CT_TRY(ct_json_check_keys(spec, path, keys));
        st = strcmp(type, "printer") == 0 ? ct_printer_callback_create(stdout, out)
                                          : ct_progress_callback_create(stderr, out);
    } else {
        const char *hint = ct_closest_word(type, types);
        if (hint)
            return ct_error(CT_ERR_CONFIG, "%s.type: unknown callback '%s', did you mean '%s'?", path, type, hint);
        return ct_error(CT_ERR_CONFIG, "%s.type: unknown callback '%s' (expected early_stopping, jsonl, printer or "
                                       "progress)", path, type);
    }
    if (st != CT_OK) return ct_error_prefix(st, "%s: ", path);
    return CT_OK;
}
