/* HDF5 files described by a fuzz input, for the targets whose readers take HDF5 (model.h5,
 * optimizer.h5, HDF5 datasets).
 *
 * Why not fuzz the file's bytes: the readers' own logic is in what they do with a file's objects
 * (names, classes and sizes of types, ranks, extents, layouts, attributes, links), not in HDF5's
 * decoding of the format, and mutating raw bytes mostly exercises the latter. Raw mutation of
 * HDF5 1.10.8 files (Debian 12) makes HDF5 itself request allocations of sizes read from the file
 * (0x1a0a0d46444889f8 bytes, in H5C_protect) and leak its metadata cache on corrupt files until
 * the process runs out of memory within seconds: defects of the library that the project cannot
 * fix, which would stop every run before it reached the project's code. So the input is a list of
 * operations that a well-formed file is made of, executed through HDF5's API; a file may then be
 * cut short (a truncated download), which HDF5 detects by its stored end-of-file address.
 *
 * The encoding (each field read with common.h's cursor; running out of input ends the list):
 *   u8 flags          bit 0: newest format (libver latest: v2 object headers, dense attributes);
 *                     bit 1: truncate the finished file to u32 % size bytes (read next)
 *   then up to FZ_H5_MAX_OPS operations, each starting with a u8 kind:
 *   0-2 dataset       name, type, rank (0..7), dims, layout (contiguous, chunked with maxdims,
 *                     compact), filters, optional fill value, data (from the input, tiled)
 *   3   attribute     on the root group or the last object made; name, type, dataspace
 *                     (scalar, 1-D of 0..4 or null), value
 *   4   group         name
 *   5   soft link     name -> a name (possibly dangling)
 *   6   hard link     name -> the last object made
 *   7   external link name -> a file that does not exist
 * Names come from the target's table (a u8 below 224 picks one), a few generic ones, or raw bytes.
 * fz_h5e_* write that encoding, for seeds. */
#ifndef CT_FUZZ_H5GEN_H
#define CT_FUZZ_H5GEN_H

#include <stdbool.h>
#include <stdint.h>

#include "common.h"

#define FZ_H5_MAX_OPS 32
/* Elements of data written per dataset at most; larger extents stay unwritten (fill values). */
#define FZ_H5_MAX_WRITE_BYTES ((size_t)1 << 16)

/* Element types of the encoding (the u8 after a name picks one, modulo FZ_H5_NUM_TYPES). */
typedef enum fz_h5_type {
    FZ_U8, FZ_I8, FZ_U16, FZ_I16, FZ_U32, FZ_I32, FZ_U64, FZ_I64, FZ_F16, FZ_F32, FZ_F64,
    FZ_I32BE, FZ_F64BE, FZ_STRING, FZ_VLEN_STRING, FZ_COMPOUND, FZ_ENUM, FZ_ARRAY, FZ_OPAQUE,
    FZ_BITFIELD, FZ_INT128, FZ_LDOUBLE, FZ_REFERENCE, FZ_VLEN_INT, FZ_H5_NUM_TYPES
} fz_h5_type;

/* The names a target cares about (datasets and attributes alike). */
typedef struct fz_h5_names {
    const char *const *names;
    int n;
} fz_h5_names;

/* Writes the file the input describes at path (replacing it). Returns false when not even an
 * empty file could be made (the harness then skips the input). */
bool fz_h5_build(fz_input *in, const char *path, const fz_h5_names *names);

/* --- encoding, for seeds --------------------------------------------------------------------------- */

/* The flags byte (no truncation). */
void fz_h5e_begin(fz_output *o, bool latest);
/* A contiguous dataset `name` (from the target's table when it is there, else as raw bytes: at
 * most 31 of them) of a numeric type, holding the bytes (element size x numel, the type's order). */
void fz_h5e_dataset(fz_output *o, const fz_h5_names *names, const char *name, fz_h5_type type, int rank,
                    const int64_t *dims, const void *data, size_t bytes);
/* A scalar attribute on the root group (on_root) or the last object: a fixed-size string, or a
 * number of a numeric type (value: its bytes). */
void fz_h5e_string_attr(fz_output *o, const fz_h5_names *names, bool on_root, const char *name, const char *value);
void fz_h5e_number_attr(fz_output *o, const fz_h5_names *names, bool on_root, const char *name, fz_h5_type type,
                        const void *value);
/* Whether enc can express a dimension (0..1023, or a power of two up to 2^40). */
bool fz_h5e_encodable_dim(int64_t d);
/* The encoding of an existing file (from fz_h5e_begin on): its numeric datasets with their scalar
 * attributes, and the root group's. False when something in it could not be expressed (the
 * encoding then describes the rest). */
bool fz_h5e_from_file(fz_output *o, const char *path, const fz_h5_names *names);

#endif
