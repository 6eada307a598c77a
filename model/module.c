/* The module wrappers: the single place where every layer call is validated and its errors get the
 * layer's type and name. Containers' errors come from their children, already named, so only
 * leaves prefix their own. */
#include "model/module.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ops/ops.h"
#include "core/vtable.h"
#include "model/params.h"

void ct_module_base_init(ct_module *m, const ct_module_ops *ops) {
    memset(m, 0, sizeof *m);
    m->ops = ops;
    m->training = true;
    m->dtype = CT_F32;
    m->in_dtype = CT_F32;
    m->device = CT_CPU;
    m->need_input_grad = true;
    m->batch = -1;
}

ct_status ct_module_check(const ct_module *m) {
    if (!m) return ct_error(CT_ERR_INVALID_ARG, "module is NULL");
    const char *who = m->name[0] ? m->name : m->local_name[0] ? m->local_name : "model";
    ct_status s = CT_OPS_CHECK_SIZE(ct_module_ops, m->ops, type);
    if (s == CT_OK) s = CT_OPS_CHECK_MEMBER(ct_module_ops, m->ops, type, "names the layer in errors and in model files");
    /* A container's children compute; a leaf without forward could never run. */
    if (s == CT_OK && m->n_children == 0)
        s = CT_OPS_CHECK_MEMBER(ct_module_ops, m->ops, forward, "computes a layer without children");
    if (s != CT_OK) return ct_error_prefix(s, "layer '%s': ", who);
    for (int i = 0; i < m->n_children; i++) CT_TRY(ct_module_check(m->children[i]));
    return CT_OK;
}

ct_status ct_module_add_child(ct_module *parent, ct_module *child, const char *local_name) {
    ct_module **grown = realloc(parent->children, (size_t)(parent->n_children + 1) * sizeof *grown);
    if (!grown) return ct_error(CT_ERR_NOMEM, "module: out of memory");
    parent->children = grown;
    if (local_name)
        snprintf(child->local_name, sizeof child->local_name, "%s", local_name);
    else
        snprintf(child->local_name, sizeof child->local_name, "%d", parent->n_children);
    parent->children[parent->n_children++] = child;
    return CT_OK;
}

static const char *display_name(const ct_module *m) { return m->name[0] ? m->name : "model"; }

static ct_status named(const ct_module *m, ct_status s) {
    if (s == CT_OK || m->n_children > 0) return s;
    return ct_error_prefix(s, "%s '%s': ", m->ops->type, display_name(m));
}

struct ct_buffer_pending {
    ct_tensor *tensor;
    size_t offset;
};

/* A tensor of [max_batch, shape...] given an offset in pool's open scope (its memory comes at bind). */
static ct_status pool_place(ct_buffer_pool *pool, ct_dtype dt, ct_device dev, int ndim, const int64_t *full,
                            size_t bytes, ct_tensor *out) {
    if (pool->n_pending == pool->cap_pending) {
        int cap = pool->cap_pending ? 2 * pool->cap_pending : 16;
        struct ct_buffer_pending *grown = realloc(pool->pending, (size_t)cap * sizeof *grown);
        if (!grown) return ct_error(CT_ERR_NOMEM, "reserve: out of memory");
        pool->pending = grown;
        pool->cap_pending = cap;
    }
    *out = ct_tensor_view(NULL, dt, dev, ndim, full);
    pool->pending[pool->n_pending++] = (struct ct_buffer_pending){out, pool->offset};
    /* each buffer on its own 64-byte line, as the arena aligns them */
    if (bytes > SIZE_MAX - pool->offset - 63)
        return ct_error(CT_ERR_NOMEM, "reserve: shared buffers of %zu bytes overflow", bytes);
    pool->offset += (bytes + 63) / 64 * 64;
    if (pool->offset > pool->size) pool->size = pool->offset;
    return CT_OK;
}

/* From pool's open scope when there is one, else from the arena. */
static ct_status reserve_in(const ct_reserve_ctx *ctx, ct_buffer_pool *pool, ct_dtype dt, ct_device dev,
                            const ct_shape *shape, ct_tensor *out) {
    int ndim;
    int64_t full[CT_MAX_DIMS];
    ct_shape_with_batch(shape, ctx->max_batch, &ndim, full);
    size_t bytes;
    CT_TRY(ct_shape_nbytes(ndim, full, dt, &bytes));
    if (pool && pool->open) return pool_place(pool, dt, dev, ndim, full, bytes, out);
    *out = ct_tensor_view(NULL, dt, dev, ndim, full);
    return ct_arena_alloc(ctx->arena, bytes, &out->data);
}

/* pool when its scope is open for a descendant of its owner (or, scoped, for the owner itself). */
static ct_buffer_pool *scope_of(const ct_reserve_ctx *ctx, ct_buffer_pool *pool, bool scoped) {
    if (!pool || !pool->open) return NULL;
    return (pool->owner == ctx->module) == scoped ? pool : NULL;
}

/* Outside a sharing module, a backward buffer is placed as an activation is: a recomputed module's
 * subtree holds both only during its own backward. */
static ct_buffer_pool *backward_pool(const ct_reserve_ctx *ctx, bool scoped) {
    ct_buffer_pool *pool = scope_of(ctx, ctx->backward, scoped);
    return pool ? pool : scope_of(ctx, ctx->recompute, scoped);
}

ct_status ct_reserve_activation(const ct_reserve_ctx *ctx, ct_dtype dt, ct_device dev, const ct_shape *shape,
                                ct_tensor *out) {
    return reserve_in(ctx, scope_of(ctx, ctx->recompute, false), dt, dev, shape, out);
}

ct_status ct_reserve_backward(const ct_reserve_ctx *ctx, ct_dtype dt, ct_device dev, const ct_shape *shape,
                              ct_tensor *out) {
    return reserve_in(ctx, backward_pool(ctx, false), dt, dev, shape, out);
}

ct_status ct_reserve_scoped_activation(const ct_reserve_ctx *ctx, ct_dtype dt, ct_device dev, const ct_shape *shape,
                                       ct_tensor *out) {
    ct_buffer_pool *own = scope_of(ctx, ctx->recompute, true);
    return own ? reserve_in(ctx, own, dt, dev, shape, out) : ct_reserve_activation(ctx, dt, dev, shape, out);
}

ct_status ct_reserve_scoped_backward(const ct_reserve_ctx *ctx, ct_dtype dt, ct_device dev, const ct_shape *shape,
                                     ct_tensor *out) {
    ct_buffer_pool *own = scope_of(ctx, ctx->backward, true);
    return own ? reserve_in(ctx, own, dt, dev, shape, out) : ct_reserve_backward(ctx, dt, dev, shape, out);
}

ct_status ct_buffer_pool_bind(ct_buffer_pool *pool, ct_arena *arena) {
    if (pool->n_pending == 0) return CT_OK;
    void *base;
    CT_TRY(ct_arena_alloc(arena, pool->size, &base));
    pool->base = base;
    for (int i = 0; i < pool->n_pending; i++) pool->pending[i].tensor->data = (char *)base + pool->pending[i].offset;
    return CT_OK;
}

void ct_buffer_pool_free(ct_buffer_pool *pool) {
    free(pool->pending);
    *pool = (ct_buffer_pool){0};
}

bool ct_module_fuse_activation(ct_module *m, int act) {
    const ct_module_ops *o = m->ops;
    return o->size > offsetof(ct_module_ops, fuse_activation) && o->fuse_activation && o->fuse_activation(m, act);
}

bool ct_module_fuse_maxpool(ct_module *m, const struct ct_pool2d_geom *pool) {
    const ct_module_ops *o = m->ops;
    return o->size > offsetof(ct_module_ops, fuse_maxpool) && o->fuse_maxpool && o->fuse_maxpool(m, pool);
}

int64_t ct_module_output_classes(const ct_module *m) {
    const ct_module_ops *o = m->ops;
    return o->size > offsetof(ct_module_ops, output_classes) && o->output_classes ? o->output_classes(m) : -1;
}

bool ct_module_may_have_params(const ct_module *m) {
    if (m->ops->declare) return true;
    for (int i = 0; i < m->n_children; i++)
        if (ct_module_may_have_params(m->children[i])) return true;
    return false;
}

double ct_module_forward_flops(const ct_module *m) {
    const ct_module_ops *o = m->ops;
    double f = o->size > offsetof(ct_module_ops, forward_flops) && o->forward_flops ? o->forward_flops(m) : 0.0;
    for (int i = 0; i < m->n_children; i++) f += ct_module_forward_flops(m->children[i]);
    return f;
}

ct_status ct_module_infer(ct_module *m, const ct_shape *in, ct_shape *out) {
    m->in_shape = *in;
    ct_shape result = *in;
    if (m->ops->infer) CT_TRY(named(m, m->ops->infer(m, in, &result)));
    if (result.ndim + 1 > CT_MAX_DIMS)
        return named(m, ct_error(CT_ERR_SHAPE, "output has %d dimensions (at most %d)", result.ndim + 1,
                                 CT_MAX_DIMS));
    m->out_shape = result;
    *out = result;
    return CT_OK;
}

ct_status ct_module_declare(ct_module *m, ct_param_store *ps) {
    m->param_first = ps->count;
    if (m->ops->declare) CT_TRY(named(m, m->ops->declare(m, ps)));
    for (int i = 0; i < m->n_children; i++) CT_TRY(ct_module_declare(m->children[i], ps));
    m->param_end = ps->count;
    return CT_OK;
}

void ct_module_init(ct_module *m, ct_rng *rng) {
    if (m->ops->init) m->ops->init(m, rng);
    for (int i = 0; i < m->n_children; i++) ct_module_init(m->children[i], rng);
}

/* Opens pool's scope for m when want says m starts one and none is open (nested ones stay in the
 * outer scope); returns whether it did. */
static bool scope_open(ct_buffer_pool *pool, bool want, const ct_module *m) {
    if (!want || !pool || pool->open) return false;
    pool->open = true;
    pool->offset = 0;
    pool->owner = m;
    return true;
}

ct_status ct_module_reserve(ct_module *m, const ct_reserve_ctx *ctx) {
    m->max_batch = ctx->max_batch;
    m->batch = -1; /* inputs saved by an earlier forward pointed into the old buffers */
    if (m->recompute) m->recompute->holder = NULL;
    /* a sharing (or recomputed) module's descendants start a scope at the region's start, which its
     * own buffers join only when it asks (ct_reserve_scoped_*) */
    const bool backward_scope = scope_open(ctx->backward, m->shares_backward, m);
    const bool recompute_scope = scope_open(ctx->recompute, m->recompute != NULL, m);
    ct_reserve_ctx own = *ctx;
    own.module = m;
    ct_status s = m->ops->reserve ? named(m, m->ops->reserve(m, &own)) : CT_OK;
    for (int i = 0; i < m->n_children && s == CT_OK; i++) s = ct_module_reserve(m->children[i], ctx);
    if (backward_scope) ctx->backward->open = false;
    if (recompute_scope) ctx->recompute->open = false;
    return s;
}

/* Checks that x is [B, in_shape...] with B <= max_batch, of the input dtype, on the module's device. */
static ct_status check_input(const ct_module *m, const ct_tensor *x) {
    if (x->ndim >= 1 && x->shape[0] == 0)
        return ct_error(CT_ERR_SHAPE, "empty batch (0 rows): a rank without samples must skip forward");
    bool fits = x->dtype == m->in_dtype && ct_device_eq(x->device, m->device) && x->ndim == m->in_shape.ndim + 1 &&
                x->shape[0] <= m->max_batch;
    for (int i = 0; fits && i < m->in_shape.ndim; i++) fits = x->shape[i + 1] == m->in_shape.dims[i];
    if (fits) return CT_OK;
    char got[128], want[96], dev[32];
    ct_tensor_str(x, got, sizeof got);
    ct_sample_shape_str(&m->in_shape, want, sizeof want);
    if (x->shape[0] > m->max_batch && x->ndim == m->in_shape.ndim + 1)
        return ct_error(CT_ERR_SHAPE, "input %s has batch %lld, more than the %lld the model was set up for",
                        got, (long long)x->shape[0], (long long)m->max_batch);
    ct_status s = x->dtype != m->in_dtype ? CT_ERR_DTYPE
                  : !ct_device_eq(x->device, m->device) ? CT_ERR_DEVICE
                                                          : CT_ERR_SHAPE;
    return ct_error(s, "input %s does not fit: expected %s %s %s", got, want, ct_dtype_name(m->in_dtype),
                    ct_device_str(m->device, dev, sizeof dev));
}

/* What every forward checks first (m can run, x fits it), and the batch it records. */
static ct_status begin_forward(ct_module *m, const ct_tensor *x) {
    if (!m->ops->forward)
        return ct_error(CT_ERR_STATE, "%s '%s': has no forward", m->ops->type, display_name(m));
    if (m->max_batch <= 0)
        return ct_error(CT_ERR_STATE, "%s '%s': no activation buffers (the model was not built, or resizing it "
                        "failed)", m->ops->type, display_name(m));
    ct_status s = check_input(m, x);
    if (s != CT_OK) return ct_error_prefix(s, "%s '%s': ", m->ops->type, display_name(m));
    m->batch = x->shape[0];
    return CT_OK;
}

ct_status ct_module_forward(ct_module *m, const ct_tensor *x, ct_tensor *y) {
    CT_TRY(begin_forward(m, x));
    /* A copy: layers may set *y before they have read *x, and callers may pass one tensor for both. */
    ct_tensor input = *x;
    if (!m->recompute) return named(m, m->ops->forward(m, &input, y));
    ct_recompute_state *r = m->recompute;
    r->holder = NULL; /* until this forward has written the region whole */
    const ct_step_ctx *step = m->step_ctx;
    m->recompute_input = (struct ct_recompute_input){.x = input, .training = m->training,
                                                     .seed = step ? step->seed : 0, .step = step ? step->step : 0,
                                                     .sample_offset = step ? step->sample_offset : 0};
    CT_TRY(named(m, m->ops->forward(m, &input, y)));
    const char *p = y->data;
    if (r->base && p >= r->base && p < r->base + r->size)
        return ct_error(CT_ERR_STATE, "%s '%s': its output lies in the shared activation region, which the next "
                        "module's forward overwrites; a recomputable module must write its output into a buffer "
                        "of its own", m->ops->type, display_name(m));
    r->holder = m;
    return CT_OK;
}

bool ct_module_ids_known_below(const ct_module *m, const ct_tensor *ids, int64_t limit) {
    const struct ct_known_ids *k = m->step_ctx ? &m->step_ctx->known_ids : NULL;
    return k && k->data && k->data == ids->data && k->dtype == ids->dtype && k->numel == ct_tensor_numel(ids) &&
           k->min >= 0 && k->max < limit;
}

/* Gradient checkpointing: the activations of m's descendants, made again from the input of its last
 * forward when the shared region holds another module's. Dropout's masks are keyed by the step
 * context, so the second forward makes the same activations only in the mode and step of the first:
 * a change in between (a training step set, or evaluation mode, before the backward of the last
 * forward) is an error rather than gradients of other activations. */
static ct_status recompute_forward(ct_module *m) {
    const struct ct_recompute_input *in = &m->recompute_input;
    const ct_step_ctx *step = m->step_ctx;
    if (in->training != m->training || (step && (step->seed != in->seed || step->step != in->step ||
                                                 step->sample_offset != in->sample_offset)))
        return ct_error(CT_ERR_STATE, "%s '%s': gradient checkpointing runs its forward again in backward, and since "
                        "its last forward the %s changed; call backward before setting another step or mode",
                        m->ops->type, display_name(m), in->training != m->training ? "training mode" : "step");
    if (m->recompute->holder == m) return CT_OK;
    ct_tensor y, x = in->x;
    return ct_module_forward(m, &x, &y);
}

ct_status ct_module_forward_residual(ct_module *m, const ct_tensor *x, const ct_tensor *residual, ct_tensor *sum,
                                     ct_tensor *y) {
    if (!CT_OPS_HAS(m->ops, ct_module_ops, forward_residual) || m->recompute) {
        ct_op_add(x, residual, sum);
        return ct_module_forward(m, sum, y);
    }
    CT_TRY(begin_forward(m, x));
    ct_status s = check_input(m, residual);
    if (s != CT_OK) return ct_error_prefix(s, "%s '%s': residual: ", m->ops->type, display_name(m));
    return named(m, m->ops->forward_residual(m, x, residual, sum, y));
}

/* What every backward checks first: a forward to take the gradient of, and dy its output's. */
static ct_status begin_backward(ct_module *m, const ct_tensor *dy) {
    if (!m->ops->backward)
        return ct_error(CT_ERR_STATE, "%s '%s': has no backward", m->ops->type, display_name(m));
    if (m->batch < 0)
        return ct_error(CT_ERR_STATE, "%s '%s': backward without a forward since the model's buffers were (re)made",
                        m->ops->type, display_name(m));
    bool fits = dy->dtype == m->dtype && ct_device_eq(dy->device, m->device) && dy->ndim == m->out_shape.ndim + 1 &&
                dy->shape[0] == m->batch;
    for (int i = 0; fits && i < m->out_shape.ndim; i++) fits = dy->shape[i + 1] == m->out_shape.dims[i];
    if (!fits) {
        char got[128], want[96];
        ct_tensor_str(dy, got, sizeof got);
        ct_sample_shape_str(&m->out_shape, want, sizeof want);
        return ct_error(CT_ERR_SHAPE, "%s '%s': output gradient %s does not match the output %s of the last "
                        "forward (batch %lld, %s)", m->ops->type, display_name(m), got, want,
                        (long long)m->batch, ct_dtype_name(m->dtype));
    }
    return CT_OK;
}

/* After a backward: its gradients are done (DDP starts the all-reduce of the buckets they fill). */
static ct_status end_backward(ct_module *m) {
    const ct_step_ctx *ctx = m->step_ctx;
    if (ctx && ctx->grads_ready && m->grad_hi > m->grad_lo)
        return ctx->grads_ready(ctx->grads_ready_ctx, m);
    return CT_OK;
}

ct_status ct_module_backward(ct_module *m, const ct_tensor *dy, ct_tensor *dx) {
    CT_TRY(begin_backward(m, dy));
    ct_tensor grad = *dy;
    if (m->recompute) {
        CT_TRY(recompute_forward(m));
        m->recompute->holder = NULL; /* a backward may overwrite activations it no longer needs */
    }
    CT_TRY(named(m, m->ops->backward(m, &grad, dx)));
    return end_backward(m);
}

ct_status ct_module_backward_residual(ct_module *m, const ct_tensor *dy, const ct_tensor *dresidual, ct_tensor *dx) {
    if (!m->need_input_grad)
        return ct_error(CT_ERR_STATE, "%s '%s': a backward with the residual path's gradient makes the input "
                        "gradient, which the module was built without", m->ops->type, display_name(m));
    if (!CT_OPS_HAS(m->ops, ct_module_ops, backward_residual) || m->recompute) {
        ct_tensor h;
        CT_TRY(ct_module_backward(m, dy, &h));
        ct_op_add(dresidual, &h, dx);
        return CT_OK;
    }
    CT_TRY(begin_backward(m, dy));
    ct_tensor grad = *dy;
    CT_TRY(named(m, m->ops->backward_residual(m, &grad, dresidual, dx)));
    return end_backward(m);
}

void ct_module_destroy(ct_module *m) {
    if (!m) return;
    for (int i = 0; i < m->n_children; i++) ct_module_destroy(m->children[i]);
    free(m->children);
    m->children = NULL;
    if (m->ops && CT_OPS_HAS(m->ops, ct_module_ops, destroy))
        m->ops->destroy(m);
    else
        free(m);
}

void ct_module_reserve_clear(ct_module *m) {
    m->max_batch = 0;
    m->batch = -1;
    for (int i = 0; i < m->n_children; i++) ct_module_reserve_clear(m->children[i]);
}

void ct_module_train(ct_module *m, bool training) {
    m->training = training;
    for (int i = 0; i < m->n_children; i++) ct_module_train(m->children[i], training);
}

void ct_module_configure(ct_module *m, ct_dtype dt, ct_device dev, const ct_step_ctx *ctx) {
    m->dtype = dt;
    m->in_dtype = dt;
    m->device = dev;
    m->step_ctx = ctx;
    for (int i = 0; i < m->n_children; i++) ct_module_configure(m->children[i], dt, dev, ctx);
}

void ct_module_assign_names(ct_module *m, const char *prefix) {
    snprintf(m->name, sizeof m->name, "%s", prefix);
    for (int i = 0; i < m->n_children; i++) {
        ct_module *c = m->children[i];
        char child[sizeof m->name];
        if (prefix[0])
            snprintf(child, sizeof child, "%s.%s", prefix, c->local_name);
        else
            snprintf(child, sizeof child, "%s", c->local_name);
        ct_module_assign_names(c, child);
    }
}
