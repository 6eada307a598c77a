/* The layer types behind ct_module_from_json: the built-in ones plus those an application registers
 * (core/registry.h). Lookup is linear; there are a few dozen types at most. */
#include <stdio.h>
#include <string.h>

#include "core/json.h"
#include "core/registry.h"
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

static bool is_builtin(const char *type) {
    for (size_t i = 0; i < CT_ARRAY_LEN(builtin); i++)
        if (strcmp(builtin[i].type, type) == 0) return true;
    return false;
}

static ct_registry user = CT_REGISTRY_INIT("layer type", "ct_register_module_type", is_builtin);

static ct_module_from_json_fn find(const char *type) {
    for (size_t i = 0; i < CT_ARRAY_LEN(builtin); i++)
        if (strcmp(builtin[i].type, type) == 0) return builtin[i].fn;
    return (ct_module_from_json_fn)ct_registry_find(&user, type);
}

int ct_module_builtin_types(const char **names, int cap) {
    int n = 0;
    for (size_t i = 0; i < CT_ARRAY_LEN(builtin) && n < cap; i++) names[n++] = builtin[i].type;
    return n;
}

ct_status ct_register_module_type(const char *type, ct_module_from_json_fn fn) {
    return ct_registry_add(&user, type, (ct_registry_fn)fn);
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
    const char *names[CT_ARRAY_LEN(builtin) + 1];
    for (size_t i = 0; i < CT_ARRAY_LEN(builtin); i++) names[i] = builtin[i].type;
    names[CT_ARRAY_LEN(builtin)] = NULL;
    char type_path[512];
    snprintf(type_path, sizeof type_path, "%s.type", path);
    return ct_registry_unknown(&user, names, type_path, type);
}
