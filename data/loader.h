/* The data loader: batches from a dataset through a sampler, prefetched by background workers.
 *
 * Batch buffers are allocated once, in host memory (the Trainer copies each batch to the model's
 * device: trainer/device_batch.c), in a ring of slots; workers fill slots ahead of the consumer,
 * and ct_loader_next hands them out in order. The loader's position is (epoch, index of the next
 * global batch): saving it and setting it on a fresh loader continues mid-epoch with exactly the
 * batches the uninterrupted run would have produced, without replaying data. Training loaders use
 * the train sampler (shuffled, per-rank slices of global batches); evaluation loaders the eval
 * sampler (contiguous shards, padding rows with mask 0). */
#ifndef CT_LOADER_H
#define CT_LOADER_H

#include <stdbool.h>
#include <stdint.h>

#include "data/dataset.h"

typedef struct ct_loader ct_loader;

typedef struct ct_loader_config {
    int64_t batch_size;   /* per device */
    bool shuffle;         /* train: shuffle every epoch (ignored for eval) */
    bool drop_last;       /* train: drop a short last global batch */
    bool eval;            /* evaluation sharding with validity masks */
    uint64_t seed;
    int rank, world_size; /* 0 and 1 for one process */
    int num_workers;      /* 0: fetch in the calling thread; N: N background threads */
    int prefetch;         /* batches kept ready per worker (default 2) */
} ct_loader_config;

/* One batch. Tensors are views of the loader's slot, valid until the next ct_loader_next (or
 * repositioning). */
typedef struct ct_batch {
    ct_tensor features;   /* [rows, feature_shape] */
    ct_tensor labels;     /* [rows, label_shape] */
    ct_tensor mask;       /* [rows] u8: 1 for real samples, 0 for padding (eval) */
    const int64_t *indices;
    int64_t rows;         /* may be 0 on a rank with no samples in the last global batch */
    int64_t valid;        /* rows with mask 1 */
    int64_t epoch, index; /* the batch's epoch and global batch index */
} ct_batch;

typedef struct ct_loader_position {
    int64_t epoch;
    int64_t batch; /* the next global batch to produce */
} ct_loader_position;

/* Does not take ownership of the dataset, which must outlive the loader. */
ct_status ct_loader_create(ct_dataset *ds, const ct_loader_config *cfg, ct_loader **out);
void ct_loader_free(ct_loader *l);

/* Batches per epoch (global batches for training, per-rank batches for evaluation). */
int64_t ct_loader_num_batches(const ct_loader *l);
/* Starts epoch e at batch 0 (same as set_position(e, 0)). */
ct_status ct_loader_start_epoch(ct_loader *l, int64_t epoch);
/* The next batch of the current epoch, or *out = NULL at the end of the epoch. Errors of the dataset
 * (a corrupt file met mid-epoch) are returned here, from whichever worker met them, when the batch
 * that failed is due; it is not consumed: the position stays on it and later calls report the error
 * again until the loader is repositioned. Prefetching starts with the first start_epoch,
 * set_position or next, and stops at the end of an epoch. */
ct_status ct_loader_next(ct_loader *l, ct_batch **out);
ct_loader_position ct_loader_get_position(const ct_loader *l);
ct_status ct_loader_set_position(ct_loader *l, ct_loader_position pos);

#endif
