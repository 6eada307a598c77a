/* HDF5 files in memory, written with write() (see h5_image.h). */
#include "core/format/h5_image.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/io_fault.h"

ct_status ct_h5_image_create(size_t size_hint, hid_t *out) {
    *out = -1;
    /* grow in steps of the expected size (at least 1 MiB), so a file is built in a few reallocations */
    size_t increment = size_hint + (size_hint >> 4) + (64 << 10);
    if (increment < (1 << 20)) increment = 1 << 20;
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (fapl < 0 || H5Pset_fapl_core(fapl, increment, 0) < 0) {
        if (fapl >= 0) H5Pclose(fapl);
        return ct_error(CT_ERR_IO, "hdf5: cannot set up an in-memory file");
    }
    /* the name only identifies the file inside HDF5; nothing is created on disk */
    hid_t f = H5Fcreate("ctrainer-in-memory.h5", H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    H5Pclose(fapl);
    if (f < 0) return ct_error(CT_ERR_NOMEM, "hdf5: cannot create an in-memory file of %zu bytes", increment);
    *out = f;
    return CT_OK;
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
    *image = buf;
    *size = (size_t)n;
    return CT_OK;
}

ct_status ct_write_bytes(const char *path, const void *data, size_t size) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return ct_error(CT_ERR_IO, "cannot create '%s': %s", path, strerror(errno));
    int err = ct_io_write_all(fd, data, size); /* write(), or a test's fault */
    if (close(fd) != 0 && !err) err = errno;
    if (err) {
        unlink(path);
        return ct_error(CT_ERR_IO, "cannot write '%s': %s", path, strerror(err));
    }
    return CT_OK;
}
