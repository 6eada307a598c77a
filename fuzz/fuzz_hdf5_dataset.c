/* Fuzz target: the HDF5 dataset reader (data/hdf5_dataset.c) and the IDX dataset cache that opens
 * files through it (data/dataset_cache.c).
 *
 * Input: a u8 of options, the reader's configuration (dataset names, scale, num_classes, the
 * block cache's size), then an HDF5 file described as fuzz/h5gen.h encodes it. The file is opened
 * as a dataset (ct_hdf5_dataset_create) and, when that works, batches are fetched: the first and
 * last samples, then indices from the input (repeated, unsorted), through ct_dataset_get_batch with
 * the spec's tensors. With option bit 0 the file is instead the "cache" of a fixed pair of IDX
 * files (ct_idx_cache_open): bit 1 gives it the record of those sources, as ctrainer writes it, so
 * the cache is taken as fresh and its attributes are read; otherwise it is not ctrainer's (left
 * alone) or stale (rebuilt from the sources). */
#define _GNU_SOURCE
#include <hdf5.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common.h"
#include "core/format/h5io.h"
#include "data/convert.h"
#include "data/dataset.h"
#include "data/dataset_cache.h"
#include "h5gen.h"

/* Samples and elements fetched at most: a file may describe huge extents it never stores. */
#define MAX_ROW_ELEMENTS ((int64_t)1 << 16)

static const char *const names_table[] = {"features", "labels", "x", "y", "images", "num_classes",
                                          "g/features", "g/labels", CT_DATASET_CACHE_ATTR};
static const fz_h5_names names = {names_table, (int)(sizeof names_table / sizeof names_table[0])};

static char images[512], labels[512], record[4096];

/* The record ct_idx_cache_open keeps in a cache it built (data/dataset_cache.c: the version line,
 * then role, real path, size and mtime of each source). */
static void record_line(char *buf, size_t cap, const char *role, const char *path) {
    struct stat st;
    char real[PATH_MAX];
    if (stat(path, &st) != 0 || !realpath(path, real)) abort();
    snprintf(buf, cap, "%s %s %lld %lld.%09ld\n", role, real, (long long)st.st_size, (long long)st.st_mtim.tv_sec,
             (long)st.st_mtim.tv_nsec);
}

/* Seeds: the options (plain reader or cache, with or without the record) and the encoding of files
 * the project writes: the IDX pair converted to HDF5, and a CSV file (float features and labels). */
static void seed(const char *name, uint8_t opts, const char *file) {
    fz_output o = {0};
    fzo_u8(&o, opts);
    for (int i = 0; i < 5; i++) fzo_u8(&o, 0); /* default names, scale, num_classes, cache size */
    if (!fz_h5e_from_file(&o, file, &names)) fprintf(stderr, "fuzz: %s: not all of %s encoded\n", name, file);
    fz_seed(name, o.p, o.n);
    fzo_free(&o);
}

static void write_seeds(void) {
    char h5[512], csv[512];
    fz_path(h5, sizeof h5, "seed.h5");
    fz_check(ct_convert_idx_to_hdf5(images, labels, h5, 0, 0), "converting the seed IDX files");
    seed("idx_converted", 0, h5);
    seed("cache_fresh", 3, h5);
    seed("cache_foreign", 1, h5);
    static const char text[] = "a,b,target\n0.5,1.5,2.25\n-1,2,0.125\n3,4,-7\n";
    fz_write_file(fz_path(csv, sizeof csv, "seed.csv"), text, sizeof text - 1);
    fz_check(ct_convert_csv_to_hdf5(csv, NULL, -1, h5, 0, 0), "converting the seed CSV file");
    seed("csv_converted", 0, h5);
}

static void setup(void) {
    fz_init();
    /* Four 2x2 u8 images with labels 0..2: the sources of the cache mode. */
    static const uint8_t img[] = {0, 0, 8, 3, 0, 0, 0, 4, 0, 0, 0, 2, 0, 0, 0, 2,
                                  1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    static const uint8_t lab[] = {0, 0, 8, 1, 0, 0, 0, 4, 0, 1, 2, 1};
    fz_write_file(fz_path(images, sizeof images, "images.idx"), img, sizeof img);
    fz_write_file(fz_path(labels, sizeof labels, "labels.idx"), lab, sizeof lab);
    char a[PATH_MAX + 64], b[PATH_MAX + 64];
    record_line(a, sizeof a, "images", images);
    record_line(b, sizeof b, "labels", labels);
    snprintf(record, sizeof record, "ctrainer dataset cache 1 (idx)\n%s%s", a, b);
    if (fz_writing_seeds()) write_seeds();
}

static void add_record(const char *path) {
    ct_h5_lock();
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    if (f >= 0) {
        if (H5Aexists(f, CT_DATASET_CACHE_ATTR) == 0) ct_h5_write_string_attr(f, CT_DATASET_CACHE_ATTR, record);
        H5Fclose(f);
    }
    ct_h5_unlock();
}

/* Fetches rows of ds (first, last, then indices from the input) when its samples are small enough. */
static void fetch(ct_dataset *ds, fz_input *in) {
    int64_t n = ct_dataset_length(ds);
    const ct_sample_spec *sp = &ds->spec;
    if (n <= 0 || ct_shape_numel(&sp->feature_shape) > MAX_ROW_ELEMENTS ||
        ct_shape_numel(&sp->label_shape) > MAX_ROW_ELEMENTS)
        return;
    int64_t idx[8] = {0, n - 1};
    int rows = 2 + fz_pick(in, 7);
    for (int i = 2; i < rows; i++) idx[i] = fz_range(in, 0, n - 1);
    ct_tensor f, l;
    if (ct_dataset_alloc_batch(ds, rows, &f, &l) != CT_OK) return;
    ct_fetch_ctx ctx = {.seed = 1, .epoch = 0};
    fz_report("first sample", ct_dataset_get_batch(ds, idx, 1, &ctx, &f, &l));
    fz_report("last sample", ct_dataset_get_batch(ds, idx + 1, 1, &ctx, &f, &l));
    fz_report("batch", ct_dataset_get_batch(ds, idx, rows, &ctx, &f, &l));
    ct_tensor_free(&f);
    ct_tensor_free(&l);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static bool ready;
    if (!ready) {
        setup();
        fz_h5_mark_handles();
        ready = true;
    }
    fz_input in = {data, size};
    uint8_t opts = fz_u8(&in);
    static const char *const dataset_names[] = {NULL, "features", "labels", "x", "g/features", "missing", ""};
    const char *feat = dataset_names[fz_pick(&in, 7)], *lab = dataset_names[fz_pick(&in, 7)];
    static const double scales[] = {0, 1, 1.0 / 255, -1, NAN, INFINITY, 1e-45, 3e38};
    int sc = fz_pick(&in, 9);
    double scale = sc < 8 ? scales[sc] : fz_f64(&in);
    static const int64_t classes[] = {0, 1, 3, 10, -1, INT64_MAX};
    int nc = fz_pick(&in, 7);
    int64_t num_classes = nc < 6 ? classes[nc] : (int64_t)fz_u16(&in);
    static const char *const cache_mb[] = {NULL, "0.001", "1", "junk"};
    const char *mb = cache_mb[fz_pick(&in, 4)];
    if (mb) setenv("CTRAINER_HDF5_CACHE_MB", mb, 1);
    else unsetenv("CTRAINER_HDF5_CACHE_MB");

    char path[512];
    fz_path(path, sizeof path, "data.h5");
    if (!fz_h5_build(&in, path, &names)) return 0;
    ct_dataset *ds = NULL;
    if (opts & 1) {
        if (opts & 2) add_record(path);
        /* the sources keep their size and mtime, so the record stays true */
        fz_report("ct_idx_cache_open",
                  ct_idx_cache_open(images, labels, scale, num_classes, path, "fuzz.cache", NULL, &ds));
    } else {
        ct_hdf5_dataset_config cfg = {.path = path, .features = feat, .labels = lab, .scale = scale,
                                      .num_classes = num_classes};
        fz_report("ct_hdf5_dataset_create", ct_hdf5_dataset_create(&cfg, &ds));
    }
    if (ds) {
        fetch(ds, &in);
        ct_dataset_free(ds);
    }
    fz_h5_check_handles();
    ct_error_clear();
    return 0;
}
