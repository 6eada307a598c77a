/* Placeholder until this layer lands. */
#include "model/layers.h"

ct_status ct_maxpool2d_create(const ct_pool2d_config *cfg, ct_module **out) {
    (void)cfg; (void)out;
    return ct_error(CT_ERR_UNSUPPORTED, "maxpool2d: not available yet");
}

ct_status ct_maxpool2d_from_json(const json_t *spec, const char *path, ct_module **out) {
    (void)spec; (void)out;
    return ct_error(CT_ERR_UNSUPPORTED, "%s: maxpool2d not available yet", path);
}

ct_status ct_avgpool2d_create(const ct_pool2d_config *cfg, ct_module **out) {
    (void)cfg; (void)out;
    return ct_error(CT_ERR_UNSUPPORTED, "avgpool2d: not available yet");
}

ct_status ct_avgpool2d_from_json(const json_t *spec, const char *path, ct_module **out) {
    (void)spec; (void)out;
    return ct_error(CT_ERR_UNSUPPORTED, "%s: avgpool2d not available yet", path);
}

