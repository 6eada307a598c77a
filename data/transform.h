/* Transforms: per-sample changes to features applied after a dataset fetches them — scaling and
 * normalisation, and seeded augmentation (random crop with padding, horizontal flip).
 *
 * Random transforms draw from Philox keyed by (seed, epoch, dataset index of the sample, transform
 * position), so a sample is augmented the same way whichever rank or worker fetches it, and
 * differently in every epoch. A transform is a vtable like the others (size first, NULL = default).
 * ct_transformed_dataset_create wraps a dataset with a list of transforms; it applies them in place on
 * the caller's batch, so it refuses a transform whose check() changes the sample's shape or dtype, and
 * apply must be reentrant (the wrapper is as thread-safe as its base). data/transform_random.h gives
 * application transforms the same (seed, epoch, index, position) keyed randomness. */
#ifndef CT_TRANSFORM_H
#define CT_TRANSFORM_H

#include <jansson.h>

#include "data/dataset.h"

typedef struct ct_transform ct_transform;

typedef struct ct_transform_ops {
    size_t size;
    const char *name;
    /* Checks the transform fits samples of *in and writes the spec of its output (shape kept by the
     * built-ins: crops pad then cut back to the input size). Called once, at wrap time. */
    ct_status (*check)(ct_transform *t, const ct_sample_spec *in, ct_sample_spec *out);
    /* Transforms rows 0..n of features in place; indices are the samples' dataset indices. */
    ct_status (*apply)(ct_transform *t, ct_tensor *features, const int64_t *indices, int64_t n,
                       const ct_fetch_ctx *ctx, uint32_t salt);
    void (*destroy)(ct_transform *t); /* NULL: free(t) */
} ct_transform_ops;

struct ct_transform {
    const ct_transform_ops *ops;
};

/* (x - mean[c]) / std[c] per channel (dimension 0 of the sample); one value applies to all channels. */
ct_status ct_normalize_create(const double *mean, const double *std, int64_t n, ct_transform **out);
/* Pads H and W by `padding` (zeros) and cuts a random window of the original size. */
ct_status ct_random_crop_create(int64_t padding, ct_transform **out);
/* Mirrors W with probability p. */
ct_status ct_random_hflip_create(double p, ct_transform **out);
/* {"type": "normalize", "mean": [..], "std": [..]}, {"type": "random_crop", "padding": 4},
 * {"type": "random_hflip", "p": 0.5}; errors name the JSON path. */
ct_status ct_transform_from_json(const json_t *spec, const char *path, ct_transform **out);
void ct_transform_free(ct_transform *t);

/* A dataset whose samples are base's after the transforms, in order. Takes ownership of base and of
 * the transforms (also on failure). */
ct_status ct_transformed_dataset_create(ct_dataset *base, ct_transform **transforms, int n, ct_dataset **out);

#endif
