/* Placeholder until this layer lands. */
#include "model/layers.h"

ct_status ct_layernorm_create(int64_t features, double eps, bool elementwise_affine, bool bias, ct_module **out) {
    (void)features; (void)eps; (void)elementwise_affine; (void)bias; (void)out;
    return ct_error(CT_ERR_UNSUPPORTED, "layernorm: not available yet");
}

ct_status ct_layernorm_from_json(const json_t *spec, const char *path, ct_module **out) {
    (void)spec; (void)out;
    return ct_error(CT_ERR_UNSUPPORTED, "%s: layernorm not available yet", path);
}

