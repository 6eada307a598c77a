/* Placeholder until this layer lands. */
#include "model/layers.h"

ct_status ct_dropout_create(double p, ct_module **out) {
    (void)p; (void)out;
    return ct_error(CT_ERR_UNSUPPORTED, "dropout: not available yet");
}

ct_status ct_dropout_from_json(const json_t *spec, const char *path, ct_module **out) {
    (void)spec; (void)out;
    return ct_error(CT_ERR_UNSUPPORTED, "%s: dropout not available yet", path);
}

