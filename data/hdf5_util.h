/* Small helpers shared by the HDF5 dataset reader and the converters to HDF5: what HDF5's own error
 * stack says (so "truncated file: eof = 4096, stored_eof = 9000" reaches the user with the file
 * name) and short element type names for messages. Call them with ct_h5_lock held. */
#ifndef CT_HDF5_UTIL_H
#define CT_HDF5_UTIL_H

#include <hdf5.h>
#include <stddef.h>

/* The most specific message on this thread's HDF5 error stack ("" when empty), into buf. */
const char *ct_h5_error_detail(char *buf, size_t cap);

/* "u8", "i64", "f32", "string"... for an HDF5 datatype, into buf. */
const char *ct_h5_type_name(hid_t type, char *buf, size_t cap);

#endif
