/* The check every HDF5 dataset passes before ctrainer asks libhdf5 to read it.
 *
 * libhdf5 (1.10) trusts the header of the dataset it reads: one flipped byte that makes a chunk
 * dimension larger than the dataset's fixed dimension sends H5Dread copying far past its buffers (a
 * segfault inside the library), and a contiguous block that points past the end of the file reads
 * zeros as if they were data. So every read path (the tensors of model.h5 and optimizer.h5, the
 * blocks of an HDF5 data set) first validates what H5Dread will be asked to read, against the rules
 * libhdf5 itself applies when a dataset is created: the dataspace (rank, dimensions within their
 * maxima, a size that fits in memory), the element type (integers and IEEE floats of 1 to 8 bytes,
 * laid out as such), the layout (compact, contiguous or chunked; chunks of the dataset's rank,
 * within its fixed dimensions and under libhdf5's 4 GiB; stored bytes that match the shape and lie
 * inside the file; no external or virtual storage, which would make libhdf5 open other files named
 * by this one) and the filters (deflate, shuffle and Fletcher-32 with the parameters libhdf5 sets). */
#ifndef CT_H5_CHECK_H
#define CT_H5_CHECK_H

#include <hdf5.h>

#include "core/status.h"

/* CT_OK when dataset ds (named `name` in messages) is safe to read with H5Dread; otherwise
 * CT_ERR_FORMAT with a message naming the dataset and what is wrong ("dataset 'features': chunk
 * shape [64, 14876675] exceeds the dataset's fixed shape [300, 3] (a damaged file?)"); callers
 * prefix the file. Call with ct_h5_lock held. */
ct_status ct_h5_check_dataset(hid_t ds, const char *name);

#endif
