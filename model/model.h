/* A model: a module tree built for an input shape, with its parameter store and activation arena.
 *
 * ct_model_build runs the module lifecycle (infer, declare, finalize the flat buffers, init,
 * reserve for the largest batch). After that, forward and backward on any batch up to max_batch
 * allocate nothing. The model owns its root module. */
#ifndef CT_MODEL_H
#define CT_MODEL_H

#include "core/arena.h"
#include "model/module.h"
#include "model/params.h"

typedef struct ct_model_options {
    ct_dtype dtype;     /* CT_F32 (default when 0) or CT_F64 */
    ct_device device;
    int64_t max_batch;  /* largest batch forward will see */
    uint64_t seed;      /* parameter initialisation and dropout */
} ct_model_options;

typedef struct ct_model {
    ct_module *root;
    ct_param_store params;
    ct_arena arena;
    ct_step_ctx step;
    ct_shape in_shape, out_shape;
    ct_dtype in_dtype;
    ct_model_options opts;
    bool input_grad;
    ct_tensor dx;  /* gradient of the input after backward, when enabled */
    ct_tensor out; /* the output of the last forward (the model's own buffer) */
    bool gradient_checkpointing;   /* ct_model_set_gradient_checkpointing */
    ct_recompute_state recompute;  /* its shared region, and whose activations it holds */
} ct_model;

/* Takes ownership of root (also on failure, when it is destroyed). */
ct_status ct_model_build(ct_model *model, ct_module *root, const ct_shape *in_shape, const ct_model_options *opts);
void ct_model_free(ct_model *model);

/* How many leading entries of the output's last dimension are classes a label may name: the root's
 * output_classes (a GPT's vocab_size of its padded vocabulary), else all of them. */
int64_t ct_model_output_classes(const ct_model *model);

/* y is a view of the model's own buffer: read it, never write into it (backward still reads it). */
ct_status ct_model_forward(ct_model *model, const ct_tensor *x, ct_tensor *y);
/* Backpropagates dy (the gradient of the output of the last forward, in memory of the caller's:
 * not the output buffer itself); accumulates gradients. */
ct_status ct_model_backward(ct_model *model, const ct_tensor *dy);
void ct_model_zero_grad(ct_model *model);
/* Sets what counter-based randomness (dropout) is keyed by for the next forward: the global step
 * and the global position of the batch's first sample. */
void ct_model_set_step(ct_model *model, uint64_t step, int64_t sample_offset);
/* Records that the integer ids of tensor ids (on the model's device) lie in [min, max] (the Trainer
 * finds them on the host as it uploads a batch: trainer/device_batch.c), so that the layers given
 * exactly those ids need not read them back to check them (ct_module_ids_known_below); ids NULL
 * forgets the record. The caller keeps the record true: it forgets it before that memory is freed or
 * written with other ids. */
void ct_model_set_known_ids(ct_model *model, const ct_tensor *ids, int64_t min, int64_t max);
/* Until called again with NULL, the backward of every module with parameters ends with fn(ctx, m):
 * the gradients of m's subtree, [m->grad_lo, m->grad_hi) of the flat buffer, got their last
 * contribution of this pass (unless a module whose backward runs later uses them too: shared
 * weights). Parameters are laid out in forward order and backward runs in reverse, so after a
 * module's call every gradient from its grad_lo to the end is final; the root's call ends the pass. */
void ct_model_set_grads_ready(ct_model *model, ct_grads_ready_fn fn, void *ctx);
void ct_model_train(ct_model *model, bool training);
/* Makes backward also produce the gradient of the model's input (tests, input attribution);
 * call after build, then ct_model_input_grad gives it after each backward. */
ct_status ct_model_enable_input_grad(ct_model *model);
const ct_tensor *ct_model_input_grad(const ct_model *model);
/* Re-reserves activations for a new largest batch (frees the old ones). On failure the model has
 * no activation buffers: forward reports that until a later call succeeds. */
ct_status ct_model_set_max_batch(ct_model *model, int64_t max_batch);
/* Gradient checkpointing (Hugging Face's gradient_checkpointing, PyTorch's torch.utils.checkpoint
 * around each block): the outermost modules that declare themselves recomputable (module.h: a GPT's
 * transformer blocks) keep only their input and output from the forward; their descendants'
 * activations share one region, and each such module's backward first runs its forward again on the
 * kept input (except the last one's, whose activations the region still holds). Gradients and
 * losses are the same bits as without; activation memory drops from one set per block to one set in
 * all, for about one more forward pass of the blocks per step. Re-reserves the buffers (as
 * ct_model_set_max_batch does). CT_ERR_INVALID_ARG when enabling it on a model without such modules. */
ct_status ct_model_set_gradient_checkpointing(ct_model *model, bool enable);

#endif
