/* Dataset caches: an IDX pair (images, labels) converted once to HDF5 and read from there after
 * (the "cache" key of the idx and fashion_mnist dataset specs, data/dataset_json.h). Reading gzip'd
 * IDX files means decompressing and holding them whole on every start; the HDF5 cache is read in
 * chunks on demand and opens at once.
 *
 * The cache is built when it does not exist or is stale, and then used as it is. A built cache
 * records its sources (their real paths, sizes and mtimes) in the root attribute "ctrainer_cache_of";
 * it is stale when that record differs from the sources as they are now: a source modified since
 * the build (newer mtime), but also one replaced by a file with an older mtime (cp -p of an older
 * version), or a cache another spec (say the test set) built at the same path. The cache's own mtime
 * is deliberately not compared with the sources': with clock skew between the nodes of a shared file
 * system, or a source whose mtime lies in the future, the cache would look older than its source
 * on every start and be rebuilt by every process. Sources are validated as the idx type validates
 * them before anything is written, so a bad source gives the very message it gives without a
 * cache.
 *
 * Writing: ct_convert_idx_to_hdf5_tagged builds the file with the record in memory and writes it
 * under a temporary name of this host and process, fsync, then a rename onto the cache path. A
 * reader therefore sees the old cache or the whole new one, never a half-written file, and several
 * processes (nodes on a shared file system) building the same cache at once each write their own
 * file; the last rename wins, and they hold the same data. main_process_first (dist/comm.h) keeps
 * the other processes of a job from building it too.
 *
 * The cache is an optimisation: when it cannot be written (ENOSPC, EDQUOT, EROFS, EACCES, EFBIG, a
 * part of its path that is a file), a warning names it and errno's text, whatever was made for it
 * (the temporary file, directories of its path that did not exist) is removed, and the IDX files are
 * read instead: the same samples. Only a file at the path that is not a cache, or the sources'
 * own errors, fail the run.
 *
 * A file at the cache path that ctrainer did not write (not HDF5, or without the record) is never
 * overwritten: that is an error naming the file, which says to delete it or choose another path
 * (a typo in "cache" must not destroy a model file or the data itself). A cache with the record that
 * cannot be opened as a dataset (damaged) is rebuilt, with a line on stderr. A cache that cannot be
 * read at all (permissions) is an error. Missing sources are an error even when a cache exists: the
 * cache is derived data, not a replacement for the sources.
 *
 * Samples are bit-identical to ct_idx_dataset_create's with the same scale and num_classes: the HDF5
 * dataset computes x * scale in double and rounds once, which for u8, f32 and f64 images and
 * the float32 scale the idx dataset uses is exactly its float32 product (u8 / 255.0f for the default
 * scale); only i32 images with |x| >= 2^24 and a scale other than 0 or 1 can differ in the last bit
 * (the idx dataset rounds x to float32 first). A scale that is 0 or infinite in float32 cannot be
 * expressed by the HDF5 dataset (0 there means the default) and is refused. */
#ifndef CT_DATASET_CACHE_H
#define CT_DATASET_CACHE_H

#include "data/dataset.h"

/* The root attribute of a cache that records its sources. */
#define CT_DATASET_CACHE_ATTR "ctrainer_cache_of"

/* Opens images + labels (as ct_idx_dataset_create with scale and num_classes) through the cache at
 * cache_path, building it first when needed. `what` names the cache in the stderr lines about
 * building it ("data.train.cache"). Errors start with the path of the file they are about (a source
 * or the cache), so callers can name the key that gave it; *built says whether this call built it. */
ct_status ct_idx_cache_open(const char *images_path, const char *labels_path, double scale, int64_t num_classes,
                            const char *cache_path, const char *what, bool *built, ct_dataset **out);

#endif
