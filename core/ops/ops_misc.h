/* Ops: dropout and embedding lookup. Included by core/ops/ops.h; CPU kernels in backends/cpu/misc.c.
 *
 * Dropout masks come from Philox (core/rng.h) evaluated at a counter made of the step, the global
 * index of the sample and the element's index inside the sample, under a key derived from the run
 * seed and the layer. A sample's mask therefore depends on where the sample sits in the epoch's
 * global order, never on how a batch was split into micro-batches or over ranks. */
#ifndef CT_OPS_MISC_H
#define CT_OPS_MISC_H

#include <stdint.h>

#include "core/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* --- dropout ------------------------------------------------------------------------------------ */

/* What a dropout mask is keyed by. key comes from ct_dropout_key; sample_offset is the global index
 * of row 0 of the batch (row r is sample sample_offset + r). */
typedef struct ct_dropout_ctx {
    uint32_t key[2];
    uint64_t step;
    int64_t sample_offset;
} ct_dropout_ctx;

/* The Philox key of a dropout layer: the run seed mixed with a per-layer salt (a hash of its name,
 * ct_hash_name) and the CT_RNG_DROPOUT purpose, so layers and other random jobs never share masks. */
void ct_dropout_key(uint64_t seed, uint64_t salt, uint32_t key[2]);
/* FNV-1a 64 of a string: a stable salt from a layer's dotted name. */
uint64_t ct_hash_name(const char *name);

/* Inverted dropout of x viewed as [rows = x->shape[0], row_numel]: element e of row r is kept when
 * the Philox word for (step, sample_offset + r, e) is >= p * 2^32, and then scaled by 1 / (1 - p);
 * dropped elements are 0. p == 1 drops everything (zeros, as PyTorch). mask (CT_U8, numel of x)
 * receives 1 for kept elements. y may alias x. p in [0, 1]. */
void ct_op_dropout_forward(const ct_tensor *x, double p, const ct_dropout_ctx *ctx, ct_tensor *mask, ct_tensor *y);
/* dx = dy * mask / (1 - p) (0 where dropped, and everywhere when p == 1); dx may alias dy. */
void ct_op_dropout_backward(const ct_tensor *dy, const ct_tensor *mask, double p, ct_tensor *dx);

/* --- embedding ---------------------------------------------------------------------------------- */

/* The flat index of the first id of ids (CT_I64) outside [0, num_embeddings), or -1 when all fit. */
int64_t ct_op_embedding_find_invalid(const ct_tensor *ids, int64_t num_embeddings);
/* y[i, :] = weight[ids[i], :] for every id (y has numel(ids) * dim elements); ids must be valid. */
void ct_op_embedding_forward(const ct_tensor *ids, const ct_tensor *weight, ct_tensor *y);
/* dweight[ids[i], :] += dy[i, :], skipping ids equal to padding_idx (-1: none). Threads split the
 * embedding columns, so repeated ids never race and the sum order is the same for any thread count. */
void ct_op_embedding_backward(const ct_tensor *ids, const ct_tensor *dy, int64_t padding_idx, ct_tensor *dweight);

#ifdef __cplusplus
}
#endif

#endif
