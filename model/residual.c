/* Placeholder until this layer lands. */
#include "model/layers.h"

ct_status ct_residual_create(ct_module *inner, ct_module **out) {
    (void)inner; (void)out;
    return ct_error(CT_ERR_UNSUPPORTED, "residual: not available yet");
}

ct_status ct_residual_from_json(const json_t *spec, const char *path, ct_module **out) {
    (void)spec; (void)out;
    return ct_error(CT_ERR_UNSUPPORTED, "%s: residual not available yet", path);
}

