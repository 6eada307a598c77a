/* HDF5 files built in memory (see h5_image.h). */
#include "core/format/h5_image.h"

#include <stdint.h>
#include <stdlib.h>

#include "core/format/h5io.h"

ct_status ct_h5_image_create(size_t size_hint, hid_t *out) {
    *out = -1;
    /* grow in steps of the expected size (at least 1 MiB), so a file is built in a few reallocations */
    size_t increment = size_hint + (size_hint >> 4) + (64 << 10);
    if (increment < (1 << 20)) increment = 1 << 20;
    /* the name only identifies the file inside HDF5; nothing is created on disk */
    hid_t f;
    if (ct_h5_file_create("ctrainer-in-memory.h5", increment, &f) != CT_OK)
        return ct_error(CT_ERR_NOMEM, "hdf5: cannot create an in-memory file of %zu bytes", increment);
    *out = f;
    return CT_OK;
}

/* libhdf5's checksum of metadata (Jenkins' lookup3), the one it verifies when it reads a superblock;
 * exported by every libhdf5 since 1.8.7 though its header is private. */
extern uint32_t H5_checksum_metadata(const void *data, size_t len, uint32_t initval);

/* H5Fget_file_image (1.10) clears the superblock's file-consistency flags of an image taken while
 * the file is open for writing, as closing would, but keeps the checksum computed with the flags
 * set: libhdf5 then refuses the file ("incorrect metadata checksum"). The superblock of the format
 * ctrainer writes (version 2, ct_h5_fapl_create) sits at offset 0: signature, version, the sizes
 * of offsets and lengths, the flags, four addresses, then the checksum of all that. */
static void fix_superblock_checksum(uint8_t *image, size_t size) {
    if (size < 12 || image[8] < 2 || image[8] > 3) return;
    size_t at = 12 + 4 * (size_t)image[9];
    if (at + 4 > size) return;
    uint32_t sum = H5_checksum_metadata(image, at, 0);
    for (int i = 0; i < 4; i++) image[at + (size_t)i] = (uint8_t)(sum >> (8 * i)); /* little-endian */
}

ct_status ct_h5_image_finish(hid_t f, void **image, size_t *size) {
    *image = NULL;
    *size = 0;
    ct_status s = CT_OK;
    ssize_t n = H5Fflush(f, H5F_SCOPE_GLOBAL) < 0 ? -1 : H5Fget_file_image(f, NULL, 0);
    void *buf = n > 0 ? malloc((size_t)n) : NULL;
    if (n <= 0)
        s = ct_error(CT_ERR_IO, "hdf5: cannot serialise the file");
    else if (!buf)
        s = ct_error(CT_ERR_NOMEM, "hdf5: out of memory for a file of %zd bytes", n);
    else if (H5Fget_file_image(f, buf, (size_t)n) != n)
        s = ct_error(CT_ERR_IO, "hdf5: cannot copy the file's image");
    if (H5Fclose(f) < 0 && s == CT_OK) s = ct_error(CT_ERR_IO, "hdf5: cannot close the in-memory file");
    if (s != CT_OK) {
        free(buf);
        return s;
    }
    fix_superblock_checksum(buf, (size_t)n);
    *image = buf;
    *size = (size_t)n;
    return CT_OK;
}
