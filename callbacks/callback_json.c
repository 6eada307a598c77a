/* Callbacks from their JSON specs (a run config's "callbacks" list):
 *   {"type": "early_stopping", "early_stopping_patience": 1, "early_stopping_threshold": 0.0}
 *   {"type": "jsonl", "path": "run/log.jsonl"}
 *   {"type": "printer"}      log lines on stdout (HF's print(logs))
 *   {"type": "progress"}     the progress bar on stderr (tqdm writes there too)
 * and the types an application registers (ct_register_callback_type). Unknown types and keys get
 * "did you mean"; the defaults are HF's constructor defaults. */
#include <stdio.h>
#include <string.h>

#include "callbacks/callback.h"
#include "core/json.h"
#include "core/registry.h"

static const char *const types[] = {"early_stopping", "jsonl", "printer", "progress", NULL};

static bool is_builtin(const char *type) {
    for (int i = 0; types[i]; i++)
        if (strcmp(types[i], type) == 0) return true;
    return false;
}

static ct_registry user = CT_REGISTRY_INIT("callback", "ct_register_callback_type", is_builtin);

ct_status ct_register_callback_type(const char *type, ct_callback_from_json_fn fn) {
    return ct_registry_add(&user, type, (ct_registry_fn)fn);
}

/* An application's callback from its registered reader, checked before anything else uses it. */
static ct_status registered(ct_callback_from_json_fn fn, const json_t *spec, const char *path, ct_callback **out) {
    ct_status s = fn(spec, path, out);
    if (s != CT_OK) {
        *out = NULL;
        return ct_registry_error(s, path);
    }
    if (!*out) return ct_error(CT_ERR_INVALID_ARG, "%s: the callback's reader returned CT_OK but no callback", path);
    if ((s = ct_callback_check(*out)) != CT_OK) {
        *out = NULL; /* a table that fails its check cannot be trusted to free itself either */
        return ct_error_prefix(s, "%s: ", path);
    }
    return CT_OK;
}

ct_status ct_callback_from_json(const json_t *spec, const char *path, ct_callback **out) {
    *out = NULL;
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
        ct_callback_from_json_fn fn = (ct_callback_from_json_fn)ct_registry_find(&user, type);
        if (fn) return registered(fn, spec, path, out);
        char type_path[512];
        snprintf(type_path, sizeof type_path, "%s.type", path);
        return ct_registry_unknown(&user, types, type_path, type);
    }
    if (st != CT_OK) return ct_error_prefix(st, "%s: ", path);
    return CT_OK;
}
