/* Embedding (nn.Embedding): int64 token ids of any per-sample shape [T...] -> [T..., dim] rows of
 * "weight" [num_embeddings, dim], initialised N(0, 1) as PyTorch does. padding_idx (-1: none) names
 * a row that is zeroed at init and never receives a gradient (its output is still that row, as in
 * PyTorch). Ids outside [0, num_embeddings) are a CT_ERR_INVALID_ARG naming the id and its position,
 * found before anything is written (without reading them from the device where the host knows them:
 * ct_module_ids_known_below, ct_embedding_trust_ids). The input has no gradient: an embedding starts a
 * model. */
#include <stdio.h>
#include <stdlib.h>

#include "core/json.h"
#include "core/ops/ops.h"
#include "core/util.h"
#include "model/layers.h"
#include "model/params.h"

typedef struct embedding {
    ct_module base;
    int64_t num_embeddings, dim, padding_idx;
    bool trusted; /* ct_embedding_trust_ids: the owner makes the ids valid */
    ct_tensor weight, dweight;
    ct_tensor out;
    ct_tensor ids; /* the last input, for backward */
} embedding;

static embedding *self(ct_module *m) { return ct_container_of(m, embedding, base); }

static ct_status infer(ct_module *m, const ct_shape *in, ct_shape *out) {
    embedding *e = self(m);
    m->in_dtype = CT_I64;
    if (in->ndim + 1 > CT_MAX_DIMS - 1) {
        char s[96];
        return ct_error(CT_ERR_SHAPE, "input %s has too many dimensions for an output with one more",
                        ct_sample_shape_str(in, s, sizeof s));
    }
    *out = *in;
    out->dims[out->ndim++] = e->dim;
    return CT_OK;
}

static ct_status declare(ct_module *m, ct_param_store *ps) {
    embedding *e = self(m);
    int64_t shape[2] = {e->num_embeddings, e->dim};
    return ct_params_declare(ps, m, "weight", 2, shape, CT_PARAM_EMBEDDING, &e->weight, &e->dweight);
}

static void init(ct_module *m, ct_rng *rng) {
    embedding *e = self(m);
    int64_t n = ct_tensor_numel(&e->weight);
    for (int64_t i = 0; i < n; i++) ct_tensor_set(&e->weight, i, ct_rng_normal(rng));
    if (e->padding_idx >= 0)
        for (int64_t j = 0; j < e->dim; j++) ct_tensor_set(&e->weight, e->padding_idx * e->dim + j, 0.0);
}

static ct_status reserve(ct_module *m, const ct_reserve_ctx *ctx) {
    embedding *e = self(m);
    return ct_reserve_activation(ctx, m->dtype, m->device, &m->out_shape, &e->out);
}

static ct_status forward(ct_module *m, const ct_tensor *x, ct_tensor *y) {
    embedding *e = self(m);
    bool known = e->trusted || ct_module_ids_known_below(m, x, e->num_embeddings);
    int64_t bad = known ? -1 : ct_op_embedding_find_invalid(x, e->num_embeddings);
    if (bad >= 0) {
        /* The position as a full index [b, t, ...], which is how the user's data is laid out. */
        char pos[160];
        int len = 0;
        int64_t rest = bad;
        int64_t idx[CT_MAX_DIMS];
        for (int d = x->ndim - 1; d >= 0; d--) {
            idx[d] = rest % x->shape[d];
            rest /= x->shape[d];
        }
        for (int d = 0; d < x->ndim && len < (int)sizeof pos; d++)
            len += snprintf(pos + len, sizeof pos - (size_t)len, "%s%lld", d ? ", " : "[", (long long)idx[d]);
        if (len < (int)sizeof pos) snprintf(pos + len, sizeof pos - (size_t)len, "]");
        return ct_error(CT_ERR_INVALID_ARG, "token id %lld at position %s is outside [0, %lld) (num_embeddings=%lld)",
                        (long long)ct_tensor_item(x, bad), pos, (long long)e->num_embeddings,
                        (long long)e->num_embeddings);
    }
    e->ids = *x;
    *y = ct_tensor_rows(&e->out, 0, x->shape[0]);
    ct_op_embedding_forward(x, &e->weight, y);
    return CT_OK;
}

static ct_status backward(ct_module *m, const ct_tensor *dy, ct_tensor *dx) {
    embedding *e = self(m);
    if (dx) return ct_error(CT_ERR_STATE, "token ids have no gradient; an embedding must be the first layer");
    ct_op_embedding_backward(&e->ids, dy, e->padding_idx, &e->dweight);
    return CT_OK;
}

static ct_status to_json(const ct_module *m, json_t **out) {
    const embedding *e = ct_container_of(m, embedding, base);
    *out = json_pack("{s:s, s:I, s:I}", "type", "embedding", "num_embeddings", (json_int_t)e->num_embeddings,
                     "embedding_dim", (json_int_t)e->dim);
    if (*out && e->padding_idx >= 0) json_object_set_new(*out, "padding_idx", json_integer(e->padding_idx));
    return *out ? CT_OK : ct_error(CT_ERR_NOMEM, "out of memory");
}

static const ct_module_ops embedding_ops = {
    .size = sizeof(ct_module_ops),
    .type = "embedding",
    .infer = infer,
    .declare = declare,
    .init = init,
    .reserve = reserve,
    .forward = forward,
    .backward = backward,
    .to_json = to_json,
};

ct_status ct_embedding_create(int64_t num_embeddings, int64_t embedding_dim, int64_t padding_idx, ct_module **out) {
    if (num_embeddings <= 0 || embedding_dim <= 0)
        return ct_error(CT_ERR_INVALID_ARG, "embedding: num_embeddings=%lld embedding_dim=%lld (need both > 0)",
                        (long long)num_embeddings, (long long)embedding_dim);
    if (padding_idx < -1 || padding_idx >= num_embeddings)
        return ct_error(CT_ERR_INVALID_ARG, "embedding: padding_idx=%lld is not a row of the %lld embeddings "
                        "(-1 for none)", (long long)padding_idx, (long long)num_embeddings);
    embedding *e = calloc(1, sizeof *e);
    if (!e) return ct_error(CT_ERR_NOMEM, "embedding: out of memory");
    ct_module_base_init(&e->base, &embedding_ops);
    e->base.in_dtype = CT_I64;
    e->num_embeddings = num_embeddings;
    e->dim = embedding_dim;
    e->padding_idx = padding_idx;
    *out = &e->base;
    return CT_OK;
}

void ct_embedding_trust_ids(ct_module *m) {
    CT_ASSERT(m && m->ops == &embedding_ops);
    self(m)->trusted = true;
}

/* {"type": "embedding", "num_embeddings": 1000, "embedding_dim": 64, "padding_idx": 0}; padding_idx
 * absent or null means none; unlike PyTorch it may not be negative (count rows from 0). */
ct_status ct_embedding_from_json(const json_t *spec, const char *path, ct_module **out) {
    static const char *const keys[] = {"type", "num_embeddings", "embedding_dim", "padding_idx", NULL};
    CT_TRY(ct_json_check_keys(spec, path, keys));
    int64_t num, dim, pad = -1;
    CT_TRY(ct_json_int(spec, path, "num_embeddings", true, 0, &num));
    CT_TRY(ct_json_int(spec, path, "embedding_dim", true, 0, &dim));
    json_t *pv = json_object_get(spec, "padding_idx");
    if (pv && !json_is_null(pv)) {
        CT_TRY(ct_json_int(spec, path, "padding_idx", false, -1, &pad));
        if (pad < 0)
            return ct_error(CT_ERR_CONFIG, "%s.padding_idx: %lld is negative; give the row as an index in [0, %lld) "
                            "or leave it out for none", path, (long long)pad, (long long)num);
    }
    ct_status s = ct_embedding_create(num, dim, pad, out);
    return s == CT_OK ? s : ct_error_prefix(CT_ERR_CONFIG, "%s: ", path);
}
