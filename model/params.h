/* The parameter store: every parameter of a model in one flat buffer, every gradient in another.
 *
 * Layers declare named tensors during ct_module_declare; ct_params_finalize lays them out (each
 * start aligned to 64 bytes), allocates the flat buffers once and points each declared tensor at
 * its slice. Flat buffers are what DDP buckets, ZeRO shards, fused optimizers, checkpoints and device
 * copies work on; the names ("layers.0.weight", PyTorch's) are what checkpoints and users see.
 *
 * Buffers (batch-norm running statistics) are state without gradients; they live in a third flat
 * buffer so optimizers never touch them but checkpoints and evaluation snapshots do. */
#ifndef CT_PARAMS_H
#define CT_PARAMS_H

#include <stdbool.h>
#include <stdint.h>

#include "core/tensor.h"
#include "model/module.h"

typedef enum ct_param_flags {
    CT_PARAM_NO_DECAY = 1, /* biases and LayerNorm weights: excluded from weight decay, as Hugging Face does */
    CT_PARAM_BUFFER = 2,   /* not trainable: no gradient, not seen by optimizers */
    CT_PARAM_EMBEDDING = 4, /* an embedding's table: left out of the FLOPs per token, as Hugging Face's
                             * num_parameters(exclude_embeddings=True) leaves nn.Embedding's weight out */
} ct_param_flags;

typedef struct ct_param {
    char name[256];
    int ndim;
    int64_t shape[CT_MAX_DIMS];
    int64_t offset; /* element offset into the flat buffer (params or buffers) */
    int64_t numel;
    unsigned flags;
    ct_tensor *value; /* the layer's tensor, bound at finalize */
    ct_tensor *grad;  /* the layer's gradient tensor (NULL for buffers) */
} ct_param;

struct ct_param_store {
    ct_dtype dtype;
    ct_device device;
    ct_param *items;
    int count, cap;
    bool finalized;
    ct_tensor values;  /* 1-D flat parameters */
    ct_tensor grads;   /* 1-D flat gradients, same layout */
    ct_tensor buffers; /* 1-D flat non-trainable state */
};

void ct_params_init(ct_param_store *ps, ct_dtype dt, ct_device dev);
void ct_params_free(ct_param_store *ps);

/* Declares "<owner name>.<local>" with the given shape; value (and grad unless BUFFER) are bound at
 * finalize. Duplicate names are an error. */
ct_status ct_params_declare(ct_param_store *ps, const ct_module *owner, const char *local, int ndim,
                            const int64_t *shape, unsigned flags, ct_tensor *value, ct_tensor *grad);
ct_status ct_params_finalize(ct_param_store *ps);
/* Moves the finalized flat buffers to dev (values, gradients and buffers copied) and points every
 * declared tensor at its new slice; the old memory is freed. On failure nothing has moved. */
ct_status ct_params_move(ct_param_store *ps, ct_device dev);

/* Looks a parameter or buffer up by full name; NULL if absent. */
const ct_param *ct_params_find(const ct_param_store *ps, const char *name);
/* Total trainable elements (excluding alignment padding). */
int64_t ct_params_count(const ct_param_store *ps);
/* Zeroes the flat gradient buffer. */
void ct_params_zero_grad(ct_param_store *ps);

#endif
