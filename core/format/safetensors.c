/* The safetensors format (see safetensors.h): the header's JSON through jansson, validated in full
 * before any tensor is read; tensors read with pread so only the header is held in memory.
 *
 * Why one long file: the reader's validation (every field, offset and overlap checked, the file
 * being untrusted input that the fuzz target feeds) and the writer share the dtype and shape rules,
 * and reading them side by side is how the two stay each other's inverse. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/format/safetensors.h"
#include "core/fs.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors data is little-endian: this reader and writer assume a little-endian host"
#endif

/* --- dtypes ------------------------------------------------------------------------------------- */

static const struct {
    const char *name;
    int bits;
} DTYPES[CT_ST_NUM_DTYPES] = {
    [CT_ST_BOOL] = {"BOOL", 8},
    [CT_ST_F4] = {"F4", 4},
    [CT_ST_F6_E2M3] = {"F6_E2M3", 6},
    [CT_ST_F6_E3M2] = {"F6_E3M2", 6},
    [CT_ST_U8] = {"U8", 8},
    [CT_ST_I8] = {"I8", 8},
    [CT_ST_F8_E5M2] = {"F8_E5M2", 8},
    [CT_ST_F8_E4M3] = {"F8_E4M3", 8},
    [CT_ST_F8_E8M0] = {"F8_E8M0", 8},
    [CT_ST_F8_E4M3FNUZ] = {"F8_E4M3FNUZ", 8},
    [CT_ST_F8_E5M2FNUZ] = {"F8_E5M2FNUZ", 8},
    [CT_ST_I16] = {"I16", 16},
    [CT_ST_U16] = {"U16", 16},
    [CT_ST_F16] = {"F16", 16},
    [CT_ST_BF16] = {"BF16", 16},
    [CT_ST_I32] = {"I32", 32},
    [CT_ST_U32] = {"U32", 32},
    [CT_ST_F32] = {"F32", 32},
    [CT_ST_C64] = {"C64", 64},
    [CT_ST_F64] = {"F64", 64},
    [CT_ST_I64] = {"I64", 64},
    [CT_ST_U64] = {"U64", 64},
};

const char *ct_st_dtype_name(ct_st_dtype dt) { return (unsigned)dt < CT_ST_NUM_DTYPES ? DTYPES[dt].name : NULL; }

bool ct_st_dtype_parse(const char *name, ct_st_dtype *out) {
    for (int i = 0; i < CT_ST_NUM_DTYPES; i++)
        if (strcmp(DTYPES[i].name, name) == 0) {
            *out = (ct_st_dtype)i;
            return true;
        }
    return false;
}

int ct_st_dtype_bits(ct_st_dtype dt) {
    CT_ASSERT((unsigned)dt < CT_ST_NUM_DTYPES);
    return DTYPES[dt].bits;
}

ct_st_dtype ct_st_dtype_of(ct_dtype dt) {
    switch (dt) {
    case CT_F32: return CT_ST_F32;
    case CT_F64: return CT_ST_F64;
    case CT_BF16: return CT_ST_BF16;
    case CT_I32: return CT_ST_I32;
    case CT_I64: return CT_ST_I64;
    case CT_U8: return CT_ST_U8;
    }
    CT_ASSERT(!"unknown ct_dtype");
    return CT_ST_F32;
}

bool ct_st_dtype_is_float(ct_st_dtype dt) {
    return dt == CT_ST_F16 || dt == CT_ST_BF16 || dt == CT_ST_F32 || dt == CT_ST_F64;
}

/* Bytes of numel elements of dt; false when they overflow or are not a whole number of bytes. */
static bool nbytes_of(ct_st_dtype dt, int64_t numel, uint64_t *out) {
    uint64_t bits = (uint64_t)DTYPES[dt].bits;
    if ((uint64_t)numel > UINT64_MAX / bits) return false;
    uint64_t total = (uint64_t)numel * bits;
    if (total % 8) return false;
    *out = total / 8;
    return true;
}

/* --- element conversion ------------------------------------------------------------------------- */

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

float ct_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    if (exp == 0) {
        float v = (float)mant * 0x1p-24f; /* zero or subnormal: exact */
        return sign ? -v : v;
    }
    if (exp == 31) return bits_f32(sign | 0x7f800000u | (mant << 13));
    return bits_f32(sign | ((exp + 112) << 23) | (mant << 13));
}

uint16_t ct_f32_to_f16(float f) {
    uint32_t x = f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return sign | 0x7e00;       /* NaN: the quiet NaN PyTorch's .half() gives */
    if (ax >= 0x477ff000u) return sign | 0x7c00;      /* from 65520 up (or inf): infinity */
    if (ax < 0x38800000u) {                           /* below 2^-14: a subnormal (or zero) */
        float m = nearbyintf(bits_f32(ax) * 0x1p24f); /* exact product, rounded to nearest even */
        return sign | (uint16_t)m;
    }
    ax -= 112u << 23;                   /* rebias the exponent 127 -> 15 */
    ax += 0xfffu + ((ax >> 13) & 1u);   /* round to nearest even on the 13 dropped bits */
    return sign | (uint16_t)(ax >> 13); /* a carry into the exponent is the right result */
}

float ct_bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

uint16_t ct_f32_to_bf16(float f) {
    if (isnan(f)) return 0x7fc0; /* as c10::BFloat16 */
    uint32_t x = f32_bits(f);
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

void ct_st_convert_from(const void *src, ct_dtype src_dt, ct_st_dtype dst_dt, void *dst, int64_t n) {
    CT_ASSERT(src_dt == CT_F32 || src_dt == CT_F64);
    CT_ASSERT(ct_st_dtype_is_float(dst_dt));
    const float *sf = src;
    const double *sd = src;
    for (int64_t i = 0; i < n; i++) {
        float v = src_dt == CT_F32 ? sf[i] : (float)sd[i];
        switch (dst_dt) {
        case CT_ST_F16: ((uint16_t *)dst)[i] = ct_f32_to_f16(v); break;
        case CT_ST_BF16: ((uint16_t *)dst)[i] = ct_f32_to_bf16(v); break;
        case CT_ST_F32: ((float *)dst)[i] = v; break;
        default: ((double *)dst)[i] = src_dt == CT_F32 ? (double)sf[i] : sd[i]; break;
        }
    }
}

/* --- reading ------------------------------------------------------------------------------------ */

struct ct_st_file {
    char *path;
    int fd;                     /* -1 for an image in memory */
    const unsigned char *image; /* the whole file, when in memory */
    uint64_t data_start;        /* 8 + header size */
    uint64_t data_size;
    json_t *header;        /* tensor names point at its keys */
    json_t *metadata;      /* borrowed from header */
    ct_st_tensor *tensors; /* by name */
    int count;
    int64_t *shapes; /* every tensor's shape, one after another */
};

static ct_status bad(const ct_st_file *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static ct_status bad(const ct_st_file *f, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return ct_error(CT_ERR_FORMAT, "%s: %s", f->path, msg);
}

static const char *kind_of(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "a list";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a real number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "a value";
}

static ct_status read_metadata(ct_st_file *f, json_t *meta) {
    if (!json_is_object(meta)) return bad(f, "\"__metadata__\" must be an object of strings, not %s", kind_of(meta));
    const char *k;
    json_t *v;
    json_object_foreach(meta, k, v) {
        if (!json_is_string(v))
            return bad(f, "\"__metadata__\": the value of '%s' must be a string, not %s", k, kind_of(v));
    }
    f->metadata = meta;
    return CT_OK;
}

/* A JSON integer >= 0, into *out. */
static bool nonneg_int(const json_t *v, int64_t *out) {
    if (!json_is_integer(v) || json_integer_value(v) < 0) return false;
    *out = (int64_t)json_integer_value(v);
    return true;
}

/* "[2, 3]" for any number of dimensions, cut short with "..." when it does not fit. */
static void shape_text(int ndim, const int64_t *shape, char *buf, size_t cap) {
    size_t at = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < ndim && at < cap; d++)
        at += (size_t)snprintf(buf + at, cap - at, "%s%lld", d ? ", " : "", (long long)shape[d]);
    if (at < cap)
        snprintf(buf + at, cap - at, "]");
    else if (cap > 4)
        strcpy(buf + cap - 5, "...]");
}

static ct_status read_entry(ct_st_file *f, const char *name, json_t *info, ct_st_tensor *t, int64_t **shape_at) {
    if (!json_is_object(info)) return bad(f, "tensor '%s': expected an object, got %s", name, kind_of(info));
    const char *k;
    json_t *v;
    json_object_foreach(info, k, v) {
        if (strcmp(k, "dtype") != 0 && strcmp(k, "shape") != 0 && strcmp(k, "data_offsets") != 0)
            return bad(f, "tensor '%s': unknown key '%s' (a tensor has dtype, shape and data_offsets)", name, k);
    }
    json_t *dt = json_object_get(info, "dtype"), *shape = json_object_get(info, "shape"),
           *offs = json_object_get(info, "data_offsets");
    if (!dt || !shape || !offs)
        return bad(f, "tensor '%s': missing '%s'", name, !dt ? "dtype" : !shape ? "shape" : "data_offsets");
    if (!json_is_string(dt)) return bad(f, "tensor '%s': dtype must be a string, not %s", name, kind_of(dt));
    if (!ct_st_dtype_parse(json_string_value(dt), &t->dtype))
        return bad(f, "tensor '%s': unknown dtype '%s'", name, json_string_value(dt));
    if (!json_is_array(shape))
        return bad(f, "tensor '%s': shape must be a list of non-negative integers, not %s", name, kind_of(shape));
    t->name = name;
    t->ndim = (int)json_array_size(shape);
    t->shape = *shape_at;
    bool overflow = false, empty = false;
    int64_t numel = 1;
    for (int d = 0; d < t->ndim; d++) {
        int64_t n;
        if (!nonneg_int(json_array_get(shape, (size_t)d), &n))
            return bad(f, "tensor '%s': shape[%d] must be a non-negative integer", name, d);
        (*shape_at)[d] = n;
        empty |= n == 0;
        if (n != 0 && numel > INT64_MAX / n)
            overflow = true;
        else
            numel *= n;
    }
    *shape_at += t->ndim;
    t->numel = empty ? 0 : numel;
    char sh[256];
    shape_text(t->ndim, t->shape, sh, sizeof sh);
    uint64_t nbytes = 0;
    if (overflow && !empty) return bad(f, "tensor '%s': shape %s has more elements than fit in 64 bits", name, sh);
    if (!nbytes_of(t->dtype, t->numel, &nbytes))
        return bad(f, "tensor '%s': %lld elements of %s are not a whole number of bytes (or overflow)", name,
                   (long long)t->numel, DTYPES[t->dtype].name);
    int64_t b, e;
    if (!json_is_array(offs) || json_array_size(offs) != 2 || !nonneg_int(json_array_get(offs, 0), &b) ||
        !nonneg_int(json_array_get(offs, 1), &e))
        return bad(f, "tensor '%s': data_offsets must be a list of two non-negative integers [begin, end]", name);
    t->begin = (uint64_t)b;
    t->end = (uint64_t)e;
    if (t->end < t->begin)
        return bad(f, "tensor '%s': data_offsets [%lld, %lld] end before they begin", name, (long long)b, (long long)e);
    if (t->end - t->begin != nbytes)
        return bad(f, "tensor '%s': shape %s of %s is %llu bytes, but data_offsets [%lld, %lld] hold %llu", name, sh,
                   DTYPES[t->dtype].name, (unsigned long long)nbytes, (long long)b, (long long)e,
                   (unsigned long long)(t->end - t->begin));
    if (t->end > f->data_size)
        return bad(f,
                   "tensor '%s': data_offsets [%lld, %lld] run past the end of the data (%llu bytes after the header)",
                   name, (long long)b, (long long)e, (unsigned long long)f->data_size);
    return CT_OK;
}

static int by_name(const void *a, const void *b) {
    return strcmp(((const ct_st_tensor *)a)->name, ((const ct_st_tensor *)b)->name);
}

static int by_offsets(const void *a, const void *b) {
    const ct_st_tensor *x = *(ct_st_tensor *const *)a, *y = *(ct_st_tensor *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* The tensors must tile the data section exactly: sorted by offset, each starts where the previous
 * ended, and the last ends at the end of the file. */
static ct_status check_layout(ct_st_file *f) {
    if (f->count == 0) {
        if (f->data_size != 0)
            return bad(f, "the header lists no tensors, but %llu bytes follow it", (unsigned long long)f->data_size);
        return CT_OK;
    }
    ct_st_tensor **order = malloc(sizeof *order * (size_t)f->count);
    if (!order) return ct_error(CT_ERR_NOMEM, "%s: out of memory", f->path);
    for (int i = 0; i < f->count; i++) order[i] = &f->tensors[i];
    qsort(order, (size_t)f->count, sizeof *order, by_offsets);
    ct_status s = CT_OK;
    uint64_t at = 0;
    const char *prev = NULL;
    for (int i = 0; i < f->count && s == CT_OK; i++) {
        const ct_st_tensor *t = order[i];
        if (t->begin > at)
            s = prev ? bad(f, "tensor '%s': its data starts at byte %llu, but '%s' ends at %llu (a gap of %llu bytes)",
                           t->name, (unsigned long long)t->begin, prev, (unsigned long long)at,
                           (unsigned long long)(t->begin - at))
                     : bad(f, "tensor '%s': the first tensor's data starts at byte %llu, not 0", t->name,
                           (unsigned long long)t->begin);
        else if (t->begin < at)
            s = bad(f, "tensor '%s': its data [%llu, %llu) overlaps '%s', which ends at %llu", t->name,
                    (unsigned long long)t->begin, (unsigned long long)t->end, prev, (unsigned long long)at);
        at = t->end;
        prev = t->name;
    }
    if (s == CT_OK && at != f->data_size)
        s = bad(f, "the tensors' data ends at byte %llu, but %llu bytes follow the header (%llu trailing bytes)",
                (unsigned long long)at, (unsigned long long)f->data_size, (unsigned long long)(f->data_size - at));
    free(order);
    return s;
}

/* Parses and validates the header hdr[0, n) of a file with `file_size` bytes. */
static ct_status parse_header(ct_st_file *f, const char *hdr, uint64_t n, uint64_t file_size) {
    f->data_start = 8 + n;
    f->data_size = file_size - f->data_start;
    if (n == 0 || hdr[0] != '{') return bad(f, "the header does not start with '{' (not a safetensors file?)");
    json_error_t err;
    f->header = json_loadb(hdr, (size_t)n, JSON_REJECT_DUPLICATES, &err);
    if (!f->header) {
        if (strncmp(err.text, "duplicate object key", 20) == 0)
            return bad(f, "the header names a tensor twice: %s (byte %d of the header)", err.text, err.position);
        return bad(f, "the header is not valid JSON: %s (line %d, column %d)", err.text, err.line, err.column);
    }
    if (!json_is_object(f->header)) return bad(f, "the header is %s, not an object", kind_of(f->header));
    size_t entries = json_object_size(f->header), dims = 0;
    const char *name;
    json_t *info;
    json_object_foreach(f->header, name, info) {
        json_t *shape = json_object_get(info, "shape");
        if (json_is_array(shape)) dims += json_array_size(shape);
    }
    f->tensors = calloc(entries ? entries : 1, sizeof *f->tensors);
    f->shapes = malloc(sizeof *f->shapes * (dims ? dims : 1));
    if (!f->tensors || !f->shapes) return ct_error(CT_ERR_NOMEM, "%s: out of memory reading the header", f->path);
    int64_t *shape_at = f->shapes;
    json_object_foreach(f->header, name, info) {
        if (strcmp(name, "__metadata__") == 0) {
            CT_TRY(read_metadata(f, info));
            continue;
        }
        CT_TRY(read_entry(f, name, info, &f->tensors[f->count], &shape_at));
        f->count++;
    }
    qsort(f->tensors, (size_t)f->count, sizeof *f->tensors, by_name);
    return check_layout(f);
}

static ct_status new_file(const char *name, ct_st_file **out) {
    *out = NULL;
    ct_st_file *f = calloc(1, sizeof *f);
    if (!f || !(f->path = strdup(name))) {
        free(f);
        return ct_error(CT_ERR_NOMEM, "%s: out of memory", name);
    }
    f->fd = -1;
    *out = f;
    return CT_OK;
}

static ct_status size_checks(ct_st_file *f, uint64_t file_size, uint64_t n) {
    if (n > CT_ST_MAX_HEADER)
        return bad(f, "header size %llu exceeds the format's limit of %llu bytes (not a safetensors file?)",
                   (unsigned long long)n, (unsigned long long)CT_ST_MAX_HEADER);
    if (n > file_size - 8)
        return bad(f, "header size %llu runs past the end of the file (%llu bytes)", (unsigned long long)n,
                   (unsigned long long)file_size);
    return CT_OK;
}

static uint64_t le64(const unsigned char *b) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | b[i];
    return v;
}

ct_status ct_st_open_memory(const void *data, size_t size, const char *name, ct_st_file **out) {
    CT_ASSERT(out && (data || size == 0));
    ct_st_file *f;
    CT_TRY(new_file(name ? name : "<memory>", &f));
    f->image = data;
    ct_status s = CT_OK;
    if (size < 8)
        s = bad(f, "%zu bytes: too short for a safetensors file (8 bytes of header size, then the header)", size);
    uint64_t n = s == CT_OK ? le64(data) : 0;
    if (s == CT_OK) s = size_checks(f, size, n);
    if (s == CT_OK) s = parse_header(f, (const char *)data + 8, n, size);
    if (s != CT_OK) {
        ct_st_close(f);
        return s;
    }
    *out = f;
    return CT_OK;
}

/* pread until len bytes are in, or an error. */
static ct_status read_at(ct_st_file *f, void *dst, uint64_t len, uint64_t pos) {
    char *p = dst;
    while (len > 0) {
        size_t chunk = len > (1u << 30) ? (1u << 30) : (size_t)len;
        ssize_t got = pread(f->fd, p, chunk, (off_t)pos);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0)
            return got < 0 ? ct_error(CT_ERR_IO, "%s: cannot read: %s", f->path, strerror(errno))
                           : ct_error(CT_ERR_IO, "%s: the file ended early (changed while reading?)", f->path);
        p += got;
        pos += (uint64_t)got;
        len -= (uint64_t)got;
    }
    return CT_OK;
}

ct_status ct_st_open(const char *path, ct_st_file **out) {
    CT_ASSERT(path && out);
    ct_st_file *f;
    CT_TRY(new_file(path, &f));
    ct_status s = CT_OK;
    struct stat st;
    s = ct_open_read(path, &f->fd); /* a regular file: a FIFO would block the open itself */
    if (s == CT_OK && fstat(f->fd, &st) != 0) s = ct_error(CT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    uint64_t size = s == CT_OK ? (uint64_t)st.st_size : 0, n = 0;
    unsigned char head[8];
    if (s == CT_OK && size < 8)
        s = bad(f, "%llu bytes: too short for a safetensors file (8 bytes of header size, then the header)",
                (unsigned long long)size);
    if (s == CT_OK) s = read_at(f, head, 8, 0);
    if (s == CT_OK) s = size_checks(f, size, n = le64(head));
    char *hdr = NULL;
    if (s == CT_OK && !(hdr = malloc(n ? n : 1))) s = ct_error(CT_ERR_NOMEM, "%s: out of memory for the header", path);
    if (s == CT_OK) s = read_at(f, hdr, n, 8);
    if (s == CT_OK) s = parse_header(f, hdr, n, size);
    free(hdr);
    if (s != CT_OK) {
        ct_st_close(f);
        return s;
    }
    *out = f;
    return CT_OK;
}

void ct_st_close(ct_st_file *f) {
    if (!f) return;
    if (f->fd >= 0) close(f->fd);
    json_decref(f->header);
    free(f->tensors);
    free(f->shapes);
    free(f->path);
    free(f);
}

const char *ct_st_path(const ct_st_file *f) { return f->path; }
int ct_st_count(const ct_st_file *f) { return f->count; }

const ct_st_tensor *ct_st_get(const ct_st_file *f, int i) {
    CT_ASSERT(i >= 0 && i < f->count);
    return &f->tensors[i];
}

const ct_st_tensor *ct_st_find(const ct_st_file *f, const char *name) {
    ct_st_tensor key = {.name = name};
    return f->count ? bsearch(&key, f->tensors, (size_t)f->count, sizeof key, by_name) : NULL;
}

const json_t *ct_st_metadata(const ct_st_file *f) { return f->metadata; }

ct_status ct_st_read_raw(ct_st_file *f, const ct_st_tensor *t, void *dst) {
    uint64_t len = t->end - t->begin;
    if (len == 0) return CT_OK;
    if (f->image) {
        memcpy(dst, f->image + f->data_start + t->begin, (size_t)len);
        return CT_OK;
    }
    return read_at(f, dst, len, f->data_start + t->begin);
}

ct_status ct_st_read_float(ct_st_file *f, const ct_st_tensor *t, ct_tensor *dst) {
    CT_ASSERT(dst->dtype == CT_F32 || dst->dtype == CT_F64);
    CT_ASSERT(dst->device.kind == CT_DEVICE_CPU);
    if (!ct_st_dtype_is_float(t->dtype))
        return ct_error(CT_ERR_DTYPE, "%s: tensor '%s' is %s; only F16, BF16, F32 and F64 load into %s parameters",
                        f->path, t->name, DTYPES[t->dtype].name, ct_dtype_name(dst->dtype));
    int64_t n = ct_tensor_numel(dst);
    CT_ASSERT(n == t->numel);
    if (t->dtype == ct_st_dtype_of(dst->dtype)) return ct_st_read_raw(f, t, dst->data);
    void *raw = malloc(t->end - t->begin ? t->end - t->begin : 1);
    if (!raw) return ct_error(CT_ERR_NOMEM, "%s: out of memory reading tensor '%s'", f->path, t->name);
    ct_status s = ct_st_read_raw(f, t, raw);
    for (int64_t i = 0; s == CT_OK && i < n; i++) {
        double v;
        switch (t->dtype) {
        case CT_ST_F16: v = ct_f16_to_f32(((const uint16_t *)raw)[i]); break;
        case CT_ST_BF16: v = ct_bf16_to_f32(((const uint16_t *)raw)[i]); break;
        case CT_ST_F32: v = ((const float *)raw)[i]; break;
        default: v = ((const double *)raw)[i]; break;
        }
        if (dst->dtype == CT_F32)
            ((float *)dst->data)[i] = (float)v;
        else
            ((double *)dst->data)[i] = v;
    }
    free(raw);
    return s;
}

/* --- writing ------------------------------------------------------------------------------------ */

typedef struct plan {
    const ct_st_entry *entries;
    int *order;          /* entries in file order */
    char *header;        /* JSON text, padded with spaces */
    uint64_t header_len; /* a multiple of 8 */
    uint64_t *nbytes;    /* per entry */
    uint64_t data_size;
} plan;

static int by_dtype_then_name(const void *a, const void *b, void *ctx) {
    const ct_st_entry *e = ctx, *x = &e[*(const int *)a], *y = &e[*(const int *)b];
    if (x->dtype != y->dtype) return x->dtype > y->dtype ? -1 : 1; /* widest first, as the reference */
    return strcmp(x->name, y->name);
}

static int by_entry_name(const void *a, const void *b, void *ctx) {
    const ct_st_entry *e = ctx;
    return strcmp(e[*(const int *)a].name, e[*(const int *)b].name);
}

static int by_string(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void plan_free(plan *p) {
    free(p->order);
    free(p->header);
    free(p->nbytes);
}

/* "__metadata__" with its keys sorted. */
static ct_status metadata_json(const json_t *metadata, json_t **out) {
    *out = NULL;
    if (!metadata) return CT_OK;
    if (!json_is_object(metadata))
        return ct_error(CT_ERR_INVALID_ARG, "safetensors: metadata must be an object of strings");
    size_t n = json_object_size(metadata), i = 0;
    const char **keys = malloc(sizeof *keys * (n ? n : 1));
    json_t *m = json_object();
    if (!keys || !m) {
        free(keys);
        json_decref(m);
        return ct_error(CT_ERR_NOMEM, "safetensors: out of memory");
    }
    const char *k;
    json_t *v;
    ct_status s = CT_OK;
    json_object_foreach((json_t *)metadata, k, v) {
        if (!json_is_string(v) && s == CT_OK)
            s = ct_error(CT_ERR_INVALID_ARG, "safetensors: metadata '%s' must be a string, not %s", k, kind_of(v));
        keys[i++] = k;
    }
    qsort(keys, n, sizeof *keys, by_string);
    for (i = 0; s == CT_OK && i < n; i++)
        if (json_object_set(m, keys[i], json_object_get(metadata, keys[i])) != 0)
            s = ct_error(CT_ERR_NOMEM, "safetensors: out of memory");
    free(keys);
    if (s != CT_OK)
        json_decref(m);
    else
        *out = m;
    return s;
}

static ct_status check_entries(const ct_st_entry *e, int n, plan *p) {
    for (int i = 0; i < n; i++) {
        if (!e[i].name) return ct_error(CT_ERR_INVALID_ARG, "safetensors: entry %d has no name", i);
        if (strcmp(e[i].name, "__metadata__") == 0)
            return ct_error(CT_ERR_INVALID_ARG, "safetensors: '__metadata__' is reserved and cannot name a tensor");
        if ((unsigned)e[i].dtype >= CT_ST_NUM_DTYPES)
            return ct_error(CT_ERR_INVALID_ARG, "safetensors: tensor '%s': unknown dtype %d", e[i].name,
                            (int)e[i].dtype);
        if (e[i].ndim < 0 || (e[i].ndim > 0 && !e[i].shape))
            return ct_error(CT_ERR_INVALID_ARG, "safetensors: tensor '%s': bad number of dimensions %d", e[i].name,
                            e[i].ndim);
        int64_t numel = 1;
        bool overflow = false, empty = false;
        for (int d = 0; d < e[i].ndim; d++) {
            if (e[i].shape[d] < 0)
                return ct_error(CT_ERR_INVALID_ARG, "safetensors: tensor '%s': negative size %lld in dimension %d",
                                e[i].name, (long long)e[i].shape[d], d);
            empty |= e[i].shape[d] == 0;
            if (e[i].shape[d] && numel > INT64_MAX / e[i].shape[d])
                overflow = true;
            else
                numel *= e[i].shape[d];
        }
        if (empty) numel = 0;
        if ((overflow && !empty) || !nbytes_of(e[i].dtype, numel, &p->nbytes[i]))
            return ct_error(CT_ERR_INVALID_ARG,
                            "safetensors: tensor '%s': its size overflows or is not a whole number "
                            "of bytes",
                            e[i].name);
        if (p->nbytes[i] && !e[i].data)
            return ct_error(CT_ERR_INVALID_ARG, "safetensors: tensor '%s' has no data", e[i].name);
    }
    /* Duplicate names, found next to each other in name order. */
    qsort_r(p->order, (size_t)n, sizeof *p->order, by_entry_name, (void *)e);
    for (int i = 1; i < n; i++)
        if (strcmp(e[p->order[i - 1]].name, e[p->order[i]].name) == 0)
            return ct_error(CT_ERR_INVALID_ARG, "safetensors: two tensors are named '%s'", e[p->order[i]].name);
    return CT_OK;
}

static ct_status build_header(const ct_st_entry *e, int n, plan *p, json_t *root) {
    for (int i = 0; i < n; i++) {
        const ct_st_entry *x = &e[p->order[i]];
        json_t *shape = json_array(), *info = json_object();
        if (!shape || !info) {
            json_decref(shape);
            json_decref(info);
            return ct_error(CT_ERR_NOMEM, "safetensors: out of memory");
        }
        for (int d = 0; d < x->ndim; d++) json_array_append_new(shape, json_integer((json_int_t)x->shape[d]));
        json_object_set_new(info, "dtype", json_string(DTYPES[x->dtype].name));
        json_object_set_new(info, "shape", shape);
        json_object_set_new(
            info, "data_offsets",
            json_pack("[I, I]", (json_int_t)p->data_size, (json_int_t)(p->data_size + p->nbytes[p->order[i]])));
        p->data_size += p->nbytes[p->order[i]];
        if (json_object_set_new(root, x->name, info) != 0)
            return ct_error(CT_ERR_INVALID_ARG, "safetensors: tensor name '%s' is not valid UTF-8", x->name);
    }
    return CT_OK;
}

/* Orders the entries and renders the header. */
static ct_status make_plan(const ct_st_entry *e, int n, const json_t *metadata, plan *p) {
    CT_ASSERT(n >= 0 && (e || n == 0));
    memset(p, 0, sizeof *p);
    p->entries = e;
    p->order = malloc(sizeof *p->order * (size_t)(n ? n : 1));
    p->nbytes = malloc(sizeof *p->nbytes * (size_t)(n ? n : 1));
    if (!p->order || !p->nbytes) return ct_error(CT_ERR_NOMEM, "safetensors: out of memory");
    for (int i = 0; i < n; i++) p->order[i] = i;
    CT_TRY(check_entries(e, n, p));
    qsort_r(p->order, (size_t)n, sizeof *p->order, by_dtype_then_name, (void *)e);
    json_t *meta;
    CT_TRY(metadata_json(metadata, &meta));
    json_t *root = json_object();
    if (!root || (meta && json_object_set_new(root, "__metadata__", meta) != 0)) {
        json_decref(root);
        return ct_error(CT_ERR_NOMEM, "safetensors: out of memory");
    }
    ct_status s = build_header(e, n, p, root);
    char *text = s == CT_OK ? json_dumps(root, JSON_COMPACT) : NULL;
    json_decref(root);
    CT_TRY(s);
    if (!text) return ct_error(CT_ERR_NOMEM, "safetensors: out of memory");
    size_t len = strlen(text), padded = (len + 7) / 8 * 8;
    p->header = realloc(text, padded + 1);
    if (!p->header) {
        free(text);
        return ct_error(CT_ERR_NOMEM, "safetensors: out of memory");
    }
    memset(p->header + len, ' ', padded - len);
    p->header[padded] = '\0';
    p->header_len = padded;
    return CT_OK;
}

static void put_le64(unsigned char *b, uint64_t v) {
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(v >> (8 * i));
}

ct_status ct_st_serialize(const ct_st_entry *entries, int n, const json_t *metadata, void **out, size_t *size) {
    *out = NULL;
    *size = 0;
    plan p;
    ct_status s = make_plan(entries, n, metadata, &p);
    unsigned char *buf = NULL;
    if (s == CT_OK) {
        uint64_t total = 8 + p.header_len + p.data_size;
        if (total > SIZE_MAX || !(buf = malloc((size_t)total)))
            s = ct_error(CT_ERR_NOMEM, "safetensors: out of memory");
        else {
            put_le64(buf, p.header_len);
            memcpy(buf + 8, p.header, p.header_len);
            unsigned char *at = buf + 8 + p.header_len;
            for (int i = 0; i < n; i++) {
                uint64_t len = p.nbytes[p.order[i]];
                if (len) memcpy(at, entries[p.order[i]].data, (size_t)len);
                at += len;
            }
            *out = buf;
            *size = (size_t)total;
        }
    }
    plan_free(&p);
    return s;
}

ct_status ct_st_write(const char *path, const ct_st_entry *entries, int n, const json_t *metadata) {
    plan p;
    ct_status s = make_plan(entries, n, metadata, &p);
    if (s != CT_OK) {
        plan_free(&p);
        return ct_error_prefix(s, "%s: ", path);
    }
    /* the tensors straight from the caller's memory, atomically and durably (core/fs.h) */
    ct_atomic_file a;
    s = ct_atomic_file_open(&a, path);
    unsigned char head[8];
    put_le64(head, p.header_len);
    if (s == CT_OK) s = ct_atomic_file_write(&a, head, 8);
    if (s == CT_OK) s = ct_atomic_file_write(&a, p.header, p.header_len);
    for (int i = 0; s == CT_OK && i < n; i++) {
        uint64_t len = p.nbytes[p.order[i]];
        if (len) s = ct_atomic_file_write(&a, entries[p.order[i]].data, (size_t)len);
    }
    if (s == CT_OK) s = ct_atomic_file_commit(&a);
    if (s != CT_OK) {
        ct_atomic_file_discard(&a);
        s = ct_error_prefix(s, "safetensors: ");
    }
    plan_free(&p);
    return s;
}
