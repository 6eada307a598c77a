/* Conversion of IDX and CSV data to HDF5 (see convert.h).
 *
 * IDX files are read whole by ct_idx_read (they are what MNIST-like data ships as, and fit in
 * memory) and written with one call per dataset, into a file built in memory and written with
 * write() (core/format/h5_image.h): a full disk is then an error with errno's text, never libhdf5
 * left half-closed to crash at exit, and what reaches the disk passes the fault hook of tests
 * (core/io_fault.h). CSV files are read twice: once to count the rows,
 * so the datasets get their final shape and a chunk no larger than the data, then to parse and
 * write them block by block (chunk_rows rows at a time), so only the labels are held whole; the
 * file is built in memory too unless it would take more than a quarter of the memory available,
 * and only then streamed to disk through libhdf5. HDF5
 * calls hold ct_h5_lock, as everywhere in ctrainer.
 *
 * Why one file of over 600 lines: both conversions write the same two datasets with the same
 * attributes, element types and chunking rules, which stay in step when they sit side by side. */
#include "data/convert.h"

#include <errno.h>
#include <float.h>
#include <hdf5.h>
#include <unistd.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/format/h5_image.h"
#include "core/format/h5io.h"
#include "core/fs.h"
#include "core/tensor.h"
#include "data/hdf5_util.h"
#include "data/idx.h"

/* Largest integer a label may be and still be stored exactly as a double. */
#define MAX_EXACT_LABEL 9007199254740992.0 /* 2^53 */

/* --- the output file ---------------------------------------------------------------------------- */

/* HDF5 writes the file by name: the temporary of an atomic file (core/fs.h), committed when whole;
 * or, in_memory, an image written to path atomically by out_commit. */
typedef struct h5_out {
    const char *path;
    ct_atomic_file a;
    hid_t file;
    bool in_memory;
    ct_h5_image image; /* in_memory: file is image.file */
} h5_out;

static ct_status check_options(const char *who, int64_t *chunk_rows, int *level) {
    if (*chunk_rows < 0)
        return ct_error(CT_ERR_INVALID_ARG, "%s: chunk_rows %lld; expected a positive number of rows (0 = default %d)",
                        who, (long long)*chunk_rows, CT_CONVERT_DEFAULT_CHUNK_ROWS);
    if (*chunk_rows == 0) *chunk_rows = CT_CONVERT_DEFAULT_CHUNK_ROWS;
    if (*level < -1 || *level > 9)
        return ct_error(CT_ERR_INVALID_ARG,
                        "%s: compression level %d; expected 0 (none) to 9, or -1 for the default (%d)", who, *level,
                        CT_CONVERT_DEFAULT_COMPRESSION);
    if (*level == -1) *level = CT_CONVERT_DEFAULT_COMPRESSION;
    return CT_OK;
}

/* size_hint > 0: the file is built in memory (about that many bytes), written at commit. */
static ct_status out_open(h5_out *o, const char *path, size_t size_hint) {
    o->path = path;
    o->file = -1;
    o->in_memory = size_hint > 0;
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return ct_error(CT_ERR_IO, "%s: cannot write the output: it is a directory", path);
    if (o->in_memory) {
        ct_h5_lock();
        ct_status s = ct_h5_image_create(size_hint, &o->image);
        ct_h5_unlock();
        o->file = o->image.file;
        return s == CT_OK ? s : ct_error_prefix(s, "%s: ", path);
    }
    /* Creating it ourselves first gives the system's reason ("No such file or directory") when it fails. */
    ct_status s = ct_atomic_file_open(&o->a, path);
    if (s == CT_OK) s = ct_atomic_file_close_fd(&o->a);
    if (s != CT_OK) {
        ct_atomic_file_discard(&o->a);
        return ct_error_prefix(s, "%s: ", path);
    }
    ct_h5_lock();
    ct_h5_quiet();
    ct_h5_file_create(o->a.tmp, &o->file); /* the message below has HDF5's reason */
    char det[256];
    if (o->file < 0) ct_h5_error_detail(det, sizeof det);
    ct_h5_unlock();
    if (o->file < 0) {
        s = ct_error(CT_ERR_IO, "%s: cannot create an HDF5 file at %s: %s", path, o->a.tmp, det);
        ct_atomic_file_discard(&o->a);
        return s;
    }
    return CT_OK;
}

static void out_abort(h5_out *o) {
    if (o->file >= 0) {
        ct_h5_lock();
        if (o->in_memory)
            ct_h5_image_discard(&o->image);
        else
            H5Fclose(o->file);
        ct_h5_unlock();
        o->file = -1;
    }
    if (!o->in_memory) ct_atomic_file_discard(&o->a);
}

/* The image of a file built in memory, written to its path atomically (nothing left on failure). */
static ct_status out_commit_image(h5_out *o) {
    void *image;
    size_t size;
    ct_h5_lock();
    ct_status s = ct_h5_image_finish(&o->image, &image, &size); /* closes the file */
    ct_h5_unlock();
    o->file = -1;
    if (s != CT_OK) return ct_error_prefix(s, "%s: ", o->path);
    s = ct_write_file_atomic(o->path, image, size); /* "cannot write 'PATH': <errno text>" */
    free(image);
    return s;
}

/* Closes the file, makes it durable and moves it to its final name. */
static ct_status out_commit(h5_out *o) {
    if (o->in_memory) return out_commit_image(o);
    ct_h5_lock();
    herr_t rc = H5Fclose(o->file);
    char det[256];
    if (rc < 0) ct_h5_error_detail(det, sizeof det);
    ct_h5_unlock();
    o->file = -1;
    ct_status s = rc < 0 ? ct_error(CT_ERR_IO, "%s: cannot finish writing %s: %s", o->path, o->a.tmp, det)
                         : ct_atomic_file_commit(&o->a);
    if (s != CT_OK) {
        ct_atomic_file_discard(&o->a);
        return rc < 0 ? s : ct_error_prefix(s, "%s: ", o->path);
    }
    return CT_OK;
}

/* Creates a dataset of shape dims, chunked by rows and compressed. Caller holds the HDF5 lock. */
static ct_status create_dataset(h5_out *o, const char *name, hid_t file_type, int rank, const hsize_t *dims,
                                int64_t chunk_rows, int level, hid_t *out) {
    hsize_t chunk[CT_MAX_DIMS];
    double bytes = (double)H5Tget_size(file_type);
    for (int i = 0; i < rank; i++) {
        chunk[i] = i == 0 ? ((hsize_t)chunk_rows < dims[0] ? (hsize_t)chunk_rows : dims[0]) : dims[i];
        bytes *= (double)chunk[i];
    }
    if (bytes > 4294967295.0)
        return ct_error(CT_ERR_INVALID_ARG,
                        "%s: chunks of %llu rows of '%s' would hold %.0f bytes, over HDF5's 4 GiB chunk limit; "
                        "use fewer rows per chunk",
                        o->path, (unsigned long long)chunk[0], name, bytes);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE), space = H5Screate_simple(rank, dims, NULL);
    herr_t rc = dcpl < 0 || space < 0 ? -1 : H5Pset_chunk(dcpl, rank, chunk);
    /* Shuffling the bytes of multi-byte values first lets deflate find more repeats. */
    if (rc >= 0 && level > 0 && H5Tget_size(file_type) > 1) rc = H5Pset_shuffle(dcpl);
    if (rc >= 0 && level > 0) rc = H5Pset_deflate(dcpl, (unsigned)level);
    *out = rc < 0 ? -1 : H5Dcreate2(o->file, name, file_type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    if (space >= 0) H5Sclose(space);
    if (dcpl >= 0) H5Pclose(dcpl);
    if (*out < 0) {
        char det[256];
        return ct_error(CT_ERR_IO, "%s: cannot create dataset '%s': %s", o->path, name,
                        ct_h5_error_detail(det, sizeof det));
    }
    return CT_OK;
}

/* Writes rows [start, start + count) of a dataset of shape dims from buf. Caller holds the lock. */
static ct_status write_rows(h5_out *o, hid_t ds, const char *name, hid_t mem_type, int rank, const hsize_t *dims,
                            int64_t start, int64_t count, const void *buf) {
    hsize_t off[CT_MAX_DIMS] = {(hsize_t)start}, cnt[CT_MAX_DIMS];
    cnt[0] = (hsize_t)count;
    for (int i = 1; i < rank; i++) cnt[i] = dims[i];
    hid_t fspace = H5Dget_space(ds), mspace = H5Screate_simple(rank, cnt, NULL);
    herr_t rc = fspace < 0 || mspace < 0 ? -1 : H5Sselect_hyperslab(fspace, H5S_SELECT_SET, off, NULL, cnt, NULL);
    if (rc >= 0) rc = H5Dwrite(ds, mem_type, mspace, fspace, H5P_DEFAULT, buf);
    /* the reason (errno's text for a full disk) before the next call clears HDF5's error stack */
    char det[512] = "";
    if (rc < 0) ct_h5_error_detail(det, sizeof det);
    if (mspace >= 0) H5Sclose(mspace);
    if (fspace >= 0) H5Sclose(fspace);
    if (rc < 0)
        return ct_error(CT_ERR_IO, "%s: cannot write rows %lld..%lld of '%s': %s", o->path, (long long)start,
                        (long long)(start + count - 1), name, det[0] ? det : "(libhdf5 gave no reason)");
    return CT_OK;
}

/* Writes "labels" from n = dims[0] * (dims[1]) values: int64 with a num_classes attribute when all
 * are non-negative integers, float32 otherwise. `source` names where they came from, for errors. */
static ct_status write_labels(h5_out *o, const char *source, const double *v, int rank, const hsize_t *dims,
                              int64_t chunk_rows, int level) {
    size_t n = (size_t)dims[0] * (rank > 1 ? (size_t)dims[1] : 1);
    bool ints = true;
    double max = -1;
    for (size_t i = 0; i < n; i++) {
        if (!(v[i] >= 0 && v[i] <= MAX_EXACT_LABEL && v[i] == floor(v[i]))) ints = false;
        if (v[i] > max) max = v[i];
    }
    for (size_t i = 0; i < n && !ints; i++)
        if (fabs(v[i]) > FLT_MAX)
            return ct_error(CT_ERR_FORMAT, "%s: label %g of sample %zu is outside float32's range", source, v[i],
                            rank > 1 ? i / (size_t)dims[1] : i);
    void *buf = malloc(n * (ints ? sizeof(int64_t) : sizeof(float)));
    if (!buf) return ct_error(CT_ERR_NOMEM, "%s: out of memory for %zu labels", o->path, n);
    for (size_t i = 0; i < n; i++) {
        if (ints) ((int64_t *)buf)[i] = (int64_t)v[i];
        else ((float *)buf)[i] = (float)v[i];
    }
    ct_h5_lock();
    hid_t ds;
    ct_status s =
        create_dataset(o, "labels", ints ? H5T_STD_I64LE : H5T_IEEE_F32LE, rank, dims, chunk_rows, level, &ds);
    if (s == CT_OK) {
        s = write_rows(o, ds, "labels", ints ? H5T_NATIVE_INT64 : H5T_NATIVE_FLOAT, rank, dims, 0, (int64_t)dims[0],
                       buf);
        if (s == CT_OK && ints) {
            int64_t classes = (int64_t)max + 1;
            hid_t space = H5Screate(H5S_SCALAR);
            hid_t attr = H5Acreate2(ds, "num_classes", H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT);
            if (attr < 0 || H5Awrite(attr, H5T_NATIVE_INT64, &classes) < 0)
                s = ct_error(CT_ERR_IO, "%s: cannot write the attribute 'num_classes' of 'labels'", o->path);
            if (attr >= 0) H5Aclose(attr);
            H5Sclose(space);
        }
        H5Dclose(ds);
    }
    ct_h5_unlock();
    free(buf);
    return s;
}

/* --- IDX ------------------------------------------------------------------------------------------ */

static void idx_types(ct_dtype dt, hid_t *file_type, hid_t *mem_type) {
    switch (dt) {
    case CT_U8: *file_type = H5T_STD_U8LE; *mem_type = H5T_NATIVE_UINT8; return;
    case CT_I32: *file_type = H5T_STD_I32LE; *mem_type = H5T_NATIVE_INT32; return;
    case CT_F64: *file_type = H5T_IEEE_F64LE; *mem_type = H5T_NATIVE_DOUBLE; return;
    default: *file_type = H5T_IEEE_F32LE; *mem_type = H5T_NATIVE_FLOAT; return;
    }
}

static ct_status idx_write(const char *images_path, const char *labels_path, const ct_tensor *img,
                           const ct_tensor *lab, const char *out_path, int64_t chunk_rows, int level,
                           const char *attr, const char *attr_value) {
    char a[128], b[128];
    if (img->ndim < 2)
        return ct_error(CT_ERR_SHAPE, "%s: images have shape %s; expected rank >= 2 ([N, H, W] or [N, D])", images_path,
                        ct_tensor_str(img, a, sizeof a));
    if (lab->ndim != 1 && lab->ndim != 2)
        return ct_error(CT_ERR_SHAPE, "%s: labels have shape %s; expected rank 1 ([N]) or 2 ([N, K])", labels_path,
                        ct_tensor_str(lab, a, sizeof a));
    if (img->shape[0] != lab->shape[0])
        return ct_error(CT_ERR_SHAPE, "%s has %lld images (%s) but %s has %lld labels (%s); expected as many of each",
                        images_path, (long long)img->shape[0], ct_tensor_str(img, a, sizeof a), labels_path,
                        (long long)lab->shape[0], ct_tensor_str(lab, b, sizeof b));
    if (img->shape[0] == 0) return ct_error(CT_ERR_FORMAT, "%s: no samples; expected at least one", images_path);
    if (ct_tensor_row_numel(img) == 0 || ct_tensor_row_numel(lab) == 0)
        return ct_error(CT_ERR_SHAPE, "%s and %s: empty samples (%s, %s)", images_path, labels_path,
                        ct_tensor_str(img, a, sizeof a), ct_tensor_str(lab, b, sizeof b));

    int64_t nl = ct_tensor_numel(lab);
    double *lv = malloc((size_t)nl * sizeof *lv);
    if (!lv) return ct_error(CT_ERR_NOMEM, "%s: out of memory", labels_path);
    for (int64_t i = 0; i < nl; i++) {
        lv[i] = ct_tensor_get(lab, i);
        if (!isfinite(lv[i])) {
            double bad = lv[i];
            free(lv);
            return ct_error(CT_ERR_FORMAT, "%s: label %g at position %lld is not a finite number", labels_path, bad,
                            (long long)i);
        }
    }
    /* [N, H, W] images get their channel axis, so the file reads as NCHW like ct_idx_dataset. */
    int rank = img->ndim == 3 ? 4 : img->ndim;
    hsize_t fdims[CT_MAX_DIMS + 1], ldims[2] = {(hsize_t)lab->shape[0], lab->ndim > 1 ? (hsize_t)lab->shape[1] : 1};
    fdims[0] = (hsize_t)img->shape[0];
    if (img->ndim == 3) {
        fdims[1] = 1;
        fdims[2] = (hsize_t)img->shape[1];
        fdims[3] = (hsize_t)img->shape[2];
    } else
        for (int i = 1; i < rank; i++) fdims[i] = (hsize_t)img->shape[i];

    h5_out o;
    ct_status s = out_open(&o, out_path, ct_tensor_nbytes(img) + (size_t)lab->shape[0] * sizeof(int64_t) + 4096);
    if (s != CT_OK) {
        free(lv);
        return s;
    }
    if (attr) {
        ct_h5_lock();
        s = ct_h5_write_string_attr(o.file, attr, attr_value);
        ct_h5_unlock();
        if (s != CT_OK) {
            free(lv);
            out_abort(&o);
            return ct_error_prefix(s, "%s: ", out_path);
        }
    }
    hid_t ftype, mtype, ds;
    idx_types(img->dtype, &ftype, &mtype);
    ct_h5_lock();
    s = create_dataset(&o, "features", ftype, rank, fdims, chunk_rows, level, &ds);
    if (s == CT_OK) {
        s = write_rows(&o, ds, "features", mtype, rank, fdims, 0, img->shape[0], img->data);
        H5Dclose(ds);
    }
    ct_h5_unlock();
    if (s == CT_OK) s = write_labels(&o, labels_path, lv, lab->ndim, ldims, chunk_rows, level);
    free(lv);
    if (s == CT_OK) return out_commit(&o);
    out_abort(&o);
    return s;
}

ct_status ct_convert_idx_to_hdf5(const char *images_path, const char *labels_path, const char *out_path,
                                 int64_t chunk_rows, int compression_level) {
    return ct_convert_idx_to_hdf5_tagged(images_path, labels_path, out_path, chunk_rows, compression_level, NULL, NULL);
}

ct_status ct_convert_idx_to_hdf5_tagged(const char *images_path, const char *labels_path, const char *out_path,
                                        int64_t chunk_rows, int compression_level, const char *attr,
                                        const char *attr_value) {
    CT_TRY(check_options("convert", &chunk_rows, &compression_level));
    ct_tensor img = {0}, lab = {0};
    CT_TRY(ct_idx_read(images_path, &img));
    ct_status s = ct_idx_read(labels_path, &lab);
    if (s == CT_OK)
        s = idx_write(images_path, labels_path, &img, &lab, out_path, chunk_rows, compression_level, attr, attr_value);
    ct_tensor_free(&img);
    ct_tensor_free(&lab);
    return s;
}

/* --- CSV ------------------------------------------------------------------------------------------ */

typedef struct csv_fields {
    char **text; /* each field, NUL-terminated inside the line buffer, quotes removed */
    int *col;    /* 1-based column of the field's first character */
    int n, cap;
} csv_fields;

typedef struct csv_reader {
    const char *path;
    FILE *f;
    char *line;
    size_t line_cap;
    int64_t line_no;
    size_t line_len;
    csv_fields fields;
} csv_reader;

/* Reads the next non-blank line (without its line ending); false at the end of the file. */
static bool csv_next_line(csv_reader *r) {
    for (;;) {
        ssize_t len = getline(&r->line, &r->line_cap, r->f);
        if (len < 0) return false;
        r->line_no++;
        while (len > 0 && (r->line[len - 1] == '\n' || r->line[len - 1] == '\r')) r->line[--len] = '\0';
        if (r->line_no == 1 && len >= 3 && memcmp(r->line, "\xEF\xBB\xBF", 3) == 0) { /* UTF-8 byte order mark */
            memmove(r->line, r->line + 3, (size_t)len - 2);
            len -= 3;
        }
        r->line_len = (size_t)len;
        for (ssize_t i = 0; i < len; i++)
            if (r->line[i] != ' ' && r->line[i] != '\t') return true;
    }
}

static ct_status csv_push(csv_reader *r, char *text, int col) {
    csv_fields *f = &r->fields;
    if (f->n == f->cap) {
        int cap = f->cap ? 2 * f->cap : 16;
        char **t = realloc(f->text, (size_t)cap * sizeof *t);
        if (t) f->text = t;
        int *c = t ? realloc(f->col, (size_t)cap * sizeof *c) : NULL;
        if (!c) return ct_error(CT_ERR_NOMEM, "%s:%lld: out of memory", r->path, (long long)r->line_no);
        f->col = c;
        f->cap = cap;
    }
    f->text[f->n] = text;
    f->col[f->n++] = col;
    return CT_OK;
}

/* Splits the current line at commas in place; fields are trimmed and may be "quoted" ("" = a quote). */
static ct_status csv_split(csv_reader *r) {
    char *line = r->line, *p = line;
    r->fields.n = 0;
    for (;;) {
        while (*p == ' ' || *p == '\t') p++;
        int col = (int)(p - line) + 1;
        char *start, sep;
        if (*p == '"') {
            char *w = ++p;
            start = w;
            for (;;) {
                if (*p == '\0')
                    return ct_error(CT_ERR_FORMAT, "%s:%lld:%d: unterminated quoted field (expected a closing \")",
                                    r->path, (long long)r->line_no, col);
                if (*p == '"') {
                    if (p[1] != '"') break;
                    p++;
                }
                *w++ = *p++;
            }
            p++; /* past the closing quote; w < p, so ending the field at w keeps the separator */
            while (*p == ' ' || *p == '\t') p++;
            if (*p != ',' && *p != '\0')
                return ct_error(CT_ERR_FORMAT, "%s:%lld:%d: unexpected '%c' after a quoted field (expected ',')",
                                r->path, (long long)r->line_no, (int)(p - line) + 1, *p);
            *w = '\0';
            sep = *p;
        } else {
            start = p;
            while (*p != ',' && *p != '\0') p++;
            sep = *p;
            char *e = p;
            while (e > start && (e[-1] == ' ' || e[-1] == '\t')) e--;
            *e = '\0';
        }
        CT_TRY(csv_push(r, start, col));
        if (sep == '\0') return CT_OK;
        p++;
    }
}

/* A whole field as a finite number; false if it is anything else. */
static bool parse_number(const char *text, double *v) {
    if (!*text) return false;
    char *end;
    errno = 0;
    *v = strtod(text, &end);
    return *end == '\0' && isfinite(*v);
}

typedef struct csv_columns {
    int n;        /* fields per row */
    int label;    /* index of the label column */
    char **names; /* header names (NULL without a header) */
} csv_columns;

static void columns_free(csv_columns *c) {
    if (c->names)
        for (int i = 0; i < c->n; i++) free(c->names[i]);
    free(c->names);
    c->names = NULL;
}

/* "column 'price'" or "column 3" for messages. */
static const char *column_str(const csv_columns *c, int i, char *buf, size_t cap) {
    if (c->names) snprintf(buf, cap, "column '%s'", c->names[i]);
    else snprintf(buf, cap, "column %d", i);
    return buf;
}

static ct_status resolve_label(const char *path, const char *want, csv_columns *c) {
    if (!want) {
        c->label = c->n - 1;
        return CT_OK;
    }
    if (c->names)
        for (int i = 0; i < c->n; i++)
            if (strcmp(c->names[i], want) == 0) {
                c->label = i;
                return CT_OK;
            }
    char *end;
    long idx = strtol(want, &end, 10);
    if (*want && *end == '\0') {
        if (idx < 0) idx += c->n;
        if (idx >= 0 && idx < c->n) {
            c->label = (int)idx;
            return CT_OK;
        }
        return ct_error(CT_ERR_INVALID_ARG, "%s: label column %s is out of range; expected an index from 0 to %d "
                                            "(or -1 to -%d from the end)",
                        path, want, c->n - 1, c->n);
    }
    char list[512] = "";
    size_t len = 0;
    for (int i = 0; c->names && i < c->n && len + 1 < sizeof list; i++) {
        int w = snprintf(list + len, sizeof list - len, "%s'%s'", i ? ", " : "", c->names[i]);
        if (w > 0) len += (size_t)w;
    }
    if (c->names)
        return ct_error(CT_ERR_INVALID_ARG, "%s: no label column '%s'; expected one of the header's columns: %s", path,
                        want, list);
    return ct_error(CT_ERR_INVALID_ARG,
                    "%s: no label column '%s': the file has no header, so expected an index from 0 to %d", path, want,
                    c->n - 1);
}

/* Reads the first line: the number of columns, the header (given or detected) and the label column. */
static ct_status csv_head(csv_reader *r, const char *label_column, int has_header, csv_columns *c, bool *header) {
    if (!csv_next_line(r)) return ct_error(CT_ERR_FORMAT, "%s: empty file; expected CSV rows of numbers", r->path);
    CT_TRY(csv_split(r));
    c->n = r->fields.n;
    *header = has_header > 0;
    if (has_header < 0) {
        double v;
        for (int i = 0; i < c->n && !*header; i++) *header = !parse_number(r->fields.text[i], &v);
    }
    if (*header) {
        c->names = calloc((size_t)c->n, sizeof *c->names);
        if (!c->names) return ct_error(CT_ERR_NOMEM, "%s: out of memory", r->path);
        for (int i = 0; i < c->n; i++)
            if (!(c->names[i] = strdup(r->fields.text[i]))) return ct_error(CT_ERR_NOMEM, "%s: out of memory", r->path);
    }
    if (c->n < 2)
        return ct_error(CT_ERR_FORMAT, "%s:%lld: %d column; expected at least 2 (features and a label)", r->path,
                        (long long)r->line_no, c->n);
    return resolve_label(r->path, label_column, c);
}

/* Parses the current line's fields into a feature row and a label. */
static ct_status csv_parse_row(csv_reader *r, const csv_columns *c, float *row, double *label) {
    csv_fields *f = &r->fields;
    if (f->n != c->n) {
        int col = f->n > c->n ? f->col[c->n] : (int)r->line_len + 1;
        return ct_error(CT_ERR_FORMAT, "%s:%lld:%d: expected %d fields (as in the %s), found %d", r->path,
                        (long long)r->line_no, col, c->n, c->names ? "header" : "first line", f->n);
    }
    for (int i = 0, k = 0; i < c->n; i++) {
        double v;
        char cs[300];
        if (!parse_number(f->text[i], &v))
            return ct_error(CT_ERR_FORMAT, "%s:%lld:%d: expected a finite number in %s, found '%.40s'", r->path,
                            (long long)r->line_no, f->col[i], column_str(c, i, cs, sizeof cs), f->text[i]);
        if (i == c->label) {
            *label = v;
            continue;
        }
        if (fabs(v) > FLT_MAX)
            return ct_error(CT_ERR_FORMAT, "%s:%lld:%d: %s in %s is outside float32's range", r->path,
                            (long long)r->line_no, f->col[i], f->text[i], column_str(c, i, cs, sizeof cs));
        row[k++] = (float)v;
    }
    return CT_OK;
}

typedef struct csv_job {
    csv_reader r;
    csv_columns c;
    h5_out o;
    bool out_open;
    hid_t feat;
    float *block;
    double *labels;
} csv_job;

/* The size to build a CSV's HDF5 file in memory with, as IDX files are (a full disk is then an error
 * with errno's text from write(), never libhdf5 failing to close a half-written file and crashing at
 * exit), or 0 to stream it to disk: when its uncompressed size, float32 features and float64 labels,
 * would take more than a quarter of the memory available now (a CSV may be larger than memory). */
static size_t csv_image_hint(int64_t n, int64_t d) {
    double bytes = (double)n * ((double)d * 4.0 + 8.0) + (1 << 20);
    long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    double budget = pages > 0 && page > 0 ? (double)pages * (double)page / 4.0 : 0.0;
    return bytes <= budget ? (size_t)bytes : 0;
}

static ct_status csv_convert(csv_job *j, const char *label_column, int has_header, const char *out_path,
                             int64_t chunk_rows, int level) {
    csv_reader *r = &j->r;
    bool header = false;
    CT_TRY(csv_head(r, label_column, has_header, &j->c, &header));
    /* First pass: count the rows, so the datasets get their final shape. */
    int64_t n = header ? 0 : 1;
    while (csv_next_line(r)) n++;
    if (ferror(r->f)) return ct_error(CT_ERR_IO, "%s: read error: %s", r->path, strerror(errno));
    if (n == 0) return ct_error(CT_ERR_FORMAT, "%s: a header but no rows; expected at least one sample", r->path);
    rewind(r->f);
    r->line_no = 0;
    csv_next_line(r); /* the first line again: a header or the first row */
    if (header) csv_next_line(r);

    int d = j->c.n - 1;
    int64_t block_rows = chunk_rows < n ? chunk_rows : n;
    j->block = malloc((size_t)block_rows * (size_t)d * sizeof *j->block);
    j->labels = malloc((size_t)n * sizeof *j->labels);
    if (!j->block || !j->labels)
        return ct_error(CT_ERR_NOMEM, "%s: out of memory for %lld rows", r->path, (long long)n);
    CT_TRY(out_open(&j->o, out_path, csv_image_hint(n, d)));
    j->out_open = true;
    hsize_t fdims[2] = {(hsize_t)n, (hsize_t)d};
    ct_h5_lock();
    ct_status s = create_dataset(&j->o, "features", H5T_IEEE_F32LE, 2, fdims, chunk_rows, level, &j->feat);
    ct_h5_unlock();
    CT_TRY(s);

    /* Second pass: parse and write block by block. */
    int64_t row = 0, in_block = 0;
    for (bool more = true; row < n; more = csv_next_line(r)) {
        if (!more)
            return ct_error(CT_ERR_IO, "%s: the file changed while it was read (%lld rows counted, %lld found)",
                            r->path, (long long)n, (long long)row);
        CT_TRY(csv_split(r));
        CT_TRY(csv_parse_row(r, &j->c, j->block + in_block * d, &j->labels[row]));
        row++;
        if (++in_block == block_rows || row == n) {
            ct_h5_lock();
            s = write_rows(&j->o, j->feat, "features", H5T_NATIVE_FLOAT, 2, fdims, row - in_block, in_block, j->block);
            ct_h5_unlock();
            CT_TRY(s);
            in_block = 0;
        }
    }
    ct_h5_lock();
    H5Dclose(j->feat);
    ct_h5_unlock();
    j->feat = -1;
    hsize_t ldims[1] = {(hsize_t)n};
    char cs[300], source[600];
    snprintf(source, sizeof source, "%s (%s)", r->path, column_str(&j->c, j->c.label, cs, sizeof cs));
    CT_TRY(write_labels(&j->o, source, j->labels, 1, ldims, chunk_rows, level));
    j->out_open = false;
    return out_commit(&j->o);
}

ct_status ct_convert_csv_to_hdf5(const char *csv_path, const char *label_column, int has_header, const char *out_path,
                                 int64_t chunk_rows, int compression_level) {
    CT_TRY(check_options("convert", &chunk_rows, &compression_level));
    csv_job j = {.r = {.path = csv_path}, .feat = -1};
    CT_TRY(ct_fopen_read(csv_path, &j.r.f));
    ct_status s = csv_convert(&j, label_column, has_header, out_path, chunk_rows, compression_level);
    if (j.feat >= 0) {
        ct_h5_lock();
        H5Dclose(j.feat);
        ct_h5_unlock();
    }
    if (j.out_open) out_abort(&j.o);
    fclose(j.r.f);
    free(j.r.line);
    free(j.r.fields.text);
    free(j.r.fields.col);
    free(j.block);
    free(j.labels);
    columns_free(&j.c);
    return s;
}
