/* Datasets: the vtable through which the loader fetches samples, and applications bring their own.
 *
 * A dataset knows its length and the per-sample shape and dtype of its features and labels, and
 * fetches any set of samples by index into the rows of caller-provided batch tensors. Fetching is
 * keyed by a ct_fetch_ctx (seed, epoch) so that random transforms (augmentation) depend only on
 * (seed, epoch, sample index): the same for any number of processes or workers.
 *
 * Subclass by embedding ct_dataset as the first member of your struct and filling a const
 * ct_dataset_ops (size first, members only appended): `size`, `length` and `get_batch` are required
 * (checked by ct_dataset_base_init and again wherever a dataset enters the library: the Trainer,
 * loaders, wrappers), `name` and `destroy` may be NULL (no name; free(ds)). get_batch may be called from
 * the loader's worker threads, one call at a time per loader unless the dataset sets
 * thread_safe (then workers fetch concurrently). */
#ifndef CT_DATASET_H
#define CT_DATASET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/tensor.h"

typedef struct ct_dataset ct_dataset;

/* What one sample looks like once fetched. Labels of classification data are int64 scalars
 * (label_shape.ndim == 0) in [0, num_classes); token windows are int64 [T]; regression targets f32. */
typedef struct ct_sample_spec {
    ct_shape feature_shape;
    ct_dtype feature_dtype;
    ct_shape label_shape;
    ct_dtype label_dtype;
    int64_t num_classes; /* 0 when not a classification dataset or unknown */
} ct_sample_spec;

/* What random transforms are keyed by. */
typedef struct ct_fetch_ctx {
    uint64_t seed;
    uint64_t epoch;
} ct_fetch_ctx;

/* What the labels of classification data must be: class ids in [0, classes) or ignore_index (a
 * loss's "no target here"). `of` names what the classes are for messages ("the model's 10 outputs"),
 * `loss` the loss that needs them ("cross_entropy"). */
typedef struct ct_label_rule {
    int64_t classes;
    int64_t ignore_index;
    const char *of, *loss;
} ct_label_rule;

typedef struct ct_dataset_ops {
    size_t size; /* sizeof(ct_dataset_ops) when the table was written */
    const char *name;
    int64_t (*length)(ct_dataset *ds);
    /* Writes samples indices[0..n) into rows 0..n of features [>=n, feature_shape] and labels
     * [>=n, label_shape] (dtypes of the spec). Indices are in [0, length), checked by the wrapper. */
    ct_status (*get_batch)(ct_dataset *ds, const int64_t *indices, int64_t n, const ct_fetch_ctx *ctx,
                           ct_tensor *features, ct_tensor *labels);
    void (*destroy)(ct_dataset *ds); /* NULL: free(ds) */
    /* Optional: checks the labels of samples [first, first + n) against rule (see ct_label_rule),
     * reading the labels only, each once, and comparing them with ct_labels_check_i64 / _f64, which
     * write the message. NULL: ct_dataset_check_labels fetches the samples whole with get_batch. */
    ct_status (*check_labels)(ct_dataset *ds, int64_t first, int64_t n, const ct_label_rule *rule);
} ct_dataset_ops;

struct ct_dataset {
    const ct_dataset_ops *ops;
    ct_sample_spec spec;
    bool thread_safe;   /* get_batch may run concurrently on several threads */
    char source[512];   /* file or description, for error messages */
};

/* Initialises the base of a new dataset and checks its table (core/vtable.h): CT_ERR_INVALID_ARG
 * naming the table and the fix when `size` is 0 or too small or length / get_batch is NULL. The
 * base is initialised either way, so ct_dataset_free still works. */
ct_status ct_dataset_base_init(ct_dataset *ds, const ct_dataset_ops *ops);
/* The same check of an existing dataset (NULL is an error too), errors prefixed "dataset '<source>': ". */
ct_status ct_dataset_check(const ct_dataset *ds);
int64_t ct_dataset_length(ct_dataset *ds);
/* For get_batch implementations that copy rows out of memory: asks the CPU to start loading the
 * first bytes of the row it copies next (at most 4 KiB; the hardware prefetcher follows a row
 * once it has begun). A shuffled batch's rows lie scattered over the data, each a cache miss the
 * hardware cannot foresee, which stalled the Fashion-MNIST MLP's step by about a tenth. A hint:
 * it never faults. */
static inline void ct_dataset_prefetch_row(const void *row, size_t bytes) {
    size_t n = bytes < 4096 ? bytes : 4096;
    for (size_t off = 0; off < n; off += 64) __builtin_prefetch((const char *)row + off);
}

/* Validates the indices and tensors, calls get_batch, prefixes errors with the dataset's source. */
ct_status ct_dataset_get_batch(ct_dataset *ds, const int64_t *indices, int64_t n, const ct_fetch_ctx *ctx,
                               ct_tensor *features, ct_tensor *labels);
void ct_dataset_free(ct_dataset *ds);

/* Every label of ds against rule, at the start of a run (trainer/setup_check.c): the table's
 * check_labels, or, without it, every sample fetched in blocks. A label outside the rule, or a
 * float label (a non-integer one by its value, else by its type), is CT_ERR_FORMAT naming the
 * source, the sample and the value: the data is wrong, not the model. */
ct_status ct_dataset_check_labels(ct_dataset *ds, const ct_label_rule *rule);
/* The same for samples [first, first + n) only, without the type check: what wrappers (subset,
 * transforms) answer their check_labels with. */
ct_status ct_dataset_check_label_range(ct_dataset *ds, int64_t first, int64_t n, const ct_label_rule *rule);
/* Labels of consecutive samples against rule: count values, per_sample to a sample (its label
 * shape's elements), the first of sample `first`. `where` follows the sample in the message (" in
 * dataset 'labels'", or ""). The helpers check_labels members compare with. */
ct_status ct_labels_check_i64(const int64_t *v, int64_t count, int64_t per_sample, int64_t first,
                              const char *source, const char *where, const ct_label_rule *rule);
ct_status ct_labels_check_f64(const double *v, int64_t count, int64_t per_sample, int64_t first,
                              const char *source, const char *where, const ct_label_rule *rule);
/* The index of the first of count float labels that is no class id of rule (not a whole number,
 * or outside it), or -1. */
int64_t ct_labels_find_bad_f64(const double *v, int64_t count, const ct_label_rule *rule);

/* Allocates batch tensors [rows, shape] of the dataset's feature and label types. */
ct_status ct_dataset_alloc_batch(const ct_dataset *ds, int64_t rows, ct_tensor *features, ct_tensor *labels);

/* --- built-in datasets (each in its own file) ------------------------------------------------- */

/* Images and labels from two IDX files (raw or gzip'd), held in memory. Pixels become float32 times
 * `scale`; 0 means the default: u8 pixels divided by 255 (as torchvision's ToTensor), others as they are; features are
 * [C=1, H, W] for rank-3 image files and [D] for rank-2 ones. Labels must be integers in
 * [0, num_classes) (num_classes 0: max label + 1). Errors name the file and what was expected. */
ct_status ct_idx_dataset_create(const char *images_path, const char *labels_path, double scale, int64_t num_classes,
                                ct_dataset **out);

/* HDF5: features and labels as two named datasets of a file (any common numeric dtype; features
 * float32 after conversion, labels int64 for integer types, float32 otherwise). Reads rows in
 * chunks on demand, so files larger than memory work. */
typedef struct ct_hdf5_dataset_config {
    const char *path;
    const char *features;   /* dataset name, default "features" */
    const char *labels;     /* dataset name, default "labels" */
    double scale;           /* multiplies features (0 = 1, or 1/255 for u8 data) */
    int64_t num_classes;    /* 0: from the file's "num_classes" attribute, else max label + 1 (integer labels) */
} ct_hdf5_dataset_config;
ct_status ct_hdf5_dataset_create(const ct_hdf5_dataset_config *cfg, ct_dataset **out);

/* Token files: a flat array of uint16 or uint32 token ids (little-endian); sample i is the window
 * tokens[i*stride .. i*stride + context] with features = the first `context` ids and labels = the
 * next `context` ids (shifted by one), both int64 [context]. Memory-mapped. */
typedef struct ct_token_dataset_config {
    const char *path;
    int bytes_per_token;    /* 2 (uint16) or 4 (uint32) */
    int64_t context;        /* window length T */
    int64_t stride;         /* distance between window starts (0 = context: non-overlapping) */
    int64_t vocab_size;     /* > 0: every id must be below it (checked on open) */
} ct_token_dataset_config;
ct_status ct_token_dataset_create(const ct_token_dataset_config *cfg, ct_dataset **out);

/* Rows of two tensors in memory (copied): features [N, ...] and labels [N, ...] (PyTorch's
 * TensorDataset). num_classes as in ct_sample_spec (0 when not a classification dataset). */
ct_status ct_tensor_dataset_create(const ct_tensor *features, const ct_tensor *labels, int64_t num_classes,
                                   ct_dataset **out);

/* The first n samples of base (max_train_samples / max_eval_samples); takes ownership of base. */
ct_status ct_subset_dataset_create(ct_dataset *base, int64_t n, ct_dataset **out);

#endif
