/* Placeholder until this layer lands. */
#include "model/layers.h"

ct_status ct_batchnorm2d_create(int64_t num_features, double eps, double momentum, bool affine, ct_module **out) {
    (void)num_features; (void)eps; (void)momentum; (void)affine; (void)out;
    return ct_error(CT_ERR_UNSUPPORTED, "batchnorm2d: not available yet");
}

ct_status ct_batchnorm2d_from_json(const json_t *spec, const char *path, ct_module **out) {
    (void)spec; (void)out;
    return ct_error(CT_ERR_UNSUPPORTED, "%s: batchnorm2d not available yet", path);
}

