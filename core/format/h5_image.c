/* HDF5 files built in memory (see h5_image.h).
 *
 * The core driver keeps the file in one buffer that it grows with realloc as it is written and frees
 * when the file is closed; with file image callbacks those are ours. The free at close is where the
 * buffer is taken over instead (when finishing), after the library has written the closed file's
 * superblock into it. Its length is the file's end address recorded in that superblock: the buffer
 * itself is rounded up to the driver's growth step. */
#include "core/format/h5_image.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/format/h5io.h"

struct ct_h5_image_buffer {
    size_t capacity; /* bytes of the buffer the driver holds now */
    bool keep;       /* finishing: the free at close hands the buffer over instead */
    void *kept;      /* what it handed over */
};

static void *buffer_realloc(void *ptr, size_t size, H5FD_file_image_op_t op, void *udata) {
    (void)op;
    struct ct_h5_image_buffer *b = udata;
    void *grown = realloc(ptr, size);
    if (grown) b->capacity = size;
    return grown;
}

static herr_t buffer_free(void *ptr, H5FD_file_image_op_t op, void *udata) {
    struct ct_h5_image_buffer *b = udata;
    if (op == H5FD_FILE_IMAGE_OP_FILE_CLOSE && b->keep)
        b->kept = ptr;
    else
        free(ptr);
    return 0;
}

/* The bookkeeping belongs to the ct_h5_image, which outlives the file: HDF5's copies of it share it. */
static void *udata_share(void *udata) { return udata; }
static herr_t udata_release(void *udata) {
    (void)udata;
    return 0;
}

ct_status ct_h5_image_create(size_t size_hint, ct_h5_image *out) {
    *out = (ct_h5_image){.file = -1};
    /* grow in steps of the expected size (at least 1 MiB), so a file is built in a few reallocations */
    size_t increment = size_hint + (size_hint >> 4) + (64 << 10);
    if (increment < (1 << 20)) increment = 1 << 20;
    struct ct_h5_image_buffer *b = calloc(1, sizeof *b);
    if (!b) return ct_error(CT_ERR_NOMEM, "hdf5: out of memory");
    const H5FD_file_image_callbacks_t callbacks = {.image_realloc = buffer_realloc, .image_free = buffer_free,
                                                   .udata_copy = udata_share, .udata_free = udata_release,
                                                   .udata = b};
    /* the name only identifies the file inside HDF5; nothing is created on disk */
    hid_t f;
    if (ct_h5_file_create_in_memory("ctrainer-in-memory.h5", increment, &callbacks, &f) != CT_OK) {
        free(b);
        return ct_error(CT_ERR_NOMEM, "hdf5: cannot create an in-memory file of %zu bytes", increment);
    }
    *out = (ct_h5_image){.file = f, .buffer = b};
    return CT_OK;
}

/* The end of the file the superblock at the image's start records (the superblock versions 2 and 3
 * of ct_h5_file_create's format: signature, version, the sizes of offsets and lengths, flags, then
 * the base, extension, end-of-file and root addresses), or 0 when it is not such a superblock. */
static uint64_t recorded_end(const uint8_t *image, size_t capacity) {
    static const uint8_t signature[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
    if (capacity < 12 + 4 * 8 || memcmp(image, signature, 8) != 0 || (image[8] != 2 && image[8] != 3) ||
        image[9] != 8)
        return 0;
    uint64_t base = 0, end = 0;
    for (int i = 7; i >= 0; i--) {
        base = base << 8 | image[12 + i];
        end = end << 8 | image[12 + 2 * 8 + i];
    }
    return base == 0 ? end : 0;
}

ct_status ct_h5_image_finish(ct_h5_image *im, void **image, size_t *size) {
    *image = NULL;
    *size = 0;
    struct ct_h5_image_buffer *b = im->buffer;
    b->keep = true;
    if (H5Fclose(im->file) < 0) {
        /* libhdf5 may still hold the file, and call back into b when it lets go: b is left to it */
        *im = (ct_h5_image){.file = -1};
        return ct_error(CT_ERR_IO, "hdf5: cannot finish the in-memory file");
    }
    ct_status s = CT_OK;
    uint64_t end = b->kept ? recorded_end(b->kept, b->capacity) : 0;
    if (end == 0 || end > SIZE_MAX)
        s = ct_error(CT_ERR_IO, "hdf5: the in-memory file has no superblock that gives its length");
    /* space allocated at the end but never written is zeros, as the driver reads it */
    if (s == CT_OK && end > b->capacity) {
        void *grown = realloc(b->kept, (size_t)end);
        if (!grown) {
            s = ct_error(CT_ERR_NOMEM, "hdf5: out of memory for a file of %llu bytes", (unsigned long long)end);
        } else {
            memset((char *)grown + b->capacity, 0, (size_t)end - b->capacity);
            b->kept = grown;
        }
    }
    if (s == CT_OK) {
        *image = b->kept;
        *size = (size_t)end;
    } else {
        free(b->kept);
    }
    free(b);
    *im = (ct_h5_image){.file = -1};
    return s;
}

void ct_h5_image_discard(ct_h5_image *im) {
    /* as in finish: a file libhdf5 could not close may still call back into the bookkeeping */
    if (im->file < 0 || H5Fclose(im->file) >= 0) free(im->buffer);
    *im = (ct_h5_image){.file = -1};
}
