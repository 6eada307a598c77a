/* Tensors in HDF5 files: one dataset per tensor, at a path that may contain groups ("grads/0.weight"
 * makes the group "grads"). HDF5 converts element types on read, so a float64 dataset reads into a
 * float32 tensor and back. Checkpoints, datasets and the test oracles share these helpers. */
#ifndef CT_H5IO_H
#define CT_H5IO_H

#include <hdf5.h>
#include <stdbool.h>

#include "core/tensor.h"

/* Writes t as dataset `name`, creating parent groups (a tensor on a device through a host copy). */
ct_status ct_h5_write_tensor(hid_t file, const char *name, const ct_tensor *t);
/* Allocates *out with the dataset's shape and the given dtype and reads it. */
ct_status ct_h5_read_tensor_alloc(hid_t file, const char *name, ct_dtype dt, ct_tensor *out);
/* Reads into an existing tensor (on any device) whose shape must equal the dataset's. */
ct_status ct_h5_read_into(hid_t file, const char *name, ct_tensor *t);
bool ct_h5_exists(hid_t file, const char *name);

/* Writes/reads a string attribute on the file's root group. */
ct_status ct_h5_write_string_attr(hid_t file, const char *name, const char *value);
/* Returns a malloc'd copy; the caller frees it. */
ct_status ct_h5_read_string_attr(hid_t file, const char *name, char **value);

/* Silences HDF5's own error printing: our messages say what went wrong, with the file name. */
void ct_h5_quiet(void);

/* One process-wide lock around HDF5. Debian's serial HDF5 is not guaranteed thread-safe, and the
 * loader's workers read datasets while the trainer writes checkpoints, so every sequence of HDF5
 * calls that may run beside another thread holds it. It is recursive: code holding it may call
 * helpers that take it again. */
void ct_h5_lock(void);
void ct_h5_unlock(void);

#endif
