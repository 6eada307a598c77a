/* HDF5 datasets (see dataset.h): features and labels as two named datasets of one file, read on demand.
 *
 * Opening reads only metadata (plus one pass over the labels when the number of classes has to be
 * computed). Samples are read in blocks of rows, whole chunks of the file (about 16 KB of rows for
 * unchunked data), into a cache per dataset of at most CACHE_CAP bytes (64 MB, or what the
 * environment variable CTRAINER_HDF5_CACHE_MB says), evicted first in, first out. get_batch sorts
 * the requested rows so that each block is read at most once per batch, then converts rows from the
 * cache to float32 features (times the scale) and int64 or float32 labels.
 *
 * Why blocks rather than asking HDF5 for the rows: HDF5 maps an irregular selection (a union of
 * single rows) to chunks element by element, ~15 ms for 128 Fashion-MNIST rows, against ~0.1 ms for
 * copies out of cached blocks; and a compressed chunk is decompressed once while it stays cached,
 * not once per batch that touches it (Fashion-MNIST's 47 MB of pixels fit whole).
 *
 * Every HDF5 call holds ct_h5_lock, and so does every use of the cache, which makes concurrent
 * get_batch calls safe (they serialise on the lock).
 *
 * Why one long file: opening (the checks that refuse a malformed or lying file), the block cache and
 * get_batch all work on the same private struct and lock rules; the fuzz target reads it whole. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/format/h5_check.h"
#include "core/format/h5io.h"
#include "core/fs.h"
#include "data/dataset.h"
#include "data/hdf5_util.h"

/* Bytes of cached blocks per dataset (features and labels each), unless the environment variable
 * CTRAINER_HDF5_CACHE_MB says otherwise. */
#define CACHE_CAP ((size_t)64 << 20)
/* Block sizes: whole chunks of at least MIN_BLOCK bytes together (a chunk of one tiny row is not
 * worth an HDF5 call each), CONTIG_BLOCK for unchunked data. */
#define MIN_BLOCK ((size_t)4 << 10)
#define CONTIG_BLOCK ((size_t)16 << 10)
/* The largest sample (features or labels, as cached): a file's header may claim any extent without
 * storing it (HDF5 then reads fill values), and the reader allocates at least a sample per block,
 * so a few hundred bytes of file could otherwise make it allocate gigabytes. */
#define MAX_SAMPLE_BYTES ((size_t)1 << 30)

/* Element types as they are kept in the cache (native byte order). */
typedef enum elem_kind { K_U8, K_I8, K_U16, K_I16, K_U32, K_I32, K_U64, K_I64, K_F32, K_F64 } elem_kind;

typedef struct block_slot {
    int64_t block; /* -1 when empty */
    void *data;
} block_slot;

typedef struct h5_array {
    char name[256];
    hid_t id, space;     /* the dataset and its file dataspace (block selections are made on it) */
    int rank;
    hsize_t dims[CT_MAX_DIMS];
    int64_t row_numel;   /* elements per sample */
    H5T_class_t cls;
    size_t type_size;
    bool is_unsigned;
    char type_name[32];
    /* The block cache. */
    elem_kind kind;
    hid_t mem_type;      /* native type HDF5 converts blocks to */
    size_t esize;
    int64_t block_rows, nblocks;
    size_t block_bytes;
    int32_t *slot_of;    /* block -> slot, -1 when not cached */
    block_slot *slots;
    int32_t nslots, used, hand;
} h5_array;

typedef struct row_ref {
    int64_t row, pos; /* sample index in the file, row in the caller's batch */
} row_ref;

typedef struct h5_dataset {
    ct_dataset base;
    hid_t file;
    h5_array feat, lab;
    int64_t n;
    double scale;
    float u8_table[256];      /* scaled u8 values, the common case of image pixels */
    bool int_labels;
    int64_t num_classes;
    const char *classes_from; /* for messages: where num_classes came from */
    bool labels_scanned;      /* num_classes is max label + 1 of every label, read at open */
    bool negative_labels;     /* the scan met a negative label (a loss's ignore_index, or a mistake) */
    row_ref *refs;            /* get_batch's sorted indices, guarded by the HDF5 lock */
    int64_t refs_cap;
} h5_dataset;

static void array_init(h5_array *a) {
    memset(a, 0, sizeof *a);
    a->id = a->space = -1;
}

static void array_close(h5_array *a) {
    if (a->space >= 0) H5Sclose(a->space);
    if (a->id >= 0) H5Dclose(a->id);
    a->space = a->id = -1;
    for (int32_t i = 0; i < a->used; i++) free(a->slots[i].data);
    free(a->slots);
    free(a->slot_of);
    a->slots = NULL;
    a->slot_of = NULL;
    a->used = 0;
}

/* --- listing the file's contents for "dataset missing" errors ------------------------------------- */

typedef struct listing {
    char buf[768];
    size_t len;
    int count;
} listing;

static void listing_add(listing *l, const char *text) {
    if (l->len + 1 >= sizeof l->buf) return;
    int w = snprintf(l->buf + l->len, sizeof l->buf - l->len, "%s%s", l->count ? ", " : "", text);
    if (w > 0) l->len += (size_t)w < sizeof l->buf - l->len ? (size_t)w : sizeof l->buf - l->len - 1;
    l->count++;
}

static herr_t listing_cb(hid_t group, const char *name, const H5L_info_t *info, void *data) {
    listing *l = data;
    if (l->count == 16) {
        listing_add(l, "...");
        return 1; /* enough to show what the file holds */
    }
    char item[384];
    hid_t ds = info->type == H5L_TYPE_HARD ? H5Dopen2(group, name, H5P_DEFAULT) : -1;
    if (ds >= 0) {
        hid_t space = H5Dget_space(ds), type = H5Dget_type(ds);
        hsize_t dims[H5S_MAX_RANK];
        int nd = H5Sget_simple_extent_dims(space, dims, NULL);
        int64_t shape[CT_MAX_DIMS];
        for (int i = 0; i < nd && i < CT_MAX_DIMS; i++) shape[i] = (int64_t)dims[i];
        char s[128], t[32];
        if (nd > CT_MAX_DIMS) snprintf(s, sizeof s, "rank %d", nd);
        else ct_shape_str(nd < 0 ? 0 : nd, shape, s, sizeof s);
        snprintf(item, sizeof item, "'%s' %s %s", name, s, ct_h5_type_name(type, t, sizeof t));
        H5Tclose(type);
        H5Sclose(space);
        H5Dclose(ds);
    } else {
        hid_t g = info->type == H5L_TYPE_HARD ? H5Gopen2(group, name, H5P_DEFAULT) : -1;
        snprintf(item, sizeof item, g >= 0 ? "'%s/' (group)" : "'%s' (not a dataset)", name);
        if (g >= 0) H5Gclose(g);
    }
    listing_add(l, item);
    return 0;
}

static const char *list_contents(hid_t file, listing *l) {
    memset(l, 0, sizeof *l);
    H5Lvisit(file, H5_INDEX_NAME, H5_ITER_INC, listing_cb, l);
    if (l->count == 0) snprintf(l->buf, sizeof l->buf, "nothing");
    return l->buf;
}

/* --- opening -------------------------------------------------------------------------------------- */

static bool numeric_type(const h5_array *a) {
    if (a->cls == H5T_INTEGER) return a->type_size == 1 || a->type_size == 2 || a->type_size == 4 || a->type_size == 8;
    if (a->cls == H5T_FLOAT) return a->type_size == 2 || a->type_size == 4 || a->type_size == 8;
    return false;
}

/* The cache's element type: integers as they are, floats as float (half and single) or double. */
static void choose_kind(h5_array *a) {
    static const struct {
        elem_kind kind;
        size_t esize;
    } ints[2][4] = {{{K_I8, 1}, {K_I16, 2}, {K_I32, 4}, {K_I64, 8}}, {{K_U8, 1}, {K_U16, 2}, {K_U32, 4}, {K_U64, 8}}};
    if (a->cls == H5T_FLOAT) {
        a->kind = a->type_size <= 4 ? K_F32 : K_F64;
        a->esize = a->type_size <= 4 ? 4 : 8;
        a->mem_type = a->type_size <= 4 ? H5T_NATIVE_FLOAT : H5T_NATIVE_DOUBLE;
        return;
    }
    int w = a->type_size == 1 ? 0 : a->type_size == 2 ? 1 : a->type_size == 4 ? 2 : 3;
    a->kind = ints[a->is_unsigned][w].kind;
    a->esize = ints[a->is_unsigned][w].esize;
    switch (a->kind) {
    case K_U8: a->mem_type = H5T_NATIVE_UINT8; break;
    case K_I8: a->mem_type = H5T_NATIVE_INT8; break;
    case K_U16: a->mem_type = H5T_NATIVE_UINT16; break;
    case K_I16: a->mem_type = H5T_NATIVE_INT16; break;
    case K_U32: a->mem_type = H5T_NATIVE_UINT32; break;
    case K_I32: a->mem_type = H5T_NATIVE_INT32; break;
    case K_U64: a->mem_type = H5T_NATIVE_UINT64; break;
    default: a->mem_type = H5T_NATIVE_INT64; break;
    }
}

static size_t cache_cap(void) {
    const char *env = getenv("CTRAINER_HDF5_CACHE_MB");
    char *end;
    double mb = env ? strtod(env, &end) : 0;
    return env && *env && !*end && mb > 0 && mb < 1e9 ? (size_t)(mb * 1048576.0) : CACHE_CAP;
}

/* Sizes the block cache from the dataset's chunking; allocates only the block -> slot table. A
 * block is never part of a chunk (HDF5 decompresses a whole chunk to read any part of it, so parts
 * would cost a chunk each) unless one chunk alone is over half the cache. The cache holds at least
 * two blocks, even if that exceeds its size. */
static ct_status setup_cache(const char *path, h5_array *a) {
    size_t cap = cache_cap();
    int64_t n = (int64_t)a->dims[0];
    size_t row_bytes = (size_t)a->row_numel * a->esize;
    int64_t rows = (int64_t)(CONTIG_BLOCK / row_bytes);
    hid_t dcpl = H5Dget_create_plist(a->id);
    hsize_t chunk[H5S_MAX_RANK];
    if (dcpl >= 0 && H5Pget_layout(dcpl) == H5D_CHUNKED && H5Pget_chunk(dcpl, a->rank, chunk) == a->rank &&
        chunk[0] > 0) {
        /* Whole chunks, as many as make MIN_BLOCK bytes; but never a block that alone outgrows the
         * cache (a chunk may be declared with any size): then parts of chunks. */
        int64_t c = (int64_t)chunk[0], min_rows = (int64_t)((MIN_BLOCK + row_bytes - 1) / row_bytes);
        int64_t whole = c * ((min_rows + c - 1) / c);
        if ((uint64_t)whole <= cap / 2 / row_bytes) rows = whole;
    }
    if (dcpl >= 0) H5Pclose(dcpl);
    if (rows > n) rows = n;
    if (rows < 1) rows = 1;
    a->block_rows = rows;
    a->nblocks = (n + rows - 1) / rows;
    a->block_bytes = (size_t)rows * row_bytes;
    int64_t slots = (int64_t)(cap / a->block_bytes);
    if (slots < 2) slots = 2;
    if (slots > a->nblocks) slots = a->nblocks;
    a->nslots = (int32_t)slots;
    if (a->nblocks > INT32_MAX)
        return ct_error(CT_ERR_UNSUPPORTED, "%s: dataset '%s' has %lld blocks of %lld rows; at most %d are supported",
                        path, a->name, (long long)a->nblocks, (long long)rows, INT32_MAX);
    a->slot_of = malloc((size_t)(a->nblocks ? a->nblocks : 1) * sizeof *a->slot_of);
    a->slots = calloc((size_t)(a->nslots ? a->nslots : 1), sizeof *a->slots);
    if (!a->slot_of || !a->slots)
        return ct_error(CT_ERR_NOMEM, "%s: out of memory for the cache of '%s'", path, a->name);
    for (int64_t i = 0; i < a->nblocks; i++) a->slot_of[i] = -1;
    return CT_OK;
}

/* Opens dataset `name` (the role is "features" or "labels", for messages) and reads its shape and type. */
static ct_status open_array(const char *path, hid_t file, const char *name, const char *role, h5_array *a) {
    snprintf(a->name, sizeof a->name, "%s", name);
    if (!ct_h5_exists(file, name)) {
        listing l;
        return ct_error(CT_ERR_FORMAT, "%s: no dataset '%s' (expected the %s there); the file has %s", path, name, role,
                        list_contents(file, &l));
    }
    a->id = H5Dopen2(file, name, H5P_DEFAULT);
    if (a->id < 0) {
        listing l;
        return ct_error(CT_ERR_FORMAT, "%s: '%s' is not a dataset (expected the %s there); the file has %s", path, name,
                        role, list_contents(file, &l));
    }
    a->space = H5Dget_space(a->id);
    hid_t type = H5Dget_type(a->id);
    ct_status s = CT_OK;
    if (a->space < 0 || type < 0) {
        char d[256];
        s = ct_error(CT_ERR_FORMAT, "%s: cannot read the header of dataset '%s': %s", path, name,
                     ct_h5_error_detail(d, sizeof d));
    } else {
        a->cls = H5Tget_class(type);
        a->type_size = H5Tget_size(type);
        a->is_unsigned = a->cls == H5T_INTEGER && H5Tget_sign(type) == H5T_SGN_NONE;
        ct_h5_type_name(type, a->type_name, sizeof a->type_name);
        int nd = H5Sget_simple_extent_ndims(a->space);
        if (nd > CT_MAX_DIMS)
            s = ct_error(CT_ERR_FORMAT, "%s: dataset '%s' has rank %d; expected %s of rank at most %d", path, name, nd,
                         role, CT_MAX_DIMS);
        else if (nd < 0)
            s = ct_error(CT_ERR_FORMAT, "%s: dataset '%s' has no simple shape; expected an array of %s", path, name,
                         role);
        else {
            a->rank = nd;
            H5Sget_simple_extent_dims(a->space, a->dims, NULL);
        }
        if (s == CT_OK && !numeric_type(a))
            s = ct_error(CT_ERR_FORMAT,
                         "%s: dataset '%s' holds %s elements; expected numbers for the %s "
                         "(u8, i8, u16, i16, i32, i64, f32 or f64)",
                         path, name, a->type_name, role);
        if (s == CT_OK && (s = ct_h5_check_dataset(a->id, name)) != CT_OK) s = ct_error_prefix(s, "%s: ", path);
        if (s == CT_OK) choose_kind(a);
    }
    if (type >= 0) H5Tclose(type);
    return s;
}

/* The "num_classes" attribute of obj (the labels dataset or the file's root group), if any. */
static ct_status read_num_classes_attr(const char *path, hid_t obj, const char *where, int64_t *out, bool *found) {
    *found = false;
    if (H5Aexists(obj, "num_classes") <= 0) return CT_OK;
    hid_t attr = H5Aopen(obj, "num_classes", H5P_DEFAULT);
    if (attr < 0) return ct_error(CT_ERR_FORMAT, "%s: cannot open attribute 'num_classes' of %s", path, where);
    hid_t space = H5Aget_space(attr), type = H5Aget_type(attr);
    H5T_class_t cls = H5Tget_class(type);
    ct_status s = CT_OK;
    int64_t v = 0;
    if (H5Sget_simple_extent_npoints(space) != 1 || (cls != H5T_INTEGER && cls != H5T_FLOAT)) {
        s = ct_error(CT_ERR_FORMAT, "%s: attribute 'num_classes' of %s is not a single number", path, where);
    } else if (cls == H5T_INTEGER) {
        if (H5Aread(attr, H5T_NATIVE_INT64, &v) < 0)
            s = ct_error(CT_ERR_FORMAT, "%s: cannot read attribute 'num_classes' of %s", path, where);
    } else {
        double d = 0;
        if (H5Aread(attr, H5T_NATIVE_DOUBLE, &d) < 0)
            s = ct_error(CT_ERR_FORMAT, "%s: cannot read attribute 'num_classes' of %s", path, where);
        else if (!(d == floor(d) && d >= 1 && d < 9.0e18))
            s = ct_error(CT_ERR_FORMAT, "%s: attribute 'num_classes' of %s is %g; expected a positive integer", path,
                         where, d);
        else
            v = (int64_t)d;
    }
    if (s == CT_OK && v <= 0)
        s = ct_error(CT_ERR_FORMAT, "%s: attribute 'num_classes' of %s is %lld; expected a positive integer", path,
                     where, (long long)v);
    H5Tclose(type);
    H5Sclose(space);
    H5Aclose(attr);
    if (s == CT_OK) {
        *out = v;
        *found = true;
    }
    return s;
}

/* --- the block cache ----------------------------------------------------------------------------- */

/* Reads block b of a (its rows, all of each) into buf in the cache's element type. */
static ct_status read_block(const char *path, h5_array *a, int64_t b, void *buf) {
    int64_t first = b * a->block_rows, count = (int64_t)a->dims[0] - first;
    if (count > a->block_rows) count = a->block_rows;
    hsize_t off[CT_MAX_DIMS] = {(hsize_t)first}, cnt[CT_MAX_DIMS];
    cnt[0] = (hsize_t)count;
    for (int i = 1; i < a->rank; i++) cnt[i] = a->dims[i];
    hid_t mem = H5Screate_simple(a->rank, cnt, NULL);
    herr_t rc = mem < 0 ? -1 : H5Sselect_hyperslab(a->space, H5S_SELECT_SET, off, NULL, cnt, NULL);
    if (rc >= 0) rc = H5Dread(a->id, a->mem_type, mem, a->space, H5P_DEFAULT, buf);
    if (mem >= 0) H5Sclose(mem);
    if (rc < 0) {
        char det[256];
        return ct_error(CT_ERR_FORMAT, "%s: cannot read rows %lld..%lld of dataset '%s': %s", path, (long long)first,
                        (long long)(first + count - 1), a->name, ct_h5_error_detail(det, sizeof det));
    }
    return CT_OK;
}

/* The cached rows of block b, reading the block if needed (evicting the oldest one when full). */
static ct_status cached_block(const char *path, h5_array *a, int64_t b, const void **rows) {
    int32_t s = a->slot_of[b];
    if (s < 0) {
        if (a->used < a->nslots) {
            s = a->used;
            a->slots[s].block = -1;
            if (!(a->slots[s].data = malloc(a->block_bytes)))
                return ct_error(CT_ERR_NOMEM, "%s: out of memory caching '%s'", path, a->name);
            a->used++;
        } else {
            s = a->hand;
            a->hand = (a->hand + 1) % a->nslots;
        }
        if (a->slots[s].block >= 0) a->slot_of[a->slots[s].block] = -1;
        a->slots[s].block = -1;
        CT_TRY(read_block(path, a, b, a->slots[s].data));
        a->slots[s].block = b;
        a->slot_of[b] = s;
    }
    *rows = a->slots[s].data;
    return CT_OK;
}

/* Element i of a cache block as double / int64. */
#define KIND_SWITCH(kind, EXPR)                                                                    \
    switch (kind) {                                                                                \
    case K_U8: { typedef uint8_t T; EXPR; } break;                                                 \
    case K_I8: { typedef int8_t T; EXPR; } break;                                                  \
    case K_U16: { typedef uint16_t T; EXPR; } break;                                               \
    case K_I16: { typedef int16_t T; EXPR; } break;                                                \
    case K_U32: { typedef uint32_t T; EXPR; } break;                                               \
    case K_I32: { typedef int32_t T; EXPR; } break;                                                \
    case K_U64: { typedef uint64_t T; EXPR; } break;                                               \
    case K_I64: { typedef int64_t T; EXPR; } break;                                                \
    case K_F32: { typedef float T; EXPR; } break;                                                  \
    case K_F64: { typedef double T; EXPR; } break;                                                 \
    }

/* One feature row to float32: with scale 1 a single rounding of the value, else the value times
 * the scale in double, rounded once (so u8 pixels give exactly v / 255.0f). */
static void feature_row(const h5_dataset *d, const void *src, float *dst) {
    int64_t n = d->feat.row_numel;
    double scale = d->scale;
    if (d->feat.kind == K_U8) {
        const uint8_t *s = src;
        for (int64_t i = 0; i < n; i++) dst[i] = d->u8_table[s[i]];
    } else if (d->feat.kind == K_F32 && scale == 1.0) {
        memcpy(dst, src, (size_t)n * sizeof(float));
    } else if (scale == 1.0) {
        KIND_SWITCH(d->feat.kind, const T *s = src; for (int64_t i = 0; i < n; i++) dst[i] = (float)s[i])
    } else {
        KIND_SWITCH(d->feat.kind, const T *s = src;
                    for (int64_t i = 0; i < n; i++) dst[i] = (float)((double)s[i] * scale))
    }
}

/* Labels are class ids held as int64: a u64 label above INT64_MAX (or INT64_MAX itself, whose
 * num_classes would overflow) has no such id. A cast would make 2^64-1 the label -1, and the
 * message would blame a label the file does not hold, so it is refused with its own value. */
static ct_status label_too_large(const char *source, const h5_array *a, const void *src, int64_t i, int64_t row) {
    uint64_t v = a->kind == K_U64 ? ((const uint64_t *)src)[i] : (uint64_t)((const int64_t *)src)[i];
    return ct_error(CT_ERR_FORMAT,
                    "%s: label %llu of sample %lld in dataset '%s' is too large for a class id (at most 2^63 - 2)",
                    source, (unsigned long long)v, (long long)row, a->name);
}

static bool label_fits(const h5_array *a, const void *src, int64_t i) {
    if (a->kind == K_U64) return ((const uint64_t *)src)[i] < (uint64_t)INT64_MAX;
    return a->kind != K_I64 || ((const int64_t *)src)[i] != INT64_MAX;
}

/* Integer labels of one sample to int64 with the range check. */
static ct_status label_row(const h5_dataset *d, const void *src, int64_t row, int64_t *dst) {
    int64_t n = d->lab.row_numel;
    for (int64_t i = 0; i < n; i++)
        if (!label_fits(&d->lab, src, i)) return label_too_large(d->base.source, &d->lab, src, i, row);
    KIND_SWITCH(d->lab.kind, const T *s = src; for (int64_t i = 0; i < n; i++) dst[i] = (int64_t)s[i])
    /* a negative label is no class: it is the loss's ignore_index or the data's mistake, which the
     * Trainer's check against the loss tells apart (check_labels) */
    for (int64_t i = 0; i < n; i++)
        if (dst[i] >= d->num_classes) {
            char at[64] = "";
            if (d->lab.rank == 2) snprintf(at, sizeof at, ", element %lld", (long long)i);
            return ct_error(
                CT_ERR_FORMAT,
                "%s: label %lld of sample %lld%s in dataset '%s' is outside [0, %lld) (num_classes from %s)",
                d->base.source, (long long)dst[i], (long long)row, at, d->lab.name, (long long)d->num_classes,
                d->classes_from);
        }
    return CT_OK;
}

/* max label + 1, block by block without caching; negative labels are no classes (noted for
 * check_labels, which judges them against the loss's ignore_index). */
static ct_status scan_num_classes(h5_dataset *d) {
    h5_array *a = &d->lab;
    void *buf = malloc(a->block_bytes);
    if (!buf) return ct_error(CT_ERR_NOMEM, "%s: out of memory scanning the labels", d->base.source);
    int64_t max = -1;
    ct_status s = CT_OK;
    for (int64_t b = 0; b < a->nblocks && s == CT_OK; b++) {
        s = read_block(d->base.source, a, b, buf);
        int64_t first = b * a->block_rows, count = d->n - first < a->block_rows ? d->n - first : a->block_rows;
        for (int64_t i = 0; s == CT_OK && i < count * a->row_numel; i++) {
            int64_t v = 0;
            if (!label_fits(a, buf, i)) {
                s = label_too_large(d->base.source, a, buf, i, first + i / a->row_numel);
                break;
            }
            KIND_SWITCH(a->kind, v = (int64_t)((const T *)buf)[i])
            if (v < 0) d->negative_labels = true;
            if (v > max) max = v;
        }
    }
    free(buf);
    if (s == CT_OK) d->num_classes = max + 1;
    return s;
}

static ct_status validate_shapes(h5_dataset *d) {
    const char *path = d->base.source;
    h5_array *f = &d->feat, *l = &d->lab;
    int64_t fs[CT_MAX_DIMS], ls[CT_MAX_DIMS];
    for (int i = 0; i < f->rank; i++) fs[i] = (int64_t)f->dims[i];
    for (int i = 0; i < l->rank; i++) ls[i] = (int64_t)l->dims[i];
    char a[128], b[128];
    if (f->rank < 2)
        return ct_error(CT_ERR_SHAPE,
                        "%s: features dataset '%s' has shape %s; expected rank >= 2 ([N, sample dims...])", path,
                        f->name, ct_shape_str(f->rank, fs, a, sizeof a));
    if (l->rank != 1 && l->rank != 2)
        return ct_error(
            CT_ERR_SHAPE,
            "%s: labels dataset '%s' has shape %s; expected rank 1 ([N] class ids or targets) or 2 ([N, K])", path,
            l->name, ct_shape_str(l->rank, ls, a, sizeof a));
    if (fs[0] != ls[0])
        return ct_error(
            CT_ERR_SHAPE,
            "%s: features dataset '%s' has %lld samples but labels dataset '%s' has %lld; expected the same "
            "first dimension (shapes %s and %s)",
            path, f->name, (long long)fs[0], l->name, (long long)ls[0], ct_shape_str(f->rank, fs, a, sizeof a),
            ct_shape_str(l->rank, ls, b, sizeof b));
    /* Shapes come from the file: check their products before anything is sized by them. */
    size_t fbytes, lbytes;
    if (fs[0] > ((int64_t)1 << 39) || ct_shape_nbytes(f->rank - 1, fs + 1, CT_F64, &fbytes) != CT_OK ||
        ct_shape_nbytes(l->rank - 1, ls + 1, CT_F64, &lbytes) != CT_OK)
        return ct_error(CT_ERR_SHAPE, "%s: datasets '%s' %s and '%s' %s are too large to read (at most 2^39 samples)",
                        path, f->name, ct_shape_str(f->rank, fs, a, sizeof a), l->name,
                        ct_shape_str(l->rank, ls, b, sizeof b));
    if (fbytes > MAX_SAMPLE_BYTES || lbytes > MAX_SAMPLE_BYTES)
        return ct_error(CT_ERR_SHAPE, "%s: datasets '%s' %s and '%s' %s: samples larger than %zu MB are not supported",
                        path, f->name, ct_shape_str(f->rank, fs, a, sizeof a), l->name,
                        ct_shape_str(l->rank, ls, b, sizeof b), MAX_SAMPLE_BYTES >> 20);
    f->row_numel = (int64_t)(fbytes / 8);
    l->row_numel = (int64_t)(lbytes / 8);
    if (f->row_numel == 0 || l->row_numel == 0)
        return ct_error(CT_ERR_SHAPE, "%s: datasets '%s' %s and '%s' %s have empty samples", path, f->name,
                        ct_shape_str(f->rank, fs, a, sizeof a), l->name, ct_shape_str(l->rank, ls, b, sizeof b));
    d->n = fs[0];
    return CT_OK;
}

/* HDF5 reads the parts of a dataset that were never written as its fill value, so a file of a few
 * hundred bytes may declare 2^39 samples it does not hold: training would see fill values, and the
 * scan for num_classes would run for hours. A dataset must store all of its data: every chunk of a
 * chunked one (counted in its chunk index; HDF5 1.10's H5Dget_space_status calls compressed data
 * "partly allocated"), the block of a contiguous one. */
static ct_status check_stored(const char *path, const h5_array *a) {
    if (a->dims[0] == 0) return CT_OK; /* nothing to store */
    hid_t dcpl = H5Dget_create_plist(a->id);
    H5D_layout_t layout = dcpl >= 0 ? H5Pget_layout(dcpl) : H5D_LAYOUT_ERROR;
    bool known = false, whole = false;
    hsize_t have = 0, want = 1;
    if (layout == H5D_CHUNKED) {
        hsize_t chunk[H5S_MAX_RANK];
        hid_t all = H5Dget_space(a->id); /* everything selected (HDF5 1.10 refuses H5S_ALL here) */
        if (all >= 0 && H5Pget_chunk(dcpl, a->rank, chunk) == a->rank && H5Dget_num_chunks(a->id, all, &have) >= 0) {
            known = true;
            for (int i = 0; i < a->rank; i++) {
                hsize_t n = chunk[i] ? (a->dims[i] + chunk[i] - 1) / chunk[i] : 0;
                want = n && want > UINT64_MAX / n ? UINT64_MAX : want * n;
            }
            whole = have >= want;
        }
        if (all >= 0) H5Sclose(all);
    } else if (layout != H5D_LAYOUT_ERROR) {
        H5D_space_status_t status;
        if (H5Dget_space_status(a->id, &status) >= 0) {
            known = true;
            whole = status == H5D_SPACE_STATUS_ALLOCATED;
        }
    }
    if (dcpl >= 0) H5Pclose(dcpl);
    char det[256], s[128];
    if (!known)
        return ct_error(CT_ERR_FORMAT, "%s: cannot tell whether dataset '%s' stores its data: %s", path, a->name,
                        ct_h5_error_detail(det, sizeof det));
    if (whole) return CT_OK;
    int64_t shape[CT_MAX_DIMS];
    for (int i = 0; i < a->rank; i++) shape[i] = (int64_t)a->dims[i];
    if (layout == H5D_CHUNKED)
        return ct_error(CT_ERR_FORMAT,
                        "%s: dataset '%s' %s stores %llu of its %llu chunks (its shape was written, not all of its "
                        "values: an interrupted conversion?)",
                        path, a->name, ct_shape_str(a->rank, shape, s, sizeof s), (unsigned long long)have,
                        (unsigned long long)want);
    return ct_error(CT_ERR_FORMAT,
                    "%s: dataset '%s' %s stores none of its data (its shape was written, not its values: an "
                    "interrupted conversion?)",
                    path, a->name, ct_shape_str(a->rank, shape, s, sizeof s));
}

static ct_status setup(h5_dataset *d, const ct_hdf5_dataset_config *cfg) {
    const char *path = d->base.source;
    char det[256];
    CT_TRY(ct_check_regular_file(path)); /* HDF5 would block on a FIFO */
    htri_t is = H5Fis_hdf5(path);
    if (is <= 0)
        return ct_error(CT_ERR_FORMAT, "%s: not an HDF5 file (no HDF5 signature%s%s)", path, is < 0 ? "; " : "",
                        is < 0 ? ct_h5_error_detail(det, sizeof det) : "");
    d->file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (d->file < 0)
        return ct_error(CT_ERR_FORMAT, "%s: cannot open as HDF5 (truncated or corrupt file?): %s", path,
                        ct_h5_error_detail(det, sizeof det));
    CT_TRY(open_array(path, d->file, cfg->features ? cfg->features : "features", "features", &d->feat));
    CT_TRY(open_array(path, d->file, cfg->labels ? cfg->labels : "labels", "labels", &d->lab));
    CT_TRY(validate_shapes(d));
    CT_TRY(check_stored(path, &d->feat));
    CT_TRY(check_stored(path, &d->lab));
    CT_TRY(setup_cache(path, &d->feat));
    CT_TRY(setup_cache(path, &d->lab));

    h5_array *f = &d->feat, *l = &d->lab;
    if (!(cfg->scale >= 0) || !isfinite(cfg->scale))
        return ct_error(CT_ERR_INVALID_ARG, "%s: scale %g; expected a finite number >= 0 (0 = default)", path,
                        cfg->scale);
    d->scale = cfg->scale != 0 ? cfg->scale : f->kind == K_U8 ? 1.0 / 255.0 : 1.0;
    for (int v = 0; v < 256; v++) d->u8_table[v] = d->scale == 1.0 ? (float)v : (float)((double)v * d->scale);

    d->int_labels = l->cls == H5T_INTEGER;
    if (cfg->num_classes < 0)
        return ct_error(CT_ERR_INVALID_ARG, "%s: num_classes %lld; expected >= 0 (0 = from the file)", path,
                        (long long)cfg->num_classes);
    if (d->int_labels) {
        bool found = false;
        if (cfg->num_classes > 0) {
            d->num_classes = cfg->num_classes;
            d->classes_from = "num_classes of the config";
        } else {
            char where[300];
            snprintf(where, sizeof where, "dataset '%s'", l->name);
            CT_TRY(read_num_classes_attr(path, l->id, where, &d->num_classes, &found));
            d->classes_from = "the 'num_classes' attribute of the labels";
            if (!found) {
                CT_TRY(read_num_classes_attr(path, d->file, "the file", &d->num_classes, &found));
                d->classes_from = "the file's 'num_classes' attribute";
            }
            if (!found) {
                CT_TRY(scan_num_classes(d));
                d->classes_from = "max label + 1";
                d->labels_scanned = true;
            }
        }
    }

    ct_sample_spec *sp = &d->base.spec;
    sp->feature_shape.ndim = f->rank - 1;
    for (int i = 1; i < f->rank; i++) sp->feature_shape.dims[i - 1] = (int64_t)f->dims[i];
    sp->feature_dtype = CT_F32;
    sp->label_shape.ndim = l->rank - 1;
    if (l->rank == 2) sp->label_shape.dims[0] = (int64_t)l->dims[1];
    sp->label_dtype = d->int_labels ? CT_I64 : CT_F32;
    sp->num_classes = d->int_labels ? d->num_classes : 0;
    return CT_OK;
}

/* --- reading batches ------------------------------------------------------------------------------- */

static int64_t ds_length(ct_dataset *ds) { return ((h5_dataset *)ds)->n; }

static int cmp_ref(const void *a, const void *b) {
    const row_ref *x = a, *y = b;
    return x->row < y->row ? -1 : x->row > y->row ? 1 : (x->pos > y->pos) - (x->pos < y->pos);
}

/* Fetches the rows in sorted order (so each block is read at most once) into the caller's rows. */
static ct_status fetch(h5_dataset *d, const int64_t *indices, int64_t n, ct_tensor *features, ct_tensor *labels) {
    if (n > d->refs_cap) {
        row_ref *r = realloc(d->refs, (size_t)n * sizeof *r);
        if (!r) return ct_error(CT_ERR_NOMEM, "%s: out of memory for a batch of %lld", d->base.source, (long long)n);
        d->refs = r;
        d->refs_cap = n;
    }
    bool sorted = true;
    for (int64_t i = 0; i < n; i++) {
        d->refs[i] = (row_ref){indices[i], i};
        sorted = sorted && (i == 0 || indices[i] >= indices[i - 1]);
    }
    if (!sorted) qsort(d->refs, (size_t)n, sizeof *d->refs, cmp_ref);
    h5_array *f = &d->feat, *l = &d->lab;
    size_t frow = (size_t)f->row_numel * f->esize, lrow = (size_t)l->row_numel * l->esize;
    for (int64_t k = 0; k < n; k++) {
        int64_t row = d->refs[k].row, pos = d->refs[k].pos;
        const void *fb, *lb;
        CT_TRY(cached_block(d->base.source, f, row / f->block_rows, &fb));
        feature_row(d, (const char *)fb + (size_t)(row % f->block_rows) * frow,
                    (float *)features->data + pos * f->row_numel);
        CT_TRY(cached_block(d->base.source, l, row / l->block_rows, &lb));
        const void *src = (const char *)lb + (size_t)(row % l->block_rows) * lrow;
        if (d->int_labels) {
            CT_TRY(label_row(d, src, row, (int64_t *)labels->data + pos * l->row_numel));
        } else {
            float *dst = (float *)labels->data + pos * l->row_numel;
            KIND_SWITCH(l->kind, const T *s = src; for (int64_t i = 0; i < l->row_numel; i++) dst[i] = (float)s[i])
        }
    }
    return CT_OK;
}

static ct_status ds_get_batch(ct_dataset *ds, const int64_t *indices, int64_t n, const ct_fetch_ctx *ctx,
                              ct_tensor *features, ct_tensor *labels) {
    h5_dataset *d = (h5_dataset *)ds;
    ct_h5_lock();
    ct_h5_quiet();
    ct_status s = fetch(d, indices, n, features, labels);
    ct_h5_unlock();
    return s;
}

/* Rows [first, first + n) of the labels against rule, block by block past the cache (a pass at
 * the start of a run must not evict the features training is about to read). Integer labels go
 * through label_row, so a label beyond int64 or the file's own num_classes gets the message a
 * batch would give. Float labels are refused by their type, naming the dataset (the file holds
 * what a classifier cannot take, whatever the model), and the first value that is no class id
 * (1.5, -1, NaN), if any, so the message says whether a cast would do. A count
 * computed from every label at open (max label + 1) that fits the rule needs no second pass. */
static ct_status check_label_rows(h5_dataset *d, int64_t first, int64_t n, const ct_label_rule *rule) {
    h5_array *a = &d->lab;
    if (d->int_labels && d->labels_scanned && !d->negative_labels && d->num_classes <= rule->classes)
        return CT_OK;
    int64_t per = a->row_numel;
    size_t lrow = (size_t)per * a->esize;
    void *buf = malloc(a->block_bytes);
    int64_t *ids = malloc((size_t)per * sizeof *ids);
    double *vals = malloc((size_t)per * sizeof *vals);
    char where[300];
    snprintf(where, sizeof where, " in dataset '%s'", a->name);
    ct_status s = buf && ids && vals ? CT_OK : ct_error(CT_ERR_NOMEM, "%s: out of memory checking the labels",
                                                         d->base.source);
    int64_t bad_row = -1, bad_elem = 0;
    double bad = 0;
    for (int64_t b = first / a->block_rows; s == CT_OK && bad_row < 0 && b * a->block_rows < first + n; b++) {
        s = read_block(d->base.source, a, b, buf);
        int64_t lo = b * a->block_rows > first ? b * a->block_rows : first;
        int64_t hi = (b + 1) * a->block_rows < first + n ? (b + 1) * a->block_rows : first + n;
        for (int64_t row = lo; s == CT_OK && row < hi; row++) {
            const void *src = (const char *)buf + (size_t)(row - b * a->block_rows) * lrow;
            if (d->int_labels) {
                s = label_row(d, src, row, ids);
                if (s == CT_OK) s = ct_labels_check_i64(ids, per, per, row, d->base.source, where, rule);
            } else if (bad_row < 0) {
                KIND_SWITCH(a->kind, const T *v = src; for (int64_t i = 0; i < per; i++) vals[i] = (double)v[i])
                int64_t i = ct_labels_find_bad_f64(vals, per, rule);
                if (i >= 0) {
                    bad_row = row;
                    bad_elem = i;
                    bad = vals[i];
                    break;
                }
            }
        }
    }
    free(buf);
    free(ids);
    free(vals);
    if (s != CT_OK || d->int_labels) return s;
    char first_bad[160] = "; every value is a whole class id, so a cast will do";
    if (bad_row >= 0) {
        char elem[48] = "";
        if (per > 1) snprintf(elem, sizeof elem, " (element %lld)", (long long)bad_elem);
        snprintf(first_bad, sizeof first_bad, "; label %.17g of sample %lld%s is no class id at all", bad,
                 (long long)bad_row, elem);
    }
    return ct_error(CT_ERR_FORMAT, "%s: dataset '%s' holds %s labels, but the %s loss expects integer class ids in "
                    "[0, %lld), the classes of %s: store them with an integer type (u8, i32 or i64, say)%s",
                    d->base.source, a->name, a->type_name, rule->loss, (long long)rule->classes, rule->of, first_bad);
}

static ct_status ds_check_labels(ct_dataset *ds, int64_t first, int64_t n, const ct_label_rule *rule) {
    ct_h5_lock();
    ct_h5_quiet();
    ct_status s = check_label_rows((h5_dataset *)ds, first, n, rule);
    ct_h5_unlock();
    return s;
}

static void ds_destroy(ct_dataset *ds) {
    h5_dataset *d = (h5_dataset *)ds;
    ct_h5_lock();
    array_close(&d->feat);
    array_close(&d->lab);
    if (d->file >= 0) H5Fclose(d->file);
    ct_h5_unlock();
    free(d->refs);
    free(d);
}

static const ct_dataset_ops hdf5_ops = {
    .size = sizeof(ct_dataset_ops),
    .name = "hdf5",
    .length = ds_length,
    .get_batch = ds_get_batch,
    .destroy = ds_destroy,
    .check_labels = ds_check_labels,
};

ct_status ct_hdf5_dataset_create(const ct_hdf5_dataset_config *cfg, ct_dataset **out) {
    *out = NULL;
    if (!cfg || !cfg->path || !cfg->path[0]) return ct_error(CT_ERR_INVALID_ARG, "hdf5 dataset: no file path given");
    h5_dataset *d = calloc(1, sizeof *d);
    if (!d) return ct_error(CT_ERR_NOMEM, "%s: out of memory", cfg->path);
    ct_dataset_base_init(&d->base, &hdf5_ops);
    snprintf(d->base.source, sizeof d->base.source, "%s", cfg->path);
    d->file = -1;
    array_init(&d->feat);
    array_init(&d->lab);
    d->base.thread_safe = true; /* get_batch serialises on the HDF5 lock */
    ct_h5_lock();
    ct_h5_quiet();
    ct_status s = setup(d, cfg);
    ct_h5_unlock();
    if (s != CT_OK) {
        ds_destroy(&d->base);
        return s;
    }
    *out = &d->base;
    return CT_OK;
}
