/* Dropout(p) (nn.Dropout): in training, zeroes each element with probability p and scales the rest
 * by 1 / (1 - p); in eval, and for p = 0, it is the identity (the output is a view of the input).
 * p = 1 is accepted, as in PyTorch: the output and the input gradient are all zeros.
 *
 * The mask is not drawn from a stream but computed (ct_op_dropout_forward) from Philox keyed by the
 * run seed and a salt hashed from the layer's dotted name, at the counter (step, global sample index
 * = step_ctx->sample_offset + row, element index). The same sample at the same step gets the same
 * mask however the batch is split across micro-batches or ranks; renaming the layer changes it. The
 * mask of the last forward is kept as bytes for backward. */
#include <stdlib.h>

#include "core/json.h"
#include "core/ops/ops.h"
#include "core/util.h"
#include "model/layers.h"

typedef struct dropout {
    ct_module base;
    double p;
    ct_tensor mask; /* CT_U8 [max_batch, sample...] */
    ct_tensor out, dinput;
    bool identity_forward; /* the last forward passed x through */
} dropout;

static dropout *self(ct_module *m) { return ct_container_of(m, dropout, base); }

static ct_status reserve(ct_module *m, const ct_reserve_ctx *ctx) {
    dropout *d = self(m);
    if (d->p == 0.0) return CT_OK; /* always the identity */
    CT_TRY(ct_reserve_activation(ctx, m->dtype, m->device, &m->out_shape, &d->out));
    CT_TRY(ct_reserve_activation(ctx, CT_U8, m->device, &m->in_shape, &d->mask));
    if (m->need_input_grad) CT_TRY(ct_reserve_backward(ctx, m->dtype, m->device, &m->in_shape, &d->dinput));
    return CT_OK;
}

static ct_status forward(ct_module *m, const ct_tensor *x, ct_tensor *y) {
    dropout *d = self(m);
    d->identity_forward = !m->training || d->p == 0.0;
    if (d->identity_forward) {
        *y = *x;
        return CT_OK;
    }
    if (!m->step_ctx) return ct_error(CT_ERR_STATE, "training forward without a step context (build a model first)");
    ct_dropout_ctx ctx = {.step = m->step_ctx->step, .sample_offset = m->step_ctx->sample_offset};
    if (ctx.sample_offset < 0)
        return ct_error(CT_ERR_INVALID_ARG, "sample_offset %lld is negative", (long long)ctx.sample_offset);
    ct_dropout_key(m->step_ctx->seed, ct_hash_name(m->name), ctx.key);
    *y = ct_tensor_rows(&d->out, 0, x->shape[0]);
    ct_tensor mask = ct_tensor_rows(&d->mask, 0, x->shape[0]);
    ct_op_dropout_forward(x, d->p, &ctx, &mask, y);
    return CT_OK;
}

static ct_status backward(ct_module *m, const ct_tensor *dy, ct_tensor *dx) {
    dropout *d = self(m);
    if (!dx) return CT_OK; /* no parameters */
    if (d->identity_forward) {
        *dx = *dy;
        return CT_OK;
    }
    CT_ASSERT(m->need_input_grad);
    *dx = ct_tensor_rows(&d->dinput, 0, dy->shape[0]);
    ct_tensor mask = ct_tensor_rows(&d->mask, 0, dy->shape[0]);
    ct_op_dropout_backward(dy, &mask, d->p, dx);
    return CT_OK;
}

static ct_status to_json(const ct_module *m, json_t **out) {
    *out = json_pack("{s:s, s:f}", "type", "dropout", "p", ct_container_of(m, dropout, base)->p);
    return *out ? CT_OK : ct_error(CT_ERR_NOMEM, "out of memory");
}

static const ct_module_ops dropout_ops = {
    .size = sizeof(ct_module_ops), .type = "dropout", .reserve = reserve, .forward = forward, .backward = backward,
    .to_json = to_json};

ct_status ct_dropout_create(double p, ct_module **out) {
    if (!(p >= 0.0 && p <= 1.0))
        return ct_error(CT_ERR_INVALID_ARG, "dropout: p=%g is not a probability (need 0 <= p <= 1)", p);
    dropout *d = calloc(1, sizeof *d);
    if (!d) return ct_error(CT_ERR_NOMEM, "dropout: out of memory");
    ct_module_base_init(&d->base, &dropout_ops);
    d->p = p;
    *out = &d->base;
    return CT_OK;
}

/* {"type": "dropout", "p": 0.1}; p defaults to PyTorch's 0.5. */
ct_status ct_dropout_from_json(const json_t *spec, const char *path, ct_module **out) {
    static const char *const keys[] = {"type", "p", NULL};
    CT_TRY(ct_json_check_keys(spec, path, keys));
    double p;
    CT_TRY(ct_json_real(spec, path, "p", false, 0.5, &p));
    ct_status s = ct_dropout_create(p, out);
    return s == CT_OK ? s : ct_error_prefix(CT_ERR_CONFIG, "%s: ", path);
}
