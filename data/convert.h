/* Converting data sets into the HDF5 layout that ct_hdf5_dataset_create reads (`ctrainer data convert`).
 *
 * The output holds two datasets: "features" [N, sample dims...] and "labels" [N] (or [N, K]).
 * Labels are int64 class ids when every label is a non-negative integer (then the labels dataset
 * carries a "num_classes" attribute = max label + 1), otherwise float32 targets. Both datasets are
 * chunked by rows (chunk_rows rows per chunk, so a batch reads only the chunks it touches) and
 * deflate-compressed. The file is written under a temporary name next to out_path and renamed when
 * complete: out_path either holds a whole converted file or is left as it was.
 *
 * Chunking and random access: the reader decompresses whole chunks and caches 64 MB of them per
 * dataset, so data that fits (Fashion-MNIST: 47 MB) costs each chunk once. For larger data, every
 * random sample may cost a chunk: there, fewer rows per chunk (e.g. 64) or no compression pay. */
#ifndef CT_CONVERT_H
#define CT_CONVERT_H

#include <stdint.h>

#include "core/status.h"

#define CT_CONVERT_DEFAULT_CHUNK_ROWS 1024
#define CT_CONVERT_DEFAULT_COMPRESSION 4

/* IDX images and labels (raw or gzip'd, as ct_idx_read reads them). Features keep the IDX element
 * type (u8 pixels stay u8; ct_hdf5_dataset scales them by 1/255 on read). Rank-3 image files
 * [N, H, W] become [N, 1, H, W] (NCHW with one channel, the layout ct_idx_dataset presents); other
 * ranks are kept. chunk_rows: rows per chunk (0 = default); compression_level: deflate level 1-9,
 * 0 = none, -1 = default. Errors name the file and what was expected. */
ct_status ct_convert_idx_to_hdf5(const char *images_path, const char *labels_path, const char *out_path,
                                 int64_t chunk_rows, int compression_level);
/* The same with a string attribute attr = attr_value on the file's root (the dataset cache's record
 * of its sources, data/dataset_cache.h), written with the rest in one atomic replacement of out_path. */
ct_status ct_convert_idx_to_hdf5_tagged(const char *images_path, const char *labels_path, const char *out_path,
                                        int64_t chunk_rows, int compression_level, const char *attr,
                                        const char *attr_value);

/* A CSV file of numbers, one sample per line, comma-separated (fields may be double-quoted; blank
 * lines are skipped). label_column is a column name from the header or a 0-based index (negative
 * counts from the end); NULL means the last column. has_header: 1 yes, 0 no, -1 detect (the first
 * line is a header when any of its fields is not a number). Features become float32 [N, D] with
 * the remaining columns in file order. Errors name file:line:column: a row with the wrong number of
 * fields, a field that is not a finite number, a value outside float32's range. */
ct_status ct_convert_csv_to_hdf5(const char *csv_path, const char *label_column, int has_header, const char *out_path,
                                 int64_t chunk_rows, int compression_level);

#endif
