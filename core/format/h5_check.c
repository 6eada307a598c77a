/* The check before every H5Dread (see h5_check.h). */
#include "core/format/h5_check.h"

#include <stdint.h>
#include <stdio.h>

#include "core/tensor.h"

/* libhdf5 refuses chunks of 4 GiB or more when it creates a dataset. */
#define MAX_CHUNK_BYTES (((uint64_t)1 << 32) - 1)
/* More than any file ctrainer could hold in memory, and far from overflowing int64 sizes. */
#define MAX_DATASET_BYTES ((uint64_t)1 << 62)

static ct_status bad(const char *name, const char *what) {
    return ct_error(CT_ERR_FORMAT, "dataset '%s': %s (a damaged file?)", name, what);
}

static const char *shape_of(int rank, const hsize_t *dims, char *buf, size_t cap) {
    int64_t s[CT_MAX_DIMS];
    for (int i = 0; i < rank; i++) s[i] = dims[i] > INT64_MAX ? INT64_MAX : (int64_t)dims[i];
    return ct_shape_str(rank, s, buf, cap);
}

/* Integers of 1, 2, 4 or 8 bytes using all their bits; IEEE half, single and double floats: the
 * element types whose conversion to the native ones libhdf5 does without surprises. */
static ct_status check_type(hid_t type, const char *name) {
    H5T_class_t cls = H5Tget_class(type);
    size_t size = H5Tget_size(type);
    H5T_order_t order = H5Tget_order(type);
    char what[160];
    if (cls != H5T_INTEGER && cls != H5T_FLOAT)
        return ct_error(CT_ERR_FORMAT, "dataset '%s': its elements are not numbers (HDF5 type class %d)", name,
                        (int)cls);
    if (order != H5T_ORDER_LE && order != H5T_ORDER_BE) return bad(name, "its element type has no byte order");
    size_t prec = H5Tget_precision(type);
    int offset = H5Tget_offset(type);
    if (cls == H5T_INTEGER) {
        if ((size != 1 && size != 2 && size != 4 && size != 8) || prec != 8 * size || offset != 0) {
            snprintf(what, sizeof what, "its integers are %zu bytes with %zu bits at bit %d (expected 1, 2, 4 or 8 "
                     "bytes, every bit used)", size, prec, offset);
            return bad(name, what);
        }
        return CT_OK;
    }
    static const struct {
        size_t size, spos, epos, esize, mpos, msize, ebias;
    } ieee[] = {{2, 15, 10, 5, 0, 10, 15}, {4, 31, 23, 8, 0, 23, 127}, {8, 63, 52, 11, 0, 52, 1023}};
    size_t spos = 0, epos = 0, esize = 0, mpos = 0, msize = 0;
    H5Tget_fields(type, &spos, &epos, &esize, &mpos, &msize);
    for (size_t i = 0; i < sizeof ieee / sizeof ieee[0]; i++)
        if (size == ieee[i].size && prec == 8 * size && offset == 0 && spos == ieee[i].spos && epos == ieee[i].epos &&
            esize == ieee[i].esize && mpos == ieee[i].mpos && msize == ieee[i].msize &&
            H5Tget_ebias(type) == ieee[i].ebias && H5Tget_norm(type) == H5T_NORM_IMPLIED)
            return CT_OK;
    snprintf(what, sizeof what, "its floats of %zu bytes are not IEEE half, single or double precision", size);
    return bad(name, what);
}

/* Deflate, shuffle and Fletcher-32 (what ctrainer and h5py write), with the parameters libhdf5
 * itself gives them: shuffle's element size is the type's, deflate's level at most 9. */
static ct_status check_filters(hid_t dcpl, const char *name, size_t type_size, bool chunked) {
    int n = H5Pget_nfilters(dcpl);
    char what[200];
    if (n < 0 || n > H5Z_MAX_NFILTERS) return bad(name, "its filter pipeline cannot be read");
    if (n > 0 && !chunked) return bad(name, "it has filters but is not chunked");
    for (int i = 0; i < n; i++) {
        unsigned flags = 0, cd[8] = {0}, config = 0;
        size_t ncd = sizeof cd / sizeof cd[0];
        char fname[64] = "";
        H5Z_filter_t id = H5Pget_filter2(dcpl, (unsigned)i, &flags, &ncd, cd, sizeof fname, fname, &config);
        bool ok = id == H5Z_FILTER_FLETCHER32 || (id == H5Z_FILTER_DEFLATE && ncd == 1 && cd[0] <= 9) ||
                  (id == H5Z_FILTER_SHUFFLE && ncd >= 1 && cd[0] == type_size);
        if (id != H5Z_FILTER_DEFLATE && id != H5Z_FILTER_SHUFFLE && id != H5Z_FILTER_FLETCHER32) {
            snprintf(what, sizeof what, "filter %d ('%s') is not one ctrainer reads (deflate, shuffle, fletcher32)",
                     (int)id, fname);
            return ct_error(CT_ERR_FORMAT, "dataset '%s': %s", name, what);
        }
        if (!ok || H5Zfilter_avail(id) <= 0) {
            snprintf(what, sizeof what, "filter '%s' has parameters %u (%zu values) that do not fit its %zu-byte "
                     "elements", fname, cd[0], ncd, type_size);
            return bad(name, what);
        }
    }
    return CT_OK;
}

/* The bytes of a compact or contiguous dataset: as many as the shape needs, inside the file. */
static ct_status check_stored_bytes(hid_t ds, const char *name, H5D_layout_t layout, uint64_t nbytes) {
    char what[200];
    hsize_t stored = H5Dget_storage_size(ds);
    haddr_t addr = layout == H5D_CONTIGUOUS ? H5Dget_offset(ds) : HADDR_UNDEF;
    if (layout == H5D_CONTIGUOUS && addr == HADDR_UNDEF) return CT_OK; /* never written: fill values */
    if (stored != nbytes) {
        snprintf(what, sizeof what, "it stores %llu bytes, its shape and type need %llu", (unsigned long long)stored,
                 (unsigned long long)nbytes);
        return bad(name, what);
    }
    if (layout != H5D_CONTIGUOUS) return CT_OK;
    hid_t file = H5Iget_file_id(ds);
    hsize_t size = 0;
    herr_t rc = file >= 0 ? H5Fget_filesize(file, &size) : -1;
    if (file >= 0) H5Fclose(file);
    if (rc < 0 || addr > size || nbytes > size - addr) {
        snprintf(what, sizeof what, "its %llu bytes at offset %llu lie beyond the end of the file (%llu bytes)",
                 (unsigned long long)nbytes, (unsigned long long)addr, (unsigned long long)size);
        return bad(name, what);
    }
    return CT_OK;
}

static ct_status check_layout(hid_t ds, hid_t dcpl, const char *name, int rank, const hsize_t *maxdims,
                              size_t type_size, uint64_t nbytes) {
    char what[300], a[128], b[128];
    H5D_layout_t layout = H5Pget_layout(dcpl);
    int external = H5Pget_external_count(dcpl);
    if (external != 0)
        return ct_error(CT_ERR_FORMAT, "dataset '%s': keeps its data in %d external file(s), which ctrainer does not "
                        "read", name, external);
    if (layout == H5D_VIRTUAL)
        return ct_error(CT_ERR_FORMAT, "dataset '%s': is a virtual dataset (made of other files), which ctrainer "
                        "does not read", name);
    if (layout != H5D_COMPACT && layout != H5D_CONTIGUOUS && layout != H5D_CHUNKED)
        return bad(name, "its storage layout is unknown");
    CT_TRY(check_filters(dcpl, name, type_size, layout == H5D_CHUNKED));
    if (layout != H5D_CHUNKED) return check_stored_bytes(ds, name, layout, nbytes);

    hsize_t chunk[H5S_MAX_RANK];
    int crank = H5Pget_chunk(dcpl, H5S_MAX_RANK, chunk);
    if (crank != rank) {
        snprintf(what, sizeof what, "its chunks have rank %d, the dataset %d", crank, rank);
        return bad(name, what);
    }
    uint64_t chunk_bytes = type_size;
    for (int i = 0; i < rank; i++) {
        bool fixed = maxdims[i] != H5S_UNLIMITED;
        if (chunk[i] == 0 || (fixed && chunk[i] > maxdims[i])) {
            snprintf(what, sizeof what, "chunk shape %s exceeds the dataset's fixed shape %s",
                     shape_of(rank, chunk, a, sizeof a), shape_of(rank, maxdims, b, sizeof b));
            return bad(name, what);
        }
        chunk_bytes = chunk[i] > MAX_CHUNK_BYTES / chunk_bytes ? MAX_CHUNK_BYTES + 1 : chunk_bytes * chunk[i];
    }
    if (chunk_bytes > MAX_CHUNK_BYTES) {
        snprintf(what, sizeof what, "chunk shape %s is 4 GiB or more", shape_of(rank, chunk, a, sizeof a));
        return bad(name, what);
    }
    return CT_OK;
}

ct_status ct_h5_check_dataset(hid_t ds, const char *name) {
    hid_t space = H5Dget_space(ds), type = H5Dget_type(ds), dcpl = H5Dget_create_plist(ds);
    ct_status s = CT_OK;
    char what[300], a[128], b[128];
    hsize_t dims[H5S_MAX_RANK], maxdims[H5S_MAX_RANK];
    int rank = space >= 0 ? H5Sget_simple_extent_dims(space, dims, maxdims) : -1;
    H5S_class_t cls = space >= 0 ? H5Sget_simple_extent_type(space) : H5S_NO_CLASS;
    if (space < 0 || type < 0 || dcpl < 0) {
        s = bad(name, "its header cannot be read");
    } else if (cls == H5S_NULL) {
        s = ct_error(CT_ERR_FORMAT, "dataset '%s': holds no data (a null dataspace)", name);
    } else if (rank < 0 || rank > CT_MAX_DIMS || (cls != H5S_SIMPLE && cls != H5S_SCALAR)) {
        snprintf(what, sizeof what, "its shape has rank %d (at most %d)", rank, CT_MAX_DIMS);
        s = bad(name, what);
    } else {
        s = check_type(type, name);
        size_t type_size = H5Tget_size(type);
        uint64_t nbytes = type_size;
        for (int i = 0; s == CT_OK && i < rank; i++) {
            if (maxdims[i] != H5S_UNLIMITED && dims[i] > maxdims[i]) {
                snprintf(what, sizeof what, "its shape %s exceeds its maximum shape %s",
                         shape_of(rank, dims, a, sizeof a), shape_of(rank, maxdims, b, sizeof b));
                s = bad(name, what);
            } else if (dims[i] && nbytes > MAX_DATASET_BYTES / dims[i]) {
                snprintf(what, sizeof what, "its shape %s is too large to read", shape_of(rank, dims, a, sizeof a));
                s = bad(name, what);
            } else {
                nbytes *= dims[i];
            }
        }
        if (s == CT_OK) s = check_layout(ds, dcpl, name, rank, maxdims, type_size, nbytes);
    }
    if (dcpl >= 0) H5Pclose(dcpl);
    if (type >= 0) H5Tclose(type);
    if (space >= 0) H5Sclose(space);
    return s;
}
