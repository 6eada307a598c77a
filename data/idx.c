/* IDX reader (see idx.h). Every header field is checked against the bytes actually present, so a
 * truncated or corrupt file is an error naming the file, never a crash. */
#include "data/idx.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "core/fs.h"

static int read_exact(gzFile f, void *buf, size_t n) { return gzread(f, buf, (unsigned)n) == (int)n; }

/* Reads the `bytes` of data a header claims. A corrupt header must not make us allocate what it
 * claims before the data is there: a plain file is checked against its size first, and a gzip'd one
 * (whose size says nothing) is read into a buffer that grows as data actually arrives. */
static ct_status read_data(gzFile f, const char *path, size_t bytes, void **data) {
    struct stat st;
    if (gzdirect(f) && stat(path, &st) == 0) {
        size_t left = (size_t)st.st_size - (size_t)gztell(f); /* for a plain file, the position read so far */
        if (left < bytes)
            return ct_error(CT_ERR_FORMAT, "%s: truncated IDX data (the header claims %zu bytes, the file holds %zu)",
                            path, bytes, left);
    }
    size_t cap = bytes < ((size_t)16 << 20) ? bytes : ((size_t)16 << 20), got = 0;
    char *buf = ct_host_alloc(cap);
    while (buf && got < bytes) {
        if (got == cap) { /* more data than the buffer holds: grow towards the claimed size */
            size_t grown = cap * 2 < bytes ? cap * 2 : bytes;
            char *bigger = ct_host_alloc(grown);
            if (bigger) memcpy(bigger, buf, got);
            ct_host_free(buf);
            buf = bigger;
            cap = grown;
            if (!buf) break;
        }
        size_t want = cap - got < (1u << 30) ? cap - got : (1u << 30);
        int n = gzread(f, buf + got, (unsigned)want);
        if (n <= 0) {
            ct_host_free(buf);
            return ct_error(CT_ERR_FORMAT, "%s: truncated IDX data (the header claims %zu bytes, %zu found)", path,
                            bytes, got);
        }
        got += (size_t)n;
    }
    if (!buf) return ct_error(CT_ERR_NOMEM, "%s: cannot allocate %zu bytes for the IDX data", path, bytes);
    *data = buf;
    return CT_OK;
}

ct_status ct_idx_read(const char *path, ct_tensor *out) {
    int fd;
    CT_TRY(ct_open_read(path, &fd));
    errno = 0;
    gzFile f = gzdopen(fd, "rb"); /* owns fd from here */
    if (!f) {
        close(fd);
        return ct_error(CT_ERR_IO, "%s: cannot open: %s", path, errno ? strerror(errno) : "zlib could not open it");
    }
    ct_status s = CT_OK;
    unsigned char magic[4];
    if (!read_exact(f, magic, 4) || magic[0] != 0 || magic[1] != 0) {
        s = ct_error(CT_ERR_FORMAT, "%s: not an IDX file (bad magic number)", path);
        goto done;
    }
    ct_dtype dt;
    switch (magic[2]) {
    case 0x08: dt = CT_U8; break;
    case 0x0C: dt = CT_I32; break;
    case 0x0D: dt = CT_F32; break;
    case 0x0E: dt = CT_F64; break;
    default: s = ct_error(CT_ERR_FORMAT, "%s: IDX element type 0x%02x is not supported", path, magic[2]); goto done;
    }
    int ndim = magic[3];
    if (ndim < 1 || ndim > CT_MAX_DIMS) {
        s = ct_error(CT_ERR_FORMAT, "%s: IDX rank %d (supported: 1 to %d)", path, ndim, CT_MAX_DIMS);
        goto done;
    }
    int64_t shape[CT_MAX_DIMS];
    for (int i = 0; i < ndim; i++) {
        unsigned char b[4];
        if (!read_exact(f, b, 4)) {
            s = ct_error(CT_ERR_FORMAT, "%s: truncated IDX header", path);
            goto done;
        }
        shape[i] = ((int64_t)b[0] << 24) | (b[1] << 16) | (b[2] << 8) | b[3];
    }
    size_t bytes;
    if ((s = ct_shape_nbytes(ndim, shape, dt, &bytes)) != CT_OK) {
        ct_error_prefix(s, "%s: IDX header: ", path);
        goto done;
    }
    if ((s = read_data(f, path, bytes, &out->data)) != CT_OK) goto done;
    /* data past what the header describes: a wrong header (a shape too small) or another file's
     * bytes; either way the samples read would not be the file's */
    unsigned char extra;
    if (gzread(f, &extra, 1) == 1) {
        ct_host_free(out->data);
        out->data = NULL;
        s = ct_error(CT_ERR_FORMAT, "%s: more data than the IDX header describes (%zu bytes); a wrong header, or "
                     "another file's bytes appended", path, bytes);
        goto done;
    }
    *out = ct_tensor_view(out->data, dt, CT_CPU, ndim, shape);
    /* IDX stores multi-byte elements big-endian. */
    size_t es = ct_dtype_size(dt);
    if (es > 1) {
        unsigned char *p = out->data;
        for (size_t i = 0; i < bytes; i += es)
            for (size_t a = 0, b = es - 1; a < b; a++, b--) {
                unsigned char t = p[i + a];
                p[i + a] = p[i + b];
                p[i + b] = t;
            }
    }
done:
    gzclose(f);
    return s;
}
