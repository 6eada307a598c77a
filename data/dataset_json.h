/* Datasets from a run config's JSON: the "data" section's specs.
 *
 *   {"type": "fashion_mnist", "split": "train" | "test", "dir": "/usr/share/datasets/fashion-mnist",
 *    "cache": "train.h5"}
 *   {"type": "idx", "images": "x.idx.gz", "labels": "y.idx.gz", "num_classes": 10, "scale": 255,
 *    "cache": "x.h5"}
 *   {"type": "hdf5", "path": "d.h5", ...the keys of ct_hdf5_dataset_config...}
 *   {"type": "tokens", "path": "t.bin", ...the keys of ct_token_dataset_config...}
 * and, on any of them:
 *   "limit": N          the first N samples only (short runs, tests)
 *   "transforms": [...] applied in order (data/transform.h's JSON specs)
 *
 * "cache" (fashion_mnist and idx, optional): an HDF5 file the IDX files are converted to once and
 * read from afterwards, rebuilt when a source changed since (size or mtime) or it was built from other files
 * (data/dataset_cache.h: atomic writes, bit-identical samples, a file ctrainer did not write is never
 * overwritten). "limit", "transforms", "num_classes" and "scale" apply to the cached data as to the
 * IDX files. In a distributed run the CLI builds the datasets with main_process_first, so one process
 * per node builds a missing cache and the others open it.
 *
 * Relative paths are resolved against base_dir (the directory of the config file), so a config
 * works from any working directory. Errors name the JSON path ("data.train.images") and the file. */
#ifndef CT_DATASET_JSON_H
#define CT_DATASET_JSON_H

#include <jansson.h>

#include "data/dataset.h"

ct_status ct_dataset_from_json(const json_t *spec, const char *path, const char *base_dir, ct_dataset **out);

/* An application's dataset type: builds *out from spec, whose "type" is the registered name. The
 * spec it receives has no "limit" or "transforms" (ct_dataset_from_json applies those to what it
 * returns, as for the built-in types), so the reader checks only its own keys (ct_json_check_keys).
 * Relative file names are meant relative to base_dir (the config's directory). Errors should start
 * with `path`, as the built-in readers' do, so a run config points at the line; an error of any
 * other kind is prefixed with the path here. */
typedef ct_status (*ct_dataset_from_json_fn)(const json_t *spec, const char *path, const char *base_dir,
                                             ct_dataset **out);
/* Registers a dataset type for ct_dataset_from_json (and so for run configs' "data" section), under
 * a name that is not a built-in one (core/registry.h lists what is refused). */
ct_status ct_register_dataset_type(const char *type, ct_dataset_from_json_fn fn);

#endif
