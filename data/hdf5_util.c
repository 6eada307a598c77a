/* HDF5 message helpers (see hdf5_util.h). */
#include "data/hdf5_util.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

typedef struct detail_walk {
    char *buf;
    size_t cap;
    bool found;
} detail_walk;

/* Walking upward visits the innermost (most specific) entry first: keep that one. The file
 * drivers' I/O errors ("file write failed: time = <ctime's line>, filename = ..., errno = 28,
 * error message = 'No space left on device', buf = ..."; "unable to extend file properly, errno =
 * 27, error message = 'File too large'") are cut to what a person needs: "file write failed: No
 * space left on device". */
static herr_t detail_cb(unsigned n, const H5E_error2_t *e, void *data) {
    detail_walk *w = data;
    if (w->found || !e->desc || !e->desc[0]) return 0;
    w->found = true;
    const char *msg = strstr(e->desc, "error message = '");
    const char *end = msg ? strchr(msg + 17, '\'') : NULL;
    size_t head = strcspn(e->desc, ":,");
    if (end)
        snprintf(w->buf, w->cap, "%.*s: %.*s", (int)head, e->desc, (int)(end - msg - 17), msg + 17);
    else
        snprintf(w->buf, w->cap, "%s", e->desc);
    return 0;
}

const char *ct_h5_error_detail(char *buf, size_t cap) {
    if (cap == 0) return buf;
    buf[0] = '\0';
    detail_walk w = {buf, cap, false};
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, detail_cb, &w);
    return buf;
}

const char *ct_h5_type_name(hid_t type, char *buf, size_t cap) {
    size_t size = H5Tget_size(type);
    switch (H5Tget_class(type)) {
    case H5T_INTEGER:
        snprintf(buf, cap, "%c%zu", H5Tget_sign(type) == H5T_SGN_NONE ? 'u' : 'i', size * 8);
        break;
    case H5T_FLOAT: snprintf(buf, cap, "f%zu", size * 8); break;
    case H5T_STRING: snprintf(buf, cap, "string"); break;
    case H5T_COMPOUND: snprintf(buf, cap, "compound"); break;
    case H5T_ENUM: snprintf(buf, cap, "enum (e.g. bool)"); break;
    case H5T_ARRAY: snprintf(buf, cap, "array"); break;
    case H5T_VLEN: snprintf(buf, cap, "variable-length"); break;
    case H5T_OPAQUE: snprintf(buf, cap, "opaque"); break;
    case H5T_BITFIELD: snprintf(buf, cap, "bitfield"); break;
    case H5T_REFERENCE: snprintf(buf, cap, "reference"); break;
    case H5T_TIME: snprintf(buf, cap, "time"); break;
    default: snprintf(buf, cap, "unknown type"); break;
    }
    return buf;
}
