/* HDF5 files built in memory and written to disk with plain write(): how model.h5 and optimizer.h5
 * are written.
 *
 * Two reasons. A failing disk (full, a file size limit, an I/O error) is reported by write() with
 * its errno ("No space left on device"), whereas HDF5's sec2 driver, once a flush inside H5Fclose
 * failed, keeps the file half-open and crashes at the library's exit handler. And the process-wide
 * HDF5 lock (core/format/h5io.h) is held only while the file is serialised in memory, not while it
 * goes to a slow disk, so the loader's workers reading an HDF5 dataset are not held up by a
 * checkpoint being written beside training (save_async).
 *
 * The image is the core driver's own buffer, taken over when the file is closed (HDF5's file image
 * callbacks), so its bytes are those of a closed file, as the sec2 driver writes them, and the file
 * is in memory once: a model's save costs one copy of its weights, not two. */
#ifndef CT_H5_IMAGE_H
#define CT_H5_IMAGE_H

#include <hdf5.h>
#include <stddef.h>

#include "core/status.h"

/* A file being built in memory: `file` is an ordinary HDF5 file id to write into. */
typedef struct ct_h5_image {
    hid_t file;
    struct ct_h5_image_buffer *buffer; /* the core driver's buffer, as the callbacks left it */
} ct_h5_image;

/* Under ct_h5_lock: a new empty file in memory; size_hint (bytes, may be 0) sizes its growth. */
ct_status ct_h5_image_create(size_t size_hint, ct_h5_image *out);
/* Under ct_h5_lock: closes the file and hands over its bytes in *image (malloc'd; the caller frees
 * it), *size of them; im is done with, also on failure. */
ct_status ct_h5_image_finish(ct_h5_image *im, void **image, size_t *size);
/* Under ct_h5_lock: closes the file and frees its memory (a write into it failed). */
void ct_h5_image_discard(ct_h5_image *im);
/* The image is written without the lock by core/fs.h: ct_write_file_atomic for a file replaced on
 * its own (model.h5 in output_dir), ct_write_file inside a checkpoint's <dir>.tmp. */

#endif
