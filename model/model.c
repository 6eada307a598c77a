/* Model construction and the forward/backward entry points (see model.h). */
#include "model/model.h"

#include <string.h>

/* The tree's buffers, the backward buffers of sharing modules' subtrees and the activations of
 * recomputed modules' subtrees placed last (module.h). */
static ct_status reserve(ct_model *model) {
    ct_buffer_pool backward = {0}, recompute = {0};
    ct_reserve_ctx ctx = {.arena = &model->arena, .max_batch = model->opts.max_batch, .backward = &backward,
                          .recompute = &recompute};
    model->recompute = (ct_recompute_state){0};
    ct_status s = ct_module_reserve(model->root, &ctx);
    if (s == CT_OK) s = ct_buffer_pool_bind(&backward, &model->arena);
    if (s == CT_OK) s = ct_buffer_pool_bind(&recompute, &model->arena);
    if (s == CT_OK) model->recompute = (ct_recompute_state){.base = recompute.base, .size = recompute.size};
    ct_buffer_pool_free(&backward);
    ct_buffer_pool_free(&recompute);
    return s;
}

/* The input shape must be a real per-sample shape: positive sizes, room for the batch dimension. */
static ct_status check_in_shape(const ct_shape *in) {
    bool ok = in->ndim >= 0 && in->ndim <= CT_MAX_DIMS - 1;
    for (int i = 0; ok && i < in->ndim; i++) ok = in->dims[i] >= 1;
    if (ok) return CT_OK;
    if (in->ndim < 0 || in->ndim > CT_MAX_DIMS - 1)
        return ct_error(CT_ERR_SHAPE, "model: input shape has %d dimensions (at most %d besides the batch)", in->ndim,
                        CT_MAX_DIMS - 1);
    char s[96];
    return ct_error(CT_ERR_SHAPE, "model: input shape %s has a dimension below 1", ct_sample_shape_str(in, s, sizeof s));
}

/* The element range of the gradients of m's subtree: its declared trainable parameters, which the
 * store laid out in declaration order, so a subtree's are contiguous. A range reaches up to where
 * the next trainable parameter starts (the end of the buffer after the last), so alignment gaps
 * belong to the parameter below them and adjacent modules' ranges touch. */
static void set_grad_ranges(ct_module *m, const ct_param_store *ps) {
    m->grad_lo = m->grad_hi = 0;
    bool any = false;
    for (int i = m->param_first; i < m->param_end; i++) {
        const ct_param *p = &ps->items[i];
        if (p->flags & CT_PARAM_BUFFER) continue;
        int64_t end = ct_tensor_numel(&ps->grads);
        for (int j = i + 1; j < ps->count; j++)
            if (!(ps->items[j].flags & CT_PARAM_BUFFER)) {
                end = ps->items[j].offset;
                break;
            }
        if (!any || p->offset < m->grad_lo) m->grad_lo = p->offset;
        if (!any || end > m->grad_hi) m->grad_hi = end;
        any = true;
    }
    for (int i = 0; i < m->n_children; i++) set_grad_ranges(m->children[i], ps);
}

ct_status ct_model_build(ct_model *model, ct_module *root, const ct_shape *in_shape, const ct_model_options *opts) {
    memset(model, 0, sizeof *model);
    model->root = root;
    model->opts = *opts;
    if (model->opts.dtype != CT_F32 && model->opts.dtype != CT_F64) model->opts.dtype = CT_F32;
    /* Layers initialise their parameters on the host (their init writes elements); the store
     * moves to the device after, so a model on a GPU starts from the same values as on the CPU. */
    ct_params_init(&model->params, model->opts.dtype, CT_CPU);
    ct_arena_init(&model->arena, model->opts.device);
    model->step.seed = opts->seed;
    ct_status s = CT_OK;
    if (opts->max_batch <= 0) {
        s = ct_error(CT_ERR_INVALID_ARG, "model: max_batch must be positive, got %lld", (long long)opts->max_batch);
        goto fail;
    }
    if ((s = ct_device_check(opts->device)) != CT_OK) goto fail;
    if ((s = check_in_shape(in_shape)) != CT_OK) goto fail;
    if ((s = ct_module_check(root)) != CT_OK) goto fail;
    ct_module_configure(root, model->opts.dtype, model->opts.device, &model->step);
    ct_module_assign_names(root, "");
    root->need_input_grad = false;
    model->in_shape = *in_shape;
    if ((s = ct_module_infer(root, in_shape, &model->out_shape)) != CT_OK) goto fail;
    model->in_dtype = root->in_dtype;
    if ((s = ct_module_declare(root, &model->params)) != CT_OK) goto fail;
    if ((s = ct_params_finalize(&model->params)) != CT_OK) goto fail;
    set_grad_ranges(root, &model->params);
    ct_rng rng;
    ct_rng_init(&rng, opts->seed, 0, CT_RNG_INIT);
    ct_module_init(root, &rng);
    if ((s = ct_params_move(&model->params, model->opts.device)) != CT_OK) goto fail;
    if ((s = reserve(model)) != CT_OK) goto fail;
    return CT_OK;
fail:
    ct_model_free(model);
    return s;
}

int64_t ct_model_output_classes(const ct_model *model) {
    int64_t all = model->out_shape.ndim > 0 ? model->out_shape.dims[model->out_shape.ndim - 1] : 0;
    int64_t classes = model->root ? ct_module_output_classes(model->root) : -1;
    return classes >= 0 && classes < all ? classes : all;
}

void ct_model_free(ct_model *model) {
    ct_module_destroy(model->root);
    model->root = NULL;
    ct_params_free(&model->params);
    ct_arena_reset(&model->arena);
}

ct_status ct_model_forward(ct_model *model, const ct_tensor *x, ct_tensor *y) {
    CT_TRY(ct_module_forward(model->root, x, &model->out));
    *y = model->out;
    return CT_OK;
}

ct_status ct_model_backward(ct_model *model, const ct_tensor *dy) {
    /* Layers such as ReLU compute their gradient from their output; a dy written over the output
     * would silently give wrong gradients. */
    if (dy->data && dy->data == model->out.data)
        return ct_error(CT_ERR_INVALID_ARG, "model: the output gradient must not be written into the model's output "
                        "buffer (backward still reads it); give the loss a buffer of its own");
    return ct_module_backward(model->root, dy, model->input_grad ? &model->dx : NULL);
}

ct_status ct_model_enable_input_grad(ct_model *model) {
    if (model->input_grad) return CT_OK;
    if (ct_dtype_is_float(model->in_dtype) == false)
        return ct_error(CT_ERR_DTYPE, "model: input of dtype %s has no gradient", ct_dtype_name(model->in_dtype));
    model->input_grad = true;
    model->root->need_input_grad = true;
    /* Containers pass the flag to their first child during infer; then reserve the dx buffers. */
    ct_shape out;
    CT_TRY(ct_module_infer(model->root, &model->in_shape, &out));
    return ct_model_set_max_batch(model, model->opts.max_batch);
}

const ct_tensor *ct_model_input_grad(const ct_model *model) { return model->input_grad ? &model->dx : NULL; }

void ct_model_zero_grad(ct_model *model) { ct_params_zero_grad(&model->params); }

void ct_model_set_step(ct_model *model, uint64_t step, int64_t sample_offset) {
    model->step.step = step;
    model->step.sample_offset = sample_offset;
}

void ct_model_set_known_ids(ct_model *model, const ct_tensor *ids, int64_t min, int64_t max) {
    model->step.known_ids = ids ? (struct ct_known_ids){ids->data, ids->dtype, ct_tensor_numel(ids), min, max}
                                : (struct ct_known_ids){0};
}

void ct_model_set_grads_ready(ct_model *model, ct_grads_ready_fn fn, void *ctx) {
    model->step.grads_ready = fn;
    model->step.grads_ready_ctx = ctx;
}

void ct_model_train(ct_model *model, bool training) { ct_module_train(model->root, training); }

ct_status ct_model_set_max_batch(ct_model *model, int64_t max_batch) {
    if (max_batch <= 0) return ct_error(CT_ERR_INVALID_ARG, "model: max_batch must be positive");
    ct_arena_reset(&model->arena);
    model->opts.max_batch = max_batch;
    ct_status s = reserve(model);
    if (s != CT_OK) {
        /* Some buffers may point into memory that is gone: leave none, so forward says so. */
        ct_arena_reset(&model->arena);
        ct_module_reserve_clear(model->root);
    }
    return s;
}

/* Points the outermost recomputable modules of m's subtree at state (or at nothing); returns how many. */
static int mark_recomputed(ct_module *m, ct_recompute_state *state) {
    if (m->recomputable) {
        m->recompute = state;
        return 1;
    }
    int n = 0;
    for (int i = 0; i < m->n_children; i++) n += mark_recomputed(m->children[i], state);
    return n;
}

ct_status ct_model_set_gradient_checkpointing(ct_model *model, bool enable) {
    if (model->gradient_checkpointing == enable) return CT_OK;
    if (mark_recomputed(model->root, enable ? &model->recompute : NULL) == 0 && enable)
        return ct_error(CT_ERR_INVALID_ARG, "model: gradient checkpointing recomputes blocks that declare they can be "
                        "(a GPT's transformer blocks), and this model (root '%s') has none", model->root->ops->type);
    model->gradient_checkpointing = enable;
    return ct_model_set_max_batch(model, model->opts.max_batch);
}
