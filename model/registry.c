/* The layer-type registry behind ct_module_from_json: built-in types plus those an application
 * registers. Lookup is linear; there are a few dozen types at most. */
#include <stdio.h>
#include <string.h>

#include "core/json.h"
#include "core/util.h"
#include "core/vtable.h"
#include "model/layers.h"

typedef struct entry {
    const char *type;
    ct_module_from_json_fn fn;
} entry;

static const entry builtin[] = {
    {"sequential", ct_sequential_from_json}, {"residual", ct_residual_from_json},
    {"linear", ct_linear_from_json},         {"relu", ct_activation_from_json},
    {"gelu", ct_activation_from_json},       {"tanh", ct_activation_from_json},
    {"sigmoid", ct_activation_from_json},    {"flatten", ct_flatten_from_json},
    {"embedding", ct_embedding_from_json},   {"conv2d", ct_conv2d_from_json},
    {"maxpool2d", ct_maxpool2d_from_json},   {"avgpool2d", ct_avgpool2d_from_json},
    {"batchnorm2d", ct_batchnorm2d_from_json}, {"layernorm", ct_layernorm_from_json},
    {"dropout", ct_dropout_from_json},         {"mlp", ct_mlp_from_json},
    {"cnn", ct_cnn_from_json},                 {"gpt", ct_gpt_from_json},
};

#define CT_MAX_USER_TYPES 64
static entry user[CT_MAX_USER_TYPES];
static int n_user;

static ct_module_from_json_fn find(const char *type) {
    for (int i = 0; i < n_user; i++)
        if (strcmp(user[i].type, type) == 0) return user[i].fn;
    for (size_t i = 0; i < CT_ARRAY_LEN(builtin); i++)
        if (strcmp(builtin[i].type, type) == 0) return builtin[i].fn;
    return NULL;
}

ct_status ct_register_module_type(const char *type, ct_module_from_json_fn fn) {
    if (!type || !fn) return ct_error(CT_ERR_INVALID_ARG, "register_module_type: NULL type or function");
    if (n_user == CT_MAX_USER_TYPES) return ct_error(CT_ERR_INVALID_ARG, "register_module_type: too many types");
    user[n_user++] = (entry){type, fn};
    return CT_OK;
}

ct_status ct_module_to_json(const ct_module *m, json_t **out) {
    *out = NULL;
    if (!CT_OPS_HAS(m->ops, ct_module_ops, to_json))
        return ct_error(CT_ERR_UNSUPPORTED, "layer '%s' (type '%s') has no to_json, so its architecture cannot be "
                        "saved; give its ct_module_ops a .to_json returning the spec its registered reader takes",
                        m->name[0] ? m->name : m->local_name[0] ? m->local_name : "model", m->ops->type);
    return m->ops->to_json(m, out);
}

ct_status ct_module_from_json(const json_t *spec, const char *path, ct_module **out) {
    if (!json_is_object(spec)) return ct_error(CT_ERR_CONFIG, "%s: expected an object with a \"type\"", path);
    const char *type;
    CT_TRY(ct_json_string(spec, path, "type", true, NULL, &type));
    ct_module_from_json_fn fn = find(type);
    if (fn) return fn(spec, path, out);
    const char *names[CT_ARRAY_LEN(builtin) + CT_MAX_USER_TYPES + 1];
    size_t n = 0;
    for (size_t i = 0; i < CT_ARRAY_LEN(builtin); i++) names[n++] = builtin[i].type;
    for (int i = 0; i < n_user; i++) names[n++] = user[i].type;
    names[n] = NULL;
    const char *hint = ct_closest_word(type, names);
    if (hint) return ct_error(CT_ERR_CONFIG, "%s.type: unknown layer type '%s', did you mean '%s'?", path, type, hint);
    return ct_error(CT_ERR_CONFIG, "%s.type: unknown layer type '%s'", path, type);
}
