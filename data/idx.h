/* IDX files (the MNIST / Fashion-MNIST format), raw or gzip'd: a magic number giving the element type
 * and rank, big-endian dimensions, then the data. zlib's gzread reads both forms transparently. */
#ifndef CT_IDX_H
#define CT_IDX_H

#include "core/tensor.h"

/* Reads a whole IDX file into a newly allocated CPU tensor: u8 data as CT_U8, int32 as CT_I32,
 * float32 as CT_F32, float64 as CT_F64. Errors name the file and what is wrong with it. */
ct_status ct_idx_read(const char *path, ct_tensor *out);

#endif
