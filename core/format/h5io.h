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

/* Creates (truncates) the HDF5 file `path` as every HDF5 file ctrainer writes is created: in the
 * file format of HDF5 1.10, pinned (the same data gives the same bytes under a newer library), whose
 * metadata (superblock, object headers, chunk indexes) carries checksums that libhdf5 verifies on
 * every read, so a flipped byte in it is refused ("incorrect metadata checksum") instead of being
 * decoded: libhdf5 1.10 crashes on some damaged metadata of the older, unchecksummed format. Reading
 * such files needs HDF5 1.10 or newer (h5py 2.8 and later). No object records its creation times,
 * so files compare byte for byte. On failure *out is -1 and HDF5's error stack says why. */
ct_status ct_h5_file_create(const char *path, hid_t *out);
/* The same file made in memory (HDF5's core driver, growing by `increment` bytes; name only names it
 * inside HDF5), its buffer allocated and freed through callbacks when given
 * (core/format/h5_image.h). */
ct_status ct_h5_file_create_in_memory(const char *name, size_t increment,
                                      const H5FD_file_image_callbacks_t *callbacks, hid_t *out);

/* Silences HDF5's own error printing: our messages say what went wrong, with the file name. */
void ct_h5_quiet(void);

/* One process-wide lock around HDF5. Debian's serial HDF5 is not guaranteed thread-safe, and the
 * loader's workers read datasets while the trainer writes checkpoints, so every sequence of HDF5
 * calls that may run beside another thread holds it. It is recursive: code holding it may call
 * helpers that take it again. */
void ct_h5_lock(void);
void ct_h5_unlock(void);

#endif
