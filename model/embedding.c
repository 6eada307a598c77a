/* Placeholder until this layer lands. */
#include "model/layers.h"

ct_status ct_embedding_create(int64_t num_embeddings, int64_t embedding_dim, int64_t padding_idx, ct_module **out) {
    (void)num_embeddings; (void)embedding_dim; (void)padding_idx; (void)out;
    return ct_error(CT_ERR_UNSUPPORTED, "embedding: not available yet");
}

ct_status ct_embedding_from_json(const json_t *spec, const char *path, ct_module **out) {
    (void)spec; (void)out;
    return ct_error(CT_ERR_UNSUPPORTED, "%s: embedding not available yet", path);
}

