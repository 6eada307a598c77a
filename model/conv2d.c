/* Placeholder until this layer lands. */
#include "model/layers.h"

ct_status ct_conv2d_create(const ct_conv2d_config *cfg, ct_module **out) {
    (void)cfg; (void)out;
    return ct_error(CT_ERR_UNSUPPORTED, "conv2d: not available yet");
}

ct_status ct_conv2d_from_json(const json_t *spec, const char *path, ct_module **out) {
    (void)spec; (void)out;
    return ct_error(CT_ERR_UNSUPPORTED, "%s: conv2d not available yet", path);
}

