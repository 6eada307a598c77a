/* IDX reader (see idx.h). Every header field is checked against the bytes actually present, so a
 * truncated or corrupt file is an error naming the file, never a crash. */
#include "data/idx.h"

#include <errno.h>
#include <string.h>
#include <zlib.h>

static int read_exact(gzFile f, void *buf, size_t n) { return gzread(f, buf, (unsigned)n) == (int)n; }

ct_status ct_idx_read(const char *path, ct_tensor *out) {
    errno = 0;
    gzFile f = gzopen(path, "rb");
    if (!f) return ct_error(CT_ERR_IO, "%s: cannot open: %s", path, errno ? strerror(errno) : "zlib could not open it");
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
    if ((s = ct_tensor_alloc(out, dt, CT_CPU, ndim, shape)) != CT_OK) {
        ct_error_prefix(s, "%s: ", path);
        goto done;
    }
    size_t bytes = ct_tensor_nbytes(out);
    for (size_t done_bytes = 0; done_bytes < bytes;) {
        size_t chunk = bytes - done_bytes < (1u << 30) ? bytes - done_bytes : (1u << 30);
        if (!read_exact(f, (char *)out->data + done_bytes, chunk)) {
            ct_tensor_free(out);
            s = ct_error(CT_ERR_FORMAT, "%s: truncated IDX data (expected %zu bytes)", path, bytes);
            goto done;
        }
        done_bytes += chunk;
    }
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
