/* HDF5 files from fuzz inputs (see h5gen.h): a decoder that executes the encoded operations through
 * HDF5's API, and the matching encoder for seeds. Every HDF5 failure while building is ignored (a
 * description may ask for something HDF5 refuses, such as a compact dataset over 64 KB): the file
 * simply lacks that object. */
#include "h5gen.h"

#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/format/h5io.h"

/* Names picked by a u8 in [224, 240), for every target. */
static const char *const generic_names[] = {"features", "labels", "x",      "y",  "g/features", "data",
                                            "num_classes", "config", "optim", "step", "a/b",  "g",
                                            "exp_avg",  "weight",  "g/labels", "_"};
#define N_GENERIC (int)(sizeof generic_names / sizeof generic_names[0])

typedef struct builder {
    fz_input *in;
    const fz_h5_names *names;
    hid_t file, last; /* last: the last dataset or group made (attributes and hard links go there) */
    char name_buf[32];
} builder;

static const char *pick_name(builder *b) {
    uint8_t v = fz_u8(b->in);
    if (v < 224 && b->names && b->names->n > 0) return b->names->names[v % b->names->n];
    if (v < 240) return generic_names[v % N_GENERIC];
    size_t len;
    const uint8_t *p = fz_bytes(b->in, sizeof b->name_buf - 1, &len);
    for (size_t i = 0; i < len; i++) b->name_buf[i] = p[i] ? (char)p[i] : '_';
    if (len == 0) b->name_buf[len++] = '_';
    b->name_buf[len] = '\0';
    return b->name_buf;
}

/* A new type handle (closed by the caller), or -1. str_size: the size of a fixed-length string. */
static hid_t make_type(fz_h5_type t, size_t str_size) {
    hid_t h = -1;
    switch (t) {
    case FZ_U8: return H5Tcopy(H5T_STD_U8LE);
    case FZ_I8: return H5Tcopy(H5T_STD_I8LE);
    case FZ_U16: return H5Tcopy(H5T_STD_U16LE);
    case FZ_I16: return H5Tcopy(H5T_STD_I16LE);
    case FZ_U32: return H5Tcopy(H5T_STD_U32LE);
    case FZ_I32: return H5Tcopy(H5T_STD_I32LE);
    case FZ_U64: return H5Tcopy(H5T_STD_U64LE);
    case FZ_I64: return H5Tcopy(H5T_STD_I64LE);
    case FZ_F16: /* IEEE half precision, as h5py and numpy write float16 */
        h = H5Tcopy(H5T_IEEE_F32LE);
        H5Tset_fields(h, 15, 10, 5, 0, 10);
        H5Tset_size(h, 2);
        H5Tset_ebias(h, 15);
        return h;
    case FZ_F32: return H5Tcopy(H5T_IEEE_F32LE);
    case FZ_F64: return H5Tcopy(H5T_IEEE_F64LE);
    case FZ_I32BE: return H5Tcopy(H5T_STD_I32BE);
    case FZ_F64BE: return H5Tcopy(H5T_IEEE_F64BE);
    case FZ_STRING:
        h = H5Tcopy(H5T_C_S1);
        H5Tset_size(h, str_size ? str_size : 1);
        return h;
    case FZ_VLEN_STRING:
        h = H5Tcopy(H5T_C_S1);
        H5Tset_size(h, H5T_VARIABLE);
        H5Tset_cset(h, H5T_CSET_UTF8);
        return h;
    case FZ_COMPOUND:
        h = H5Tcreate(H5T_COMPOUND, 12);
        H5Tinsert(h, "a", 0, H5T_STD_I32LE);
        H5Tinsert(h, "b", 4, H5T_IEEE_F64LE);
        return h;
    case FZ_ENUM: {
        h = H5Tenum_create(H5T_STD_I8LE);
        int8_t a = 0, b = 1;
        H5Tenum_insert(h, "A", &a);
        H5Tenum_insert(h, "B", &b);
        return h;
    }
    case FZ_ARRAY: return H5Tarray_create2(H5T_STD_I32LE, 1, (hsize_t[]){3});
    case FZ_OPAQUE:
        h = H5Tcreate(H5T_OPAQUE, 4);
        H5Tset_tag(h, "fuzz");
        return h;
    case FZ_BITFIELD: return H5Tcopy(H5T_STD_B8LE);
    case FZ_INT128:
        h = H5Tcopy(H5T_STD_I64LE);
        H5Tset_size(h, 16);
        H5Tset_precision(h, 128);
        return h;
    case FZ_LDOUBLE: return H5Tcopy(H5T_NATIVE_LDOUBLE);
    case FZ_REFERENCE: return H5Tcopy(H5T_STD_REF_OBJ);
    case FZ_VLEN_INT: return H5Tvlen_create(H5T_STD_I32LE);
    case FZ_H5_NUM_TYPES: break;
    }
    return -1;
}

/* Types whose values are plain bytes (written from the input as they are). */
static bool raw_type(fz_h5_type t) { return t != FZ_VLEN_STRING && t != FZ_REFERENCE && t != FZ_VLEN_INT; }

/* The element size of a raw type (fixed strings: str_size). */
static size_t type_size(fz_h5_type t, size_t str_size) {
    hid_t h = make_type(t, str_size);
    size_t s = h >= 0 ? H5Tget_size(h) : 1;
    if (h >= 0) H5Tclose(h);
    return s;
}

/* The input's bytes (at most max of them) repeated to fill `bytes`; NULL when bytes is 0. */
static uint8_t *tiled(fz_input *in, size_t max, size_t bytes) {
    size_t len;
    const uint8_t *p = fz_bytes(in, max, &len);
    if (bytes == 0) return NULL;
    uint8_t *buf = calloc(1, bytes);
    if (!buf) abort();
    for (size_t i = 0; len && i < bytes; i++) buf[i] = p[i % len];
    return buf;
}

/* n variable-length strings from the input (each up to max bytes); freed with free_strings. */
static char **strings(fz_input *in, size_t n, size_t max) {
    char **s = calloc(n ? n : 1, sizeof *s);
    if (!s) abort();
    for (size_t i = 0; i < n; i++) {
        size_t len;
        const uint8_t *p = fz_bytes(in, max, &len);
        s[i] = malloc(len + 1);
        if (!s[i]) abort();
        memcpy(s[i], p, len);
        s[i][len] = '\0';
    }
    return s;
}

static void free_strings(char **s, size_t n) {
    for (size_t i = 0; i < n; i++) free(s[i]);
    free(s);
}

static void set_last(builder *b, hid_t obj) {
    if (obj < 0) return;
    if (b->last >= 0) H5Oclose(b->last);
    b->last = obj;
}

static hid_t link_plist(void) {
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    return lcpl;
}

/* One dimension: mostly 0..8, sometimes up to 1023, rarely a power of two up to 2^40. */
static hsize_t pick_dim(fz_input *in) {
    uint8_t v = fz_u8(in);
    if (v < 200) return v % 9;
    if (v < 250) return fz_u16(in) % 1024;
    return (hsize_t)1 << (fz_u8(in) % 41);
}

static void op_dataset(builder *b) {
    fz_input *in = b->in;
    const char *name = pick_name(b);
    char name_copy[64];
    snprintf(name_copy, sizeof name_copy, "%s", name);
    fz_h5_type t = (fz_h5_type)(fz_u8(in) % FZ_H5_NUM_TYPES);
    int rank = (int)fz_range(in, 0, 7);
    bool null_space = rank == 7;
    if (null_space) rank = 0;
    hsize_t dims[7], maxdims[7], chunk[7];
    uint64_t numel = 1;
    bool huge = false;
    for (int i = 0; i < rank; i++) {
        dims[i] = maxdims[i] = pick_dim(in);
        if (dims[i] && numel > UINT64_MAX / dims[i]) huge = true;
        else numel *= dims[i];
    }
    if (null_space) numel = 0;
    int layout = fz_pick(in, 3); /* contiguous, chunked, compact */
    if (rank == 0) layout = layout == 1 ? 0 : layout;
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_obj_track_times(dcpl, 0);
    if (layout == 1) {
        uint8_t unlimited = fz_u8(in), filters = fz_u8(in);
        for (int i = 0; i < rank; i++) {
            chunk[i] = 1 + fz_u8(in) % 4;
            if (dims[i] == 0 || (unlimited >> i & 1)) maxdims[i] = H5S_UNLIMITED;
            else if (chunk[i] > dims[i]) chunk[i] = dims[i];
        }
        H5Pset_chunk(dcpl, rank, chunk);
        if (filters & 1) H5Pset_shuffle(dcpl);
        if (filters & 2) H5Pset_deflate(dcpl, (unsigned)(filters >> 4) % 10);
        if (filters & 4) H5Pset_fletcher32(dcpl);
    } else if (layout == 2) {
        H5Pset_layout(dcpl, H5D_COMPACT);
    }
    size_t str_size = t == FZ_STRING ? 1 + fz_u8(in) % 16 : 0;
    size_t esize = raw_type(t) ? type_size(t, str_size) : 0;
    uint8_t *fill = NULL;
    if (fz_bool(in) && raw_type(t)) {
        fill = tiled(in, esize, esize);
    }
    /* The data is read from the input whatever HDF5 makes of the rest, so that what follows it in
     * the input keeps its meaning. */
    bool write = !huge && numel > 0 && numel <= FZ_H5_MAX_WRITE_BYTES &&
                 (!raw_type(t) || numel * esize <= FZ_H5_MAX_WRITE_BYTES) && t != FZ_REFERENCE && t != FZ_VLEN_INT;
    uint8_t *data = NULL;
    char **strs = NULL;
    if (write && t == FZ_VLEN_STRING) strs = strings(in, numel, 32);
    else if (write) data = tiled(in, numel * esize < 65535 ? numel * esize : 65535, numel * esize);

    hid_t type = make_type(t, str_size);
    if (fill && type >= 0) H5Pset_fill_value(dcpl, type, fill);
    hid_t space = null_space ? H5Screate(H5S_NULL)
                  : rank == 0 ? H5Screate(H5S_SCALAR)
                              : H5Screate_simple(rank, dims, maxdims);
    hid_t lcpl = link_plist();
    hid_t ds = type >= 0 && space >= 0 ? H5Dcreate2(b->file, name_copy, type, space, lcpl, dcpl, H5P_DEFAULT) : -1;
    if (ds >= 0 && data) H5Dwrite(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data);
    if (ds >= 0 && strs) H5Dwrite(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, strs);
    set_last(b, ds);
    if (strs) free_strings(strs, numel);
    free(data);
    free(fill);
    H5Pclose(lcpl);
    if (space >= 0) H5Sclose(space);
    if (type >= 0) H5Tclose(type);
    H5Pclose(dcpl);
}

static void op_attribute(builder *b) {
    fz_input *in = b->in;
    hid_t obj = fz_bool(in) || b->last < 0 ? b->file : b->last;
    const char *name = pick_name(b);
    char name_copy[64];
    snprintf(name_copy, sizeof name_copy, "%s", name);
    fz_h5_type t = (fz_h5_type)(fz_u8(in) % FZ_H5_NUM_TYPES);
    int kind = fz_pick(in, 3); /* scalar, 1-D, null */
    hsize_t n = kind == 1 ? (hsize_t)fz_range(in, 0, 4) : kind == 0 ? 1 : 0;
    hid_t space = kind == 0 ? H5Screate(H5S_SCALAR) : kind == 1 ? H5Screate_simple(1, &n, NULL) : H5Screate(H5S_NULL);
    hid_t type = -1;
    uint8_t *data = NULL;
    char **strs = NULL;
    if (t == FZ_STRING) {
        /* a fixed-length string of the value's length plus its terminator, as the project writes them */
        size_t len;
        const uint8_t *p = fz_bytes(in, 1024, &len);
        type = make_type(t, len + 1);
        data = calloc(1, (len + 1) * (n ? n : 1));
        if (!data) abort();
        for (hsize_t i = 0; i < n; i++) memcpy(data + i * (len + 1), p, len);
    } else if (t == FZ_VLEN_STRING) {
        type = make_type(t, 0);
        strs = strings(in, n, 1024);
    } else if (raw_type(t)) {
        type = make_type(t, 0);
        size_t es = type_size(t, 0);
        data = tiled(in, es * n < 256 ? es * n : 256, es * n);
    } else {
        type = make_type(t, 0);
    }
    hid_t attr = type >= 0 && space >= 0 ? H5Acreate2(obj, name_copy, type, space, H5P_DEFAULT, H5P_DEFAULT) : -1;
    if (attr >= 0 && (data || strs) && n > 0) H5Awrite(attr, type, data ? (const void *)data : (const void *)strs);
    if (attr >= 0) H5Aclose(attr);
    if (strs) free_strings(strs, n);
    free(data);
    if (type >= 0) H5Tclose(type);
    if (space >= 0) H5Sclose(space);
}

static void op_link(builder *b, int kind) {
    const char *name = pick_name(b);
    char name_copy[64];
    snprintf(name_copy, sizeof name_copy, "%s", name);
    hid_t lcpl = link_plist();
    if (kind == 4) {
        set_last(b, H5Gcreate2(b->file, name_copy, lcpl, H5P_DEFAULT, H5P_DEFAULT));
    } else if (kind == 5) {
        const char *target = pick_name(b);
        H5Lcreate_soft(target, b->file, name_copy, lcpl, H5P_DEFAULT);
    } else if (kind == 6) {
        if (b->last >= 0) H5Lcreate_hard(b->last, ".", b->file, name_copy, lcpl, H5P_DEFAULT);
    } else {
        H5Lcreate_external("ctrainer-fuzz-missing.h5", "/x", b->file, name_copy, lcpl, H5P_DEFAULT);
    }
    H5Pclose(lcpl);
}

bool fz_h5_build(fz_input *in, const char *path, const fz_h5_names *names) {
    uint8_t flags = fz_u8(in);
    uint32_t cut = flags & 2 ? fz_u32(in) : 0;
    ct_h5_lock();
    ct_h5_quiet();
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (flags & 1) H5Pset_libver_bounds(fapl, H5F_LIBVER_LATEST, H5F_LIBVER_LATEST);
    builder b = {.in = in, .names = names, .last = -1};
    b.file = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    H5Pclose(fapl);
    if (b.file < 0) {
        ct_h5_unlock();
        return false;
    }
    for (int op = 0; op < FZ_H5_MAX_OPS && in->n > 0; op++) {
        int kind = fz_u8(in) % 8;
        if (kind <= 2) op_dataset(&b);
        else if (kind == 3) op_attribute(&b);
        else op_link(&b, kind);
    }
    if (b.last >= 0) H5Oclose(b.last);
    herr_t rc = H5Fclose(b.file);
    ct_h5_unlock();
    if (rc < 0) return false;
    if (flags & 2) {
        off_t size = 0;
        FILE *f = fopen(path, "rb");
        if (f && fseeko(f, 0, SEEK_END) == 0) size = ftello(f);
        if (f) fclose(f);
        if (size > 0 && truncate(path, (off_t)(cut % (uint64_t)size)) != 0) return false;
    }
    return true;
}

/* --- encoding ------------------------------------------------------------------------------------ */

void fz_h5e_begin(fz_output *o, bool latest) { fzo_u8(o, latest ? 1 : 0); }

/* What pick_name reads as name: its index in the target's table, or the raw bytes. */
static void enc_name(fz_output *o, const fz_h5_names *names, const char *name) {
    for (int i = 0; names && i < names->n && i < 224; i++)
        if (strcmp(names->names[i], name) == 0) {
            fzo_u8(o, (uint8_t)i);
            return;
        }
    size_t len = strlen(name);
    if (len == 0 || len > 31) abort(); /* not encodable: put the name in the target's table */
    fzo_u8(o, 240);
    fzo_bytes(o, 31, name, len);
}

static void enc_dim(fz_output *o, int64_t d) {
    if (d >= 0 && d <= 8) {
        fzo_u8(o, (uint8_t)d);
    } else if (d > 8 && d < 1024) {
        fzo_u8(o, 200);
        fzo_u16(o, (uint16_t)d);
    } else {
        int k = 0;
        while (k < 41 && ((int64_t)1 << k) != d) k++;
        if (k == 41) abort(); /* not encodable: the seed's shape must be small or a power of two */
        fzo_u8(o, 250);
        fzo_u8(o, (uint8_t)k);
    }
}

bool fz_h5e_encodable_dim(int64_t d) { return d >= 0 && (d < 1024 || (d <= ((int64_t)1 << 40) && (d & (d - 1)) == 0)); }

void fz_h5e_dataset(fz_output *o, const fz_h5_names *names, const char *name, fz_h5_type type, int rank,
                    const int64_t *dims, const void *data, size_t bytes) {
    if (rank < 0 || rank > 6 || !raw_type(type) || type == FZ_STRING) abort();
    fzo_u8(o, 0);
    enc_name(o, names, name);
    fzo_u8(o, (uint8_t)type);
    fzo_range(o, 0, 7, rank);
    uint64_t numel = 1;
    for (int i = 0; i < rank; i++) {
        enc_dim(o, dims[i]);
        numel *= (uint64_t)dims[i];
    }
    fzo_range(o, 0, 2, 0); /* contiguous */
    fzo_u8(o, 0);          /* no fill value */
    size_t es = type_size(type, 0);
    if (bytes != numel * es) abort();
    if (numel > 0 && numel <= FZ_H5_MAX_WRITE_BYTES && bytes <= FZ_H5_MAX_WRITE_BYTES)
        fzo_bytes(o, bytes < 65535 ? bytes : 65535, data, bytes < 65535 ? bytes : 65535);
}

void fz_h5e_string_attr(fz_output *o, const fz_h5_names *names, bool on_root, const char *name, const char *value) {
    fzo_u8(o, 3);
    fzo_u8(o, on_root ? 1 : 0);
    enc_name(o, names, name);
    fzo_u8(o, FZ_STRING);
    fzo_range(o, 0, 2, 0); /* scalar */
    size_t len = strlen(value);
    fzo_bytes(o, 1024, value, len < 1024 ? len : 1024);
}

void fz_h5e_number_attr(fz_output *o, const fz_h5_names *names, bool on_root, const char *name, fz_h5_type type,
                        const void *value) {
    fzo_u8(o, 3);
    fzo_u8(o, on_root ? 1 : 0);
    enc_name(o, names, name);
    fzo_u8(o, (uint8_t)type);
    fzo_range(o, 0, 2, 0);
    size_t es = type_size(type, 0);
    fzo_bytes(o, es < 256 ? es : 256, value, es);
}

/* The encoding's type for a file's numeric type (FZ_H5_NUM_TYPES when there is none). */
static fz_h5_type type_of(hid_t t) {
    H5T_class_t c = H5Tget_class(t);
    size_t size = H5Tget_size(t);
    bool be = H5Tget_order(t) == H5T_ORDER_BE;
    if (c == H5T_INTEGER) {
        bool u = H5Tget_sign(t) == H5T_SGN_NONE;
        if (be) return size == 4 && !u ? FZ_I32BE : FZ_H5_NUM_TYPES;
        switch (size) {
        case 1: return u ? FZ_U8 : FZ_I8;
        case 2: return u ? FZ_U16 : FZ_I16;
        case 4: return u ? FZ_U32 : FZ_I32;
        case 8: return u ? FZ_U64 : FZ_I64;
        }
    } else if (c == H5T_FLOAT) {
        if (be) return size == 8 ? FZ_F64BE : FZ_H5_NUM_TYPES;
        return size == 2 ? FZ_F16 : size == 4 ? FZ_F32 : size == 8 ? FZ_F64 : FZ_H5_NUM_TYPES;
    }
    return FZ_H5_NUM_TYPES;
}

typedef struct walk {
    fz_output *o;
    const fz_h5_names *names;
    bool ok;
} walk;

/* The scalar string and number attributes of obj (on_root: obj is the root group). */
static herr_t attr_cb(hid_t obj, const char *name, const H5A_info_t *info, void *data) {
    (void)info;
    walk *w = data;
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    hid_t t = H5Aget_type(a), sp = H5Aget_space(a);
    H5I_type_t kind = H5Iget_type(obj);
    bool on_root = kind == H5I_FILE || kind == H5I_GROUP;
    if (H5Sget_simple_extent_npoints(sp) != 1) {
        w->ok = false;
    } else if (H5Tget_class(t) == H5T_STRING) {
        char *text = NULL;
        if (ct_h5_read_string_attr(obj, name, &text) == CT_OK) fz_h5e_string_attr(w->o, w->names, on_root, name, text);
        else w->ok = false;
        free(text);
    } else {
        fz_h5_type ft = type_of(t);
        unsigned char buf[16];
        if (ft != FZ_H5_NUM_TYPES && H5Aread(a, t, buf) >= 0)
            fz_h5e_number_attr(w->o, w->names, on_root, name, ft, buf);
        else
            w->ok = false;
    }
    H5Sclose(sp);
    H5Tclose(t);
    H5Aclose(a);
    return 0;
}

static herr_t object_cb(hid_t root, const char *name, const H5O_info_t *info, void *data) {
    walk *w = data;
    if (info->type != H5O_TYPE_DATASET) return 0; /* groups: made by the datasets' paths */
    hid_t ds = H5Dopen2(root, name, H5P_DEFAULT);
    hid_t t = H5Dget_type(ds), sp = H5Dget_space(ds);
    fz_h5_type ft = type_of(t);
    int rank = H5Sget_simple_extent_ndims(sp);
    hsize_t dims[H5S_MAX_RANK];
    int64_t d[7];
    bool fits = ft != FZ_H5_NUM_TYPES && rank >= 0 && rank <= 6 && H5Sget_simple_extent_type(sp) != H5S_NULL;
    uint64_t numel = 1;
    if (fits) {
        H5Sget_simple_extent_dims(sp, dims, NULL);
        for (int i = 0; i < rank; i++) {
            d[i] = (int64_t)dims[i];
            fits = fits && fz_h5e_encodable_dim(d[i]);
            numel *= dims[i];
        }
    }
    size_t bytes = fits ? numel * H5Tget_size(t) : 0;
    void *buf = fits && bytes <= FZ_H5_MAX_WRITE_BYTES ? malloc(bytes ? bytes : 1) : NULL;
    if (buf && (bytes == 0 || H5Dread(ds, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) >= 0)) {
        fz_h5e_dataset(w->o, w->names, name, ft, rank, d, buf, bytes);
        H5Aiterate2(ds, H5_INDEX_NAME, H5_ITER_INC, NULL, attr_cb, w);
    } else {
        w->ok = false;
    }
    free(buf);
    H5Sclose(sp);
    H5Tclose(t);
    H5Dclose(ds);
    return 0;
}

bool fz_h5e_from_file(fz_output *o, const char *path, const fz_h5_names *names) {
    ct_h5_lock();
    ct_h5_quiet();
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    walk w = {.o = o, .names = names, .ok = f >= 0};
    if (f >= 0) {
        fz_h5e_begin(o, false);
        H5Ovisit(f, H5_INDEX_NAME, H5_ITER_INC, object_cb, &w);
        hid_t root = H5Gopen2(f, "/", H5P_DEFAULT);
        H5Aiterate2(root, H5_INDEX_NAME, H5_ITER_INC, NULL, attr_cb, &w);
        H5Gclose(root);
        H5Fclose(f);
    }
    ct_h5_unlock();
    return w.ok;
}
