/* The HDF5 dataset and the converters to HDF5:
 *  - Fashion-MNIST IDX -> HDF5 through `ctrainer data convert` (random chunking and compression),
 *    then random batches (1000 random samples plus the first and last, random batch sizes, repeats)
 *    equal the IDX files read by ct_idx_read, bit for bit; the same from several threads at once,
 *    and with a cache much smaller than the data (CTRAINER_HDF5_CACHE_MB);
 *  - random CSV files (header or not, random label column by name or index, quoting, CRLF) ->
 *    HDF5 -> batches equal the CSV values rounded to float32;
 *  - files written here with every supported element type, rank, layout and num_classes source;
 *  - bad input: missing file, not HDF5, truncated and corrupt files, missing datasets, wrong ranks
 *    and types, mismatched lengths, labels out of range, ragged and non-numeric CSV, each with a
 *    message naming the file and what was expected; failed conversions leave no file behind.
 *
 * Why one file of over 600 lines: the reader and the converters are checked against each other
 * (what a conversion writes, the dataset reads back) with the same file writers and helpers. */
#include <dirent.h>
#include <float.h>
#include <hdf5.h>
#include <libgen.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/format/h5io.h"
#include "core/rng.h"
#include "data/convert.h"
#include "data/dataset.h"
#include "data/idx.h"
#include "testlib.h"

static char tmpdir[64];
static ct_rng rng;

static const char *tmp_path(char *buf, size_t cap, const char *name) {
    snprintf(buf, cap, "%s/%s", tmpdir, name);
    return buf;
}

static void remove_tmpdir(void) {
    DIR *d = opendir(tmpdir);
    if (!d) return;
    struct dirent *e;
    char p[512];
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) unlink(tmp_path(p, sizeof p, e->d_name));
    closedir(d);
    rmdir(tmpdir);
}

/* Files in the temporary directory whose name contains `part` (leftover temporaries). */
static int count_files(const char *part) {
    DIR *d = opendir(tmpdir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d))) n += strstr(e->d_name, part) != NULL;
    if (d) closedir(d);
    return n;
}

static int64_t below(int64_t n) { return (int64_t)ct_rng_below(&rng, (uint64_t)n); }

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The ctrainer program of this build: $CTRAINER, else ../ctrainer next to this test's directory. */
static bool find_ctrainer(char *out, size_t cap) {
    const char *env = getenv("CTRAINER");
    if (env) {
        snprintf(out, cap, "%s", env);
        return access(out, X_OK) == 0;
    }
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) return false;
    self[n] = '\0';
    snprintf(out, cap, "%s/../ctrainer", dirname(self));
    return access(out, X_OK) == 0;
}

static int run_program(char *const argv[]) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        execv(argv[0], argv);
        _exit(127);
    }
    int st;
    if (pid < 0 || waitpid(pid, &st, 0) < 0) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static ct_dataset *open_h5(const char *path, double scale, int64_t num_classes) {
    ct_hdf5_dataset_config cfg = {.path = path, .scale = scale, .num_classes = num_classes};
    ct_dataset *ds = NULL;
    ct_status s = ct_hdf5_dataset_create(&cfg, &ds);
    CHECK(s == CT_OK, "open %s: %s", path, ct_last_error());
    return ds;
}

/* --- Fashion-MNIST through the CLI ----------------------------------------------------------------- */

typedef struct idx_ref {
    ct_tensor img, lab; /* u8 [N, 28, 28], u8 [N] */
} idx_ref;

/* Fetches indices idx[0..n) and compares every sample with the IDX data; returns mismatches. */
static int64_t compare_batch(ct_dataset *ds, const idx_ref *ref, const int64_t *idx, int64_t n, bool raw,
                             ct_tensor *x, ct_tensor *y) {
    ct_fetch_ctx ctx = {1, 0};
    ct_status s = ct_dataset_get_batch(ds, idx, n, &ctx, x, y);
    if (s != CT_OK) {
        CHECK(false, "get_batch of %lld samples: %s", (long long)n, ct_last_error());
        return n;
    }
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        const uint8_t *px = (const uint8_t *)ref->img.data + idx[i] * 784;
        const float *got = (const float *)x->data + i * 784;
        bool same = ((const int64_t *)y->data)[i] == ((const uint8_t *)ref->lab.data)[idx[i]];
        for (int k = 0; k < 784 && same; k++) same = got[k] == (raw ? (float)px[k] : px[k] / 255.0f);
        bad += !same;
    }
    return bad;
}

/* 1000 random samples plus the first and the last, in batches of random sizes with repeats. */
static void check_random_samples(ct_dataset *ds, const idx_ref *ref, bool raw) {
    int64_t n = ref->lab.shape[0], want[1002];
    for (int i = 0; i < 1000; i++) want[i] = below(n);
    want[1000] = 0;
    want[1001] = n - 1;
    ct_tensor x, y;
    CHECK_OK(ct_dataset_alloc_batch(ds, 300, &x, &y));
    int64_t bad = 0, batch[300];
    for (int64_t at = 0; at < 1002;) {
        int64_t b = 1 + below(256);
        if (b > 1002 - at) b = 1002 - at;
        for (int64_t i = 0; i < b; i++) batch[i] = want[at + i];
        int64_t m = b;
        for (int r = (int)below(4); r > 0; r--) batch[m++] = batch[below(b)]; /* repeats within a batch */
        if (below(4) == 0) { /* a sorted run of neighbours, read as one block */
            int64_t start = below(n - 40);
            for (int k = 0; k < 30; k++) batch[m++] = start + k;
        }
        bad += compare_batch(ds, ref, batch, m, raw, &x, &y);
        at += b;
    }
    CHECK(bad == 0, "%lld fetched samples differ from the IDX data", (long long)bad);
    ct_tensor_free(&x);
    ct_tensor_free(&y);
}

typedef struct thread_job {
    ct_dataset *ds;
    const idx_ref *ref;
    uint64_t seed;
    int64_t bad;
    int failures;
} thread_job;

static void *thread_main(void *arg) {
    thread_job *j = arg;
    ct_rng r;
    ct_rng_init(&r, j->seed, 0, CT_RNG_USER);
    ct_tensor x, y;
    if (ct_dataset_alloc_batch(j->ds, 64, &x, &y) != CT_OK) {
        j->failures++;
        return NULL;
    }
    int64_t n = j->ref->lab.shape[0], idx[64];
    for (int it = 0; it < 60; it++) {
        int64_t b = 1 + (int64_t)ct_rng_below(&r, 64);
        for (int64_t i = 0; i < b; i++) idx[i] = (int64_t)ct_rng_below(&r, (uint64_t)n);
        ct_fetch_ctx ctx = {2, (uint64_t)it};
        if (ct_dataset_get_batch(j->ds, idx, b, &ctx, &x, &y) != CT_OK) {
            j->failures++;
            continue;
        }
        for (int64_t i = 0; i < b; i++) {
            const uint8_t *px = (const uint8_t *)j->ref->img.data + idx[i] * 784;
            bool same = ((const int64_t *)y.data)[i] == ((const uint8_t *)j->ref->lab.data)[idx[i]];
            for (int k = 0; k < 784 && same; k++) same = ((const float *)x.data)[i * 784 + k] == px[k] / 255.0f;
            j->bad += !same;
        }
    }
    ct_tensor_free(&x);
    ct_tensor_free(&y);
    return NULL;
}

static void check_threads(ct_dataset *ds, const idx_ref *ref) {
    CHECK(ds->thread_safe, "the HDF5 dataset is marked thread-safe");
    pthread_t t[4];
    thread_job jobs[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (thread_job){ds, ref, ct_test_seed + 17 * (uint64_t)i, 0, 0};
        pthread_create(&t[i], NULL, thread_main, &jobs[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        CHECK(jobs[i].failures == 0 && jobs[i].bad == 0, "thread %d: %d failed fetches, %lld wrong samples", i,
              jobs[i].failures, (long long)jobs[i].bad);
    }
}

/* Median time of a batch of 128 random rows once the chunk cache is warm (printed; bounded loosely). */
static void time_batches(ct_dataset *ds) {
    ct_tensor x, y;
    CHECK_OK(ct_dataset_alloc_batch(ds, 128, &x, &y));
    int64_t n = ct_dataset_length(ds), idx[128];
    double t[200];
    for (int it = -100; it < 200; it++) { /* the first 100 warm the cache */
        for (int i = 0; i < 128; i++) idx[i] = below(n);
        double t0 = now();
        CHECK_OK(ct_dataset_get_batch(ds, idx, 128, NULL, &x, &y));
        if (it >= 0) t[it] = now() - t0;
    }
    for (int i = 1; i < 200; i++)
        for (int k = i; k > 0 && t[k] < t[k - 1]; k--) {
            double s = t[k];
            t[k] = t[k - 1];
            t[k - 1] = s;
        }
    printf("batch of 128 random rows: median %.3f ms, 90th percentile %.3f ms\n", t[100] * 1e3, t[180] * 1e3);
    /* A loose bound (the target is ~1 ms): catches a cache that does not work, which costs ~50x. */
    CHECK(t[100] < 0.025, "median batch time %.3f ms", t[100] * 1e3);
    ct_tensor_free(&x);
    ct_tensor_free(&y);
}

static void fashion_mnist(const char *ctrainer) {
    const char *dir = "/usr/share/datasets/fashion-mnist";
    const char *files[2][2] = {{"t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"},
                               {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"}};
    char images[256], labels[256], out[256];
    snprintf(images, sizeof images, "%s/%s", dir, files[0][0]);
    if (access(images, R_OK) != 0) {
        printf("Fashion-MNIST not installed; skipping the real-data round trip\n");
        return;
    }
    for (int split = 0; split < 2; split++) {
        snprintf(images, sizeof images, "%s/%s", dir, files[split][0]);
        snprintf(labels, sizeof labels, "%s/%s", dir, files[split][1]);
        tmp_path(out, sizeof out, split ? "train.h5" : "t10k.h5");
        char chunk[32], level[32];
        /* The test split gets small chunks, so the small cache below holds a few of them. */
        snprintf(chunk, sizeof chunk, "%lld", (long long)(16 + below(split ? 4000 : 600)));
        /* Level 9 takes zlib ~20 s on the training images (long runs of zeros); the test split tries it. */
        snprintf(level, sizeof level, "%lld", (long long)below(split ? 7 : 10));
        printf("converting %s with --chunk %s --compression %s\n", files[split][0], chunk, level);
        char *argv[] = {(char *)ctrainer, "data", "convert", "--images", images, "--labels", labels, "-o", out,
                        "--chunk", chunk, "--compression", level, NULL};
        int rc = run_program(argv);
        CHECK(rc == 0, "ctrainer data convert exited with %d", rc);
        if (rc != 0) continue;
        CHECK(count_files(".tmp-") == 0, "a temporary file was left behind");
        idx_ref ref;
        CHECK_OK(ct_idx_read(images, &ref.img));
        CHECK_OK(ct_idx_read(labels, &ref.lab));
        ct_dataset *ds = open_h5(out, 0, 0);
        if (ds) {
            const ct_sample_spec *sp = &ds->spec;
            CHECK(ct_dataset_length(ds) == ref.lab.shape[0], "length %lld", (long long)ct_dataset_length(ds));
            CHECK(sp->feature_shape.ndim == 3 && sp->feature_shape.dims[0] == 1 && sp->feature_shape.dims[1] == 28 &&
                      sp->feature_shape.dims[2] == 28 && sp->feature_dtype == CT_F32,
                  "features are f32 [1, 28, 28]");
            CHECK(sp->label_shape.ndim == 0 && sp->label_dtype == CT_I64 && sp->num_classes == 10,
                  "labels are i64 class ids of 10 classes (got %lld)", (long long)sp->num_classes);
            check_random_samples(ds, &ref, false);
            if (split == 1) time_batches(ds);
            else check_threads(ds, &ref);
            ct_dataset_free(ds);
        }
        if (split == 0) {
            /* A cache far smaller than the data: blocks are parts of chunks and are evicted all the time. */
            setenv("CTRAINER_HDF5_CACHE_MB", "0.5", 1);
            ds = open_h5(out, 0, 0);
            if (ds) {
                check_random_samples(ds, &ref, false);
                check_threads(ds, &ref);
                ct_dataset_free(ds);
            }
            unsetenv("CTRAINER_HDF5_CACHE_MB");
        }
        ds = open_h5(out, 1.0, 0); /* scale 1: the raw pixel values */
        if (ds) {
            check_random_samples(ds, &ref, true);
            ct_dataset_free(ds);
        }
        ct_tensor_free(&ref.img);
        ct_tensor_free(&ref.lab);
        unlink(out);
    }
}

/* --- CSV round trips ------------------------------------------------------------------------------- */

/* Prints v into buf in a random style: %.9g, %e or an integer, maybe quoted or padded; returns the
 * value the text stands for (what the converter must read). */
static double format_value(char *buf, size_t cap, double v, bool integer) {
    const char *pad = below(5) == 0 ? " " : "", *quote = below(6) == 0 ? "\"" : "";
    char num[48];
    if (integer) snprintf(num, sizeof num, "%lld", (long long)v);
    else if (below(3) == 0) snprintf(num, sizeof num, "%.6e", v);
    else snprintf(num, sizeof num, "%.9g", v);
    snprintf(buf, cap, "%s%s%s%s%s", pad, quote, num, quote, pad);
    return strtod(num, NULL);
}

static void csv_round_trip(bool header) {
    int cols = 2 + (int)below(11), label = (int)below(cols);
    int64_t rows = 1 + below(3000);
    bool int_labels = below(2) == 0;
    int64_t classes = 2 + below(20);
    char path[256], out[256];
    tmp_path(path, sizeof path, "data.csv");
    tmp_path(out, sizeof out, "data.h5");
    double *vals = malloc((size_t)(rows * cols) * sizeof *vals);
    for (int64_t r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) {
            double v;
            if (c == label && int_labels) v = (double)below(classes);
            else if (below(10) == 0) v = (double)(below(2001) - 1000);
            else v = (ct_rng_uniform(&rng) * 2 - 1) * pow(10.0, (double)(below(9) - 4));
            vals[r * cols + c] = v;
        }
    if (int_labels) vals[below(rows) * cols + label] = (double)(classes - 1); /* the largest class occurs */
    /* The file, and the reference: every value as the text in the file says. */
    FILE *f = fopen(path, "w");
    const char *eol = below(2) ? "\r\n" : "\n";
    char names[12][16], cell[96];
    for (int c = 0; c < cols; c++) snprintf(names[c], sizeof names[c], c == label ? "target%d" : "x%d", c);
    if (header)
        for (int c = 0; c < cols; c++)
            fprintf(f, c == label && below(2) ? "\"%s\"%s" : "%s%s", names[c], c + 1 < cols ? "," : eol);
    for (int64_t r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) {
            double *v = &vals[r * cols + c];
            *v = format_value(cell, sizeof cell, *v, c == label && int_labels);
            fprintf(f, "%s%s", cell, c + 1 < cols ? "," : eol);
        }
    if (below(2)) fputs(eol, f); /* a blank line at the end */
    fclose(f);

    char label_arg[32];
    const char *label_column;
    int how = (int)below(3);
    if (header && how == 0) label_column = names[label];
    else if (how == 1) {
        snprintf(label_arg, sizeof label_arg, "%d", label);
        label_column = label_arg;
    } else if (label == cols - 1 && below(2)) label_column = NULL;
    else {
        snprintf(label_arg, sizeof label_arg, "%d", label - cols);
        label_column = label_arg;
    }
    int64_t chunk = 1 + below(500);
    int level = (int)below(10);
    printf("csv: %lld rows x %d columns, header %d, label column %d given as %s, %s labels, chunk %lld, level %d\n",
           (long long)rows, cols, header, label, label_column ? label_column : "(default)",
           int_labels ? "class" : "float", (long long)chunk, level);
    ct_status s = ct_convert_csv_to_hdf5(path, label_column, -1, out, chunk, level);
    CHECK(s == CT_OK, "convert: %s", ct_last_error());
    CHECK(count_files(".tmp-") == 0, "a temporary file was left behind");
    ct_dataset *ds = s == CT_OK ? open_h5(out, 0, 0) : NULL;
    if (ds) {
        const ct_sample_spec *sp = &ds->spec;
        CHECK(ct_dataset_length(ds) == rows, "length %lld, expected %lld", (long long)ct_dataset_length(ds),
              (long long)rows);
        CHECK(sp->feature_shape.ndim == 1 && sp->feature_shape.dims[0] == cols - 1, "features [%d]", cols - 1);
        CHECK(sp->label_shape.ndim == 0 && sp->label_dtype == (int_labels ? CT_I64 : CT_F32), "label dtype");
        CHECK(sp->num_classes == (int_labels ? classes : 0), "num_classes %lld, expected %lld",
              (long long)sp->num_classes, (long long)(int_labels ? classes : 0));
        ct_tensor x, y;
        CHECK_OK(ct_dataset_alloc_batch(ds, rows, &x, &y));
        int64_t *idx = malloc((size_t)rows * sizeof *idx);
        for (int64_t i = 0; i < rows; i++) idx[i] = i;
        for (int64_t i = rows - 1; i > 0; i--) { /* a random order */
            int64_t k = below(i + 1), t = idx[i];
            idx[i] = idx[k];
            idx[k] = t;
        }
        CHECK_OK(ct_dataset_get_batch(ds, idx, rows, NULL, &x, &y));
        int64_t bad = 0;
        for (int64_t i = 0; i < rows; i++) {
            const double *src = vals + idx[i] * cols;
            for (int c = 0, k = 0; c < cols; c++) {
                if (c == label) {
                    bad += int_labels ? ((int64_t *)y.data)[i] != (int64_t)src[c]
                                      : ((float *)y.data)[i] != (float)src[c];
                } else
                    bad += ((float *)x.data)[i * (cols - 1) + k++] != (float)src[c];
            }
        }
        CHECK(bad == 0, "%lld values differ from the CSV", (long long)bad);
        free(idx);
        ct_tensor_free(&x);
        ct_tensor_free(&y);
        ct_dataset_free(ds);
    }
    free(vals);
    unlink(path);
    unlink(out);
}

/* --- files of every element type, written here -------------------------------------------------- */

typedef struct h5_item {
    const char *name;
    hid_t type;      /* file type */
    int rank;
    hsize_t dims[4];
    bool chunked;
    const void *data;
    hid_t mem_type;  /* of data */
} h5_item;

static void write_h5(const char *path, const h5_item *items, int n) {
    hid_t file = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    for (int i = 0; i < n; i++) {
        const h5_item *it = &items[i];
        hid_t space = H5Screate_simple(it->rank, it->dims, NULL), dcpl = H5Pcreate(H5P_DATASET_CREATE);
        if (it->chunked) {
            hsize_t chunk[4];
            for (int d = 0; d < it->rank; d++) chunk[d] = it->dims[d];
            chunk[0] = 1 + (hsize_t)below((int64_t)it->dims[0]);
            H5Pset_chunk(dcpl, it->rank, chunk);
            H5Pset_deflate(dcpl, 1);
        }
        hid_t ds = H5Dcreate2(file, it->name, it->type, space, lcpl, dcpl, H5P_DEFAULT);
        if (it->data) H5Dwrite(ds, it->mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, it->data);
        H5Dclose(ds);
        H5Pclose(dcpl);
        H5Sclose(space);
    }
    H5Pclose(lcpl);
    H5Fclose(file);
}

static void write_int_attr(const char *path, const char *obj, int64_t v) {
    hid_t file = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    hid_t o = H5Oopen(file, obj, H5P_DEFAULT), space = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(o, "num_classes", H5T_STD_I32LE, space, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_INT64, &v);
    H5Aclose(a);
    H5Sclose(space);
    H5Oclose(o);
    H5Fclose(file);
}

typedef struct type_case {
    const char *name;
    hid_t type;
    bool is_float, is_unsigned;
    int bits;
} type_case;

static const type_case TYPES[] = {
    {"u8", 0, false, true, 8},    {"i8", 0, false, false, 8},   {"u16", 0, false, true, 16},
    {"i16", 0, false, false, 16}, {"i32", 0, false, false, 32}, {"i64", 0, false, false, 64},
    {"f32", 0, true, false, 32},  {"f64", 0, true, false, 64},
};

static hid_t type_of(int k) {
    hid_t t[] = {H5T_STD_U8LE, H5T_STD_I8LE, H5T_STD_U16BE, H5T_STD_I16LE, H5T_STD_I32BE, H5T_STD_I64LE,
                 H5T_IEEE_F32BE, H5T_IEEE_F64LE};
    return t[k];
}

/* A random value representable in type k: as int64 for integer types, as double for floats. */
static void random_value(int k, int64_t *iv, double *dv) {
    const type_case *t = &TYPES[k];
    if (t->is_float) {
        double v = (ct_rng_uniform(&rng) * 2 - 1) * pow(10.0, (double)(below(13) - 6));
        *dv = t->bits == 32 ? (double)(float)v : v;
        return;
    }
    if (t->bits == 64) {
        *iv = (int64_t)(((uint64_t)ct_rng_u32(&rng) << 32) | ct_rng_u32(&rng)) >> below(60);
        return;
    }
    int64_t span = (int64_t)1 << t->bits;
    *iv = below(span) - (t->is_unsigned ? 0 : span / 2);
}

static void element_types(void) {
    char path[256];
    tmp_path(path, sizeof path, "types.h5");
    for (int fk = 0; fk < 8; fk++) {
        int lk = (int)below(8);
        int64_t n = 1 + below(300);
        int rank = 2 + (int)below(3), lrank = 1 + (int)below(2);
        h5_item it[2] = {{"group/x", type_of(fk), rank, {(hsize_t)n}, below(2) == 0, NULL, 0},
                         {"y", type_of(lk), lrank, {(hsize_t)n}, below(2) == 0, NULL, 0}};
        for (int d = 1; d < rank; d++) it[0].dims[d] = 1 + (hsize_t)below(5);
        if (lrank == 2) it[1].dims[1] = 1 + (hsize_t)below(4);
        int64_t fn = n, ln = n * (lrank == 2 ? (int64_t)it[1].dims[1] : 1);
        for (int d = 1; d < rank; d++) fn *= (int64_t)it[0].dims[d];
        int64_t *fi = malloc((size_t)fn * 8), *li = malloc((size_t)ln * 8);
        double *fd = malloc((size_t)fn * 8), *ld = malloc((size_t)ln * 8);
        for (int64_t i = 0; i < fn; i++) random_value(fk, &fi[i], &fd[i]);
        int64_t classes = 1;
        for (int64_t i = 0; i < ln; i++) {
            random_value(lk, &li[i], &ld[i]);
            if (!TYPES[lk].is_float) { /* class ids: small and non-negative */
                li[i] = below(TYPES[lk].bits == 8 && !TYPES[lk].is_unsigned ? 100 : 200);
                if (li[i] + 1 > classes) classes = li[i] + 1;
            }
        }
        it[0].data = TYPES[fk].is_float ? (void *)fd : (void *)fi;
        it[0].mem_type = TYPES[fk].is_float ? H5T_NATIVE_DOUBLE : H5T_NATIVE_INT64;
        it[1].data = TYPES[lk].is_float ? (void *)ld : (void *)li;
        it[1].mem_type = TYPES[lk].is_float ? H5T_NATIVE_DOUBLE : H5T_NATIVE_INT64;
        write_h5(path, it, 2);
        /* Where num_classes comes from: the labels' attribute, the file's, the config, or a scan. */
        int source = (int)below(4);
        int64_t want_classes = TYPES[lk].is_float ? 0 : classes;
        if (source == 0) write_int_attr(path, "y", want_classes = classes + below(3));
        if (source == 1) write_int_attr(path, "/", want_classes = classes + below(3));
        int64_t cfg_classes = source == 2 ? classes + below(3) : 0;
        if (source == 2) want_classes = cfg_classes;
        if (TYPES[lk].is_float) want_classes = 0;
        double scale = below(2) ? 0.0 : ct_rng_uniform(&rng) * 3;
        if (below(2)) setenv("CTRAINER_HDF5_CACHE_MB", "0.01", 1); /* a cache of a few rows */
        double eff = scale != 0 ? scale : fk == 0 ? 1.0 / 255.0 : 1.0;
        ct_hdf5_dataset_config cfg = {.path = path, .features = "group/x", .labels = "y", .scale = scale,
                                      .num_classes = cfg_classes};
        ct_dataset *ds = NULL;
        ct_status s = ct_hdf5_dataset_create(&cfg, &ds);
        unsetenv("CTRAINER_HDF5_CACHE_MB");
        CHECK(s == CT_OK, "features %s, labels %s: %s", TYPES[fk].name, TYPES[lk].name, ct_last_error());
        if (!ds) goto next;
        CHECK(ds->spec.feature_shape.ndim == rank - 1 && ds->spec.label_shape.ndim == lrank - 1,
              "%s/%s: sample shapes", TYPES[fk].name, TYPES[lk].name);
        CHECK(ds->spec.label_dtype == (TYPES[lk].is_float ? CT_F32 : CT_I64), "label dtype of %s", TYPES[lk].name);
        CHECK(ds->spec.num_classes == want_classes, "%s labels, source %d: num_classes %lld, expected %lld",
              TYPES[lk].name, source, (long long)ds->spec.num_classes, (long long)want_classes);
        ct_tensor x, y;
        CHECK_OK(ct_dataset_alloc_batch(ds, 2 * n, &x, &y));
        int64_t *idx = malloc((size_t)(2 * n) * sizeof *idx);
        for (int64_t i = 0; i < 2 * n; i++) idx[i] = below(n);
        CHECK_OK(ct_dataset_get_batch(ds, idx, 2 * n, NULL, &x, &y));
        int64_t fr = fn / n, lr = ln / n, bad_f = 0, bad_l = 0;
        for (int64_t i = 0; i < 2 * n; i++) {
            for (int64_t k = 0; k < fr; k++) {
                int64_t e = idx[i] * fr + k;
                float want;
                if (eff == 1.0) want = TYPES[fk].is_float ? (float)fd[e] : (float)fi[e];
                else want = (float)((TYPES[fk].is_float ? fd[e] : (double)fi[e]) * eff);
                bad_f += ((float *)x.data)[i * fr + k] != want;
            }
            for (int64_t k = 0; k < lr; k++) {
                int64_t e = idx[i] * lr + k;
                if (TYPES[lk].is_float) bad_l += ((float *)y.data)[i * lr + k] != (float)ld[e];
                else bad_l += ((int64_t *)y.data)[i * lr + k] != li[e];
            }
        }
        CHECK(bad_f == 0 && bad_l == 0, "features %s (scale %g), labels %s: %lld features and %lld labels differ",
              TYPES[fk].name, eff, TYPES[lk].name, (long long)bad_f, (long long)bad_l);
        free(idx);
        ct_tensor_free(&x);
        ct_tensor_free(&y);
        ct_dataset_free(ds);
    next:
        free(fi);
        free(li);
        free(fd);
        free(ld);
        unlink(path);
    }
}

/* --- bad input ------------------------------------------------------------------------------------ */

static ct_status try_open(const char *path, const char *features, const char *labels, int64_t classes,
                          ct_dataset **ds) {
    ct_hdf5_dataset_config cfg = {.path = path, .features = features, .labels = labels, .num_classes = classes};
    ct_status s = ct_hdf5_dataset_create(&cfg, ds);
    CHECK((s == CT_OK) == (*ds != NULL), "the handle is set exactly when opening succeeds");
    return s;
}

/* Reads every sample (in batches of 64): the status of the first failure, or CT_OK. */
static ct_status read_all(ct_dataset *ds) {
    ct_tensor x, y;
    ct_status s = ct_dataset_alloc_batch(ds, 64, &x, &y);
    int64_t n = ct_dataset_length(ds), idx[64];
    for (int64_t at = 0; s == CT_OK && at < n; at += 64) {
        int64_t b = n - at < 64 ? n - at : 64;
        for (int64_t i = 0; i < b; i++) idx[i] = at + i;
        s = ct_dataset_get_batch(ds, idx, b, NULL, &x, &y);
    }
    ct_tensor_free(&x);
    ct_tensor_free(&y);
    return s;
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
}

static void bad_hdf5_files(void) {
    char path[256], other[256];
    tmp_path(path, sizeof path, "bad.h5");
    ct_dataset *ds;
    CHECK_ERR(try_open("/nonexistent/dir/data.h5", NULL, NULL, 0, &ds), CT_ERR_IO, "/nonexistent/dir/data.h5",
              "cannot open", "No such file");
    CHECK_ERR(try_open(tmpdir, NULL, NULL, 0, &ds), CT_ERR_IO, tmpdir, "directory");
    write_text(path, "features,labels\n1,2\n");
    CHECK_ERR(try_open(path, NULL, NULL, 0, &ds), CT_ERR_FORMAT, path, "not an HDF5 file");

    /* A good file to break: 500 samples of u8 [4, 5], labels 0..6. */
    int64_t n = 500;
    uint8_t *px = malloc((size_t)n * 20);
    int64_t *lab = malloc((size_t)n * 8);
    for (int64_t i = 0; i < n * 20; i++) px[i] = (uint8_t)ct_rng_u32(&rng);
    for (int64_t i = 0; i < n; i++) lab[i] = below(7);
    h5_item good[2] = {{"features", H5T_STD_U8LE, 3, {(hsize_t)n, 4, 5}, true, px, H5T_NATIVE_UINT8},
                       {"labels", H5T_STD_I64LE, 1, {(hsize_t)n}, true, lab, H5T_NATIVE_INT64}};
    write_h5(path, good, 2);
    struct stat st;
    stat(path, &st);
    /* Truncated anywhere: an error when opening or reading, never wrong data or a crash. */
    const double cuts[] = {0.1, 0.3, 0.5, 0.7, 0.9, 0.99};
    FILE *src = fopen(path, "rb");
    char *bytes = malloc((size_t)st.st_size);
    CHECK(fread(bytes, 1, (size_t)st.st_size, src) == (size_t)st.st_size, "read back %s", path);
    fclose(src);
    tmp_path(other, sizeof other, "truncated.h5");
    for (size_t c = 0; c < sizeof cuts / sizeof *cuts; c++) {
        size_t len = (size_t)(cuts[c] * (double)st.st_size);
        FILE *f = fopen(other, "wb");
        fwrite(bytes, 1, len, f);
        fclose(f);
        ct_status s = try_open(other, NULL, NULL, 0, &ds);
        if (s == CT_OK) {
            s = read_all(ds);
            ct_dataset_free(ds);
        }
        CHECK(s != CT_OK && strstr(ct_last_error(), other), "%s cut to %zu of %lld bytes: %s", other, len,
              (long long)st.st_size, s == CT_OK ? "no error" : ct_last_error());
        if (c == 2) CHECK_ERR(try_open(other, NULL, NULL, 0, &ds), CT_ERR_FORMAT, other, "truncated");
    }
    /* A damaged compressed chunk: an error when that chunk is read. */
    hid_t file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT), d = H5Dopen2(file, "features", H5P_DEFAULT);
    hid_t space = H5Dget_space(d);
    hsize_t off[3];
    unsigned mask;
    haddr_t addr;
    hsize_t size;
    herr_t rc = H5Dget_chunk_info(d, space, 0, off, &mask, &addr, &size);
    H5Sclose(space);
    H5Dclose(d);
    H5Fclose(file);
    CHECK(rc >= 0 && size > 4, "chunk info");
    if (rc >= 0 && size > 4) {
        char *broken = malloc((size_t)st.st_size);
        memcpy(broken, bytes, (size_t)st.st_size);
        for (hsize_t i = 2; i < size; i += 3) broken[addr + i] ^= 0x5a;
        FILE *f = fopen(other, "wb");
        fwrite(broken, 1, (size_t)st.st_size, f);
        fclose(f);
        free(broken);
        CHECK_OK(try_open(other, NULL, NULL, 0, &ds));
        if (ds) {
            CHECK_ERR(read_all(ds), CT_ERR_FORMAT, other, "cannot read", "'features'");
            ct_dataset_free(ds);
        }
    }
    free(bytes);

    /* Datasets missing or elsewhere: the message lists what the file has. */
    CHECK_ERR(try_open(path, "images", NULL, 0, &ds), CT_ERR_FORMAT, path, "no dataset 'images'",
              "'features' [500, 4, 5] u8", "'labels' [500] i64");
    CHECK_ERR(try_open(path, NULL, "targets", 0, &ds), CT_ERR_FORMAT, path, "no dataset 'targets'", "labels");
    CHECK_ERR(try_open(path, "features/x", NULL, 0, &ds), CT_ERR_FORMAT, path, "features/x");
    h5_item grouped[2] = {{"g/features", H5T_STD_U8LE, 3, {(hsize_t)n, 4, 5}, false, px, H5T_NATIVE_UINT8},
                          {"labels", H5T_STD_I64LE, 1, {(hsize_t)n}, false, lab, H5T_NATIVE_INT64}};
    write_h5(other, grouped, 2);
    CHECK_ERR(try_open(other, "g", NULL, 0, &ds), CT_ERR_FORMAT, other, "'g' is not a dataset", "'g/' (group)",
              "'g/features' [500, 4, 5]");
    CHECK_OK(try_open(other, "g/features", NULL, 0, &ds));
    ct_dataset_free(ds);

    /* Wrong ranks, mismatched lengths, non-numeric elements. */
    h5_item rank1[2] = {{"features", H5T_STD_U8LE, 1, {(hsize_t)n}, false, px, H5T_NATIVE_UINT8},
                        {"labels", H5T_STD_I64LE, 1, {(hsize_t)n}, false, lab, H5T_NATIVE_INT64}};
    write_h5(other, rank1, 2);
    CHECK_ERR(try_open(other, NULL, NULL, 0, &ds), CT_ERR_SHAPE, other, "'features'", "[500]", "expected rank >= 2");
    h5_item rank3[2] = {{"features", H5T_STD_U8LE, 2, {(hsize_t)n, 20}, false, px, H5T_NATIVE_UINT8},
                        {"labels", H5T_STD_U8LE, 3, {(hsize_t)n, 4, 5}, false, px, H5T_NATIVE_UINT8}};
    write_h5(other, rank3, 2);
    CHECK_ERR(try_open(other, NULL, NULL, 0, &ds), CT_ERR_SHAPE, other, "'labels'", "[500, 4, 5]",
              "expected rank 1");
    h5_item mismatch[2] = {{"features", H5T_STD_U8LE, 3, {(hsize_t)n, 4, 5}, true, px, H5T_NATIVE_UINT8},
                           {"labels", H5T_STD_I64LE, 1, {(hsize_t)n - 1}, true, lab, H5T_NATIVE_INT64}};
    write_h5(other, mismatch, 2);
    CHECK_ERR(try_open(other, NULL, NULL, 0, &ds), CT_ERR_SHAPE, other, "'features' has 500 samples",
              "'labels' has 499", "same first dimension");
    hid_t str = H5Tcopy(H5T_C_S1);
    H5Tset_size(str, 8);
    h5_item strings[2] = {{"features", str, 2, {(hsize_t)n, 2}, false, NULL, 0},
                          {"labels", H5T_STD_I64LE, 1, {(hsize_t)n}, false, lab, H5T_NATIVE_INT64}};
    write_h5(other, strings, 2);
    H5Tclose(str);
    CHECK_ERR(try_open(other, NULL, NULL, 0, &ds), CT_ERR_FORMAT, other, "'features' holds string elements",
              "expected numbers");

    /* Labels out of range: against an attribute, the config, and negative ones found by the scan. */
    int64_t at = below(n);
    lab[at] = 9;
    h5_item labelled[2] = {{"features", H5T_STD_U8LE, 3, {(hsize_t)n, 4, 5}, true, px, H5T_NATIVE_UINT8},
                           {"labels", H5T_STD_I64LE, 1, {(hsize_t)n}, true, lab, H5T_NATIVE_INT64}};
    write_h5(other, labelled, 2);
    write_int_attr(other, "labels", 7);
    CHECK_OK(try_open(other, NULL, NULL, 0, &ds));
    if (ds) {
        char want[96];
        snprintf(want, sizeof want, "label 9 of sample %lld in dataset 'labels' is outside [0, 7)", (long long)at);
        CHECK_ERR(read_all(ds), CT_ERR_FORMAT, other, want, "attribute");
        ct_dataset_free(ds);
    }
    CHECK_OK(try_open(other, NULL, NULL, 12, &ds)); /* the config's num_classes wins over the attribute */
    if (ds) {
        CHECK(ds->spec.num_classes == 12, "num_classes from the config");
        CHECK_OK(read_all(ds));
        ct_dataset_free(ds);
    }
    lab[at] = -2;
    write_h5(other, labelled, 2);
    /* A negative label is no class: it is a loss's ignore_index (-100, say) or the data's mistake. The
     * set opens and reads (its classes counted from the other labels, or given by the config), and
     * the Trainer's check against the loss tells the two apart. */
    char want[96];
    snprintf(want, sizeof want, "label -2 of sample %lld in dataset 'labels' is not a class of", (long long)at);
    for (int64_t given = 0; given <= 7; given += 7) {
        CHECK_OK(try_open(other, NULL, NULL, given, &ds));
        if (!ds) continue;
        CHECK_OK(read_all(ds));
        ct_label_rule rule = {.classes = 7, .ignore_index = -100, .of = "the model's outputs", .loss = "cross_entropy"};
        CHECK_ERR(ct_dataset_check_labels(ds, &rule), CT_ERR_FORMAT, other, want);
        rule.ignore_index = -2;
        CHECK_OK(ct_dataset_check_labels(ds, &rule));
        ct_dataset_free(ds);
    }
    /* Unsigned labels beyond int64 (and INT64_MAX, whose num_classes would overflow): their own value
     * in the message, never the -1 a cast makes of 2^64-1; by the scan and against the config. */
    lab[at] = 1;
    uint64_t *ulab = (uint64_t *)lab;
    static const uint64_t huge[] = {UINT64_MAX, (uint64_t)INT64_MAX + 1, (uint64_t)INT64_MAX};
    for (int k = 0; k < 3; k++) {
        ulab[at] = huge[k];
        h5_item unsigned_labels[2] = {
            {"features", H5T_STD_U8LE, 3, {(hsize_t)n, 4, 5}, true, px, H5T_NATIVE_UINT8},
            {"labels", H5T_STD_U64LE, 1, {(hsize_t)n}, true, ulab, H5T_NATIVE_UINT64}};
        write_h5(other, unsigned_labels, 2);
        snprintf(want, sizeof want, "label %llu of sample %lld in dataset 'labels' is too large for a class id",
                 (unsigned long long)huge[k], (long long)at);
        CHECK_ERR(try_open(other, NULL, NULL, 0, &ds), CT_ERR_FORMAT, other, want);
        CHECK_OK(try_open(other, NULL, NULL, 7, &ds));
        if (ds) {
            CHECK_ERR(read_all(ds), CT_ERR_FORMAT, other, want);
            ct_dataset_free(ds);
        }
    }
    free(px);
    free(lab);
    unlink(path);
    unlink(other);
}

static void bad_conversions(void) {
    char csv[256], out[256], a[256], b[256];
    tmp_path(csv, sizeof csv, "bad.csv");
    tmp_path(out, sizeof out, "bad_out.h5");
    struct {
        const char *text, *label;
        ct_status status;
        const char *a, *b;
    } cases[] = {
        {"a,b,c\n1,2,3\n4,5\n", NULL, CT_ERR_FORMAT, ":3:4: expected 3 fields (as in the header), found 2", NULL},
        {"a,b,c\n1,2,3\n4,5,6,7\n", NULL, CT_ERR_FORMAT, ":3:7: expected 3 fields", "found 4"},
        {"a,b,c\n1,2,3\n4, abc ,6\n", NULL, CT_ERR_FORMAT, ":3:4: expected a finite number in column 'b'",
         "found 'abc'"},
        {"1,2,3\n4,5,x\n", NULL, CT_ERR_FORMAT, ":2:5: expected a finite number in column 2", "found 'x'"},
        {"a,b\n1,nan\n", NULL, CT_ERR_FORMAT, ":2:3: expected a finite number", "'nan'"},
        {"a,b\n1,\n", NULL, CT_ERR_FORMAT, ":2:3: expected a finite number", "found ''"},
        {"a,b\n1e39,2\n", NULL, CT_ERR_FORMAT, ":2:1: 1e39", "outside float32's range"},
        {"a,b\n\"1,2\n", NULL, CT_ERR_FORMAT, ":2:1: unterminated quoted field", NULL},
        {"a,b\n1,2\n", "c", CT_ERR_INVALID_ARG, "no label column 'c'", "'a', 'b'"},
        {"a,b\n1,2\n", "5", CT_ERR_INVALID_ARG, "label column 5 is out of range", "0 to 1"},
        {"a,b\n", NULL, CT_ERR_FORMAT, "no rows", NULL},
        {"", NULL, CT_ERR_FORMAT, "empty file", NULL},
        {"a\n1\n", NULL, CT_ERR_FORMAT, "expected at least 2", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        write_text(csv, cases[i].text);
        ct_status s = ct_convert_csv_to_hdf5(csv, cases[i].label, -1, out, 0, -1);
        const char *msg = ct_last_error();
        CHECK(s == cases[i].status && strstr(msg, csv) && strstr(msg, cases[i].a) &&
                  (!cases[i].b || strstr(msg, cases[i].b)),
              "csv case %zu: %s: %s", i, ct_status_str(s), msg);
        CHECK(access(out, F_OK) != 0 && count_files(".tmp-") == 0, "csv case %zu left a file behind", i);
    }
    CHECK_ERR(ct_convert_csv_to_hdf5("/nonexistent/x.csv", NULL, -1, out, 0, -1), CT_ERR_IO, "/nonexistent/x.csv",
              "cannot open");
    write_text(csv, "a,b\n1,2\n");
    CHECK_ERR(ct_convert_csv_to_hdf5(csv, NULL, -1, "/nonexistent/dir/out.h5", 0, -1), CT_ERR_IO,
              "/nonexistent/dir/out.h5", "cannot create");
    CHECK_ERR(ct_convert_csv_to_hdf5(csv, NULL, -1, out, -3, -1), CT_ERR_INVALID_ARG, "chunk_rows -3");
    CHECK_ERR(ct_convert_csv_to_hdf5(csv, NULL, -1, out, 0, 10), CT_ERR_INVALID_ARG, "compression level 10");
    /* An existing output survives a failed conversion untouched. */
    write_text(out, "keep me");
    write_text(csv, "a,b\n1,2\n3\n");
    CHECK(ct_convert_csv_to_hdf5(csv, NULL, -1, out, 0, -1) == CT_ERR_FORMAT, "ragged csv fails");
    FILE *f = fopen(out, "r");
    char buf[16] = "";
    CHECK(f && fgets(buf, sizeof buf, f) && strcmp(buf, "keep me") == 0, "the old output was kept");
    if (f) fclose(f);
    unlink(out);

    /* IDX: mismatched counts, a bad file, a missing one. */
    uint8_t img_hdr[16] = {0, 0, 8, 3, 0, 0, 0, 3, 0, 0, 0, 2, 0, 0, 0, 2};
    uint8_t lab_hdr[8] = {0, 0, 8, 1, 0, 0, 0, 4};
    tmp_path(a, sizeof a, "img.idx");
    tmp_path(b, sizeof b, "lab.idx");
    f = fopen(a, "wb");
    fwrite(img_hdr, 1, 16, f);
    for (int i = 0; i < 12; i++) fputc(i * 20, f);
    fclose(f);
    f = fopen(b, "wb");
    fwrite(lab_hdr, 1, 8, f);
    for (int i = 0; i < 4; i++) fputc(i, f);
    fclose(f);
    CHECK_ERR(ct_convert_idx_to_hdf5(a, b, out, 0, -1), CT_ERR_SHAPE, a, "has 3 images", b, "has 4 labels");
    CHECK(access(out, F_OK) != 0 && count_files(".tmp-") == 0, "a failed IDX conversion left a file behind");
    CHECK_ERR(ct_convert_idx_to_hdf5(a, "/nonexistent/labels.idx", out, 0, -1), CT_ERR_IO, "/nonexistent/labels.idx");
    CHECK_ERR(ct_convert_idx_to_hdf5(csv, b, out, 0, -1), CT_ERR_FORMAT, csv, "not an IDX file");
    /* And a good small one: 3 images of 2x2 with 3 labels, read back. */
    lab_hdr[7] = 3;
    f = fopen(b, "wb");
    fwrite(lab_hdr, 1, 8, f);
    for (int i = 0; i < 3; i++) fputc(2 - i, f);
    fclose(f);
    CHECK_OK(ct_convert_idx_to_hdf5(a, b, out, 2, 0));
    ct_dataset *ds = open_h5(out, 1.0, 0);
    if (ds) {
        ct_tensor x, y;
        int64_t idx[3] = {2, 0, 1};
        CHECK_OK(ct_dataset_alloc_batch(ds, 3, &x, &y));
        CHECK_OK(ct_dataset_get_batch(ds, idx, 3, NULL, &x, &y));
        bool same = ds->spec.num_classes == 3;
        for (int i = 0; i < 3; i++) {
            same = same && ((int64_t *)y.data)[i] == 2 - idx[i];
            for (int k = 0; k < 4; k++) same = same && ((float *)x.data)[i * 4 + k] == (float)((idx[i] * 4 + k) * 20);
        }
        CHECK(same, "a small IDX file reads back");
        ct_tensor_free(&x);
        ct_tensor_free(&y);
        ct_dataset_free(ds);
    }
    unlink(a);
    unlink(b);
    unlink(csv);
    unlink(out);
}

int main(void) {
    ct_test_begin("test_hdf5_dataset");
    ct_rng_init(&rng, ct_test_seed, 0, CT_RNG_USER);
    ct_h5_quiet();
    snprintf(tmpdir, sizeof tmpdir, "/tmp/ct_hdf5_XXXXXX");
    if (!mkdtemp(tmpdir)) {
        printf("cannot create a temporary directory\n");
        return 1;
    }
    char ctrainer[PATH_MAX];
    if (find_ctrainer(ctrainer, sizeof ctrainer)) fashion_mnist(ctrainer);
    else CHECK(false, "ctrainer program not found next to the tests (set CTRAINER=path)");
    for (int i = 0; i < 4; i++) csv_round_trip(i % 2 == 0);
    element_types();
    bad_hdf5_files();
    bad_conversions();
    remove_tmpdir();
    return ct_test_finish();
}
