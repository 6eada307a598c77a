/* Datasets from JSON specs: every type (idx, hdf5, tokens, fashion_mnist: the real files when they
 * are installed, and the standard file names on small files written here) gives the samples of the
 * files written here; relative paths resolve against base_dir; "limit" keeps the first N;
 * "transforms" apply in order on top of a limit; the returned dataset owns the whole chain (the
 * sanitizer build checks nothing leaks). Every error names the JSON path of the value at fault and,
 * for files, the file; values the constructors refuse are config errors. */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "core/format/h5io.h"
#include "core/rng.h"
#include "data/dataset_json.h"
#include "testlib.h"

#define FMNIST "/usr/share/datasets/fashion-mnist"

static ct_rng rng;
static char tmpdir[64];
static int64_t N;          /* samples in the files written here */
static uint8_t *pixels;    /* [N, 4, 5] */
static uint8_t *classes;   /* [N], in [0, 7) */
static float *feats;       /* hdf5 features [N, 6] */
static uint16_t *tokens;   /* the token file */
static int64_t n_tokens;

/* --- files -------------------------------------------------------------------------------------- */

static void tmp(char *buf, size_t cap, const char *name) { snprintf(buf, cap, "%s/%s", tmpdir, name); }

/* u8 IDX (type 0x08), raw or gzip'd. */
static void write_idx(const char *name, bool gz, int ndim, const int64_t *shape, const uint8_t *data) {
    char path[256];
    tmp(path, sizeof path, name);
    size_t header = 4 + 4 * (size_t)ndim, bytes = 1;
    for (int i = 0; i < ndim; i++) bytes *= (size_t)shape[i];
    unsigned char *buf = malloc(header + bytes);
    buf[0] = buf[1] = 0;
    buf[2] = 0x08;
    buf[3] = (unsigned char)ndim;
    for (int i = 0; i < ndim; i++)
        for (int b = 0; b < 4; b++) buf[4 + 4 * i + b] = (unsigned char)(shape[i] >> (24 - 8 * b));
    memcpy(buf + header, data, bytes);
    if (gz) {
        gzFile f = gzopen(path, "wb");
        gzwrite(f, buf, (unsigned)(header + bytes));
        gzclose(f);
    } else {
        FILE *f = fopen(path, "wb");
        fwrite(buf, 1, header + bytes, f);
        fclose(f);
    }
    free(buf);
}

static void write_text(const char *name, const char *text) {
    char path[256];
    tmp(path, sizeof path, name);
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
}

static void write_files(void) {
    N = 20 + (int64_t)ct_rng_below(&rng, 40);
    pixels = malloc((size_t)N * 20);
    classes = malloc((size_t)N);
    feats = malloc((size_t)N * 6 * sizeof(float));
    for (int64_t i = 0; i < N * 20; i++) pixels[i] = (uint8_t)(1 + ct_rng_below(&rng, 255));
    for (int64_t i = 0; i < N; i++) classes[i] = (uint8_t)ct_rng_below(&rng, 7);
    for (int64_t i = 0; i < N * 6; i++) feats[i] = (float)ct_rng_normal(&rng);
    classes[0] = 6; /* max label + 1 = 7 classes */
    int64_t is[3] = {N, 4, 5}, ls[1] = {N}, short_ls[1] = {N - 1};
    write_idx("img.idx.gz", true, 3, is, pixels);
    write_idx("lab.idx.gz", true, 1, ls, classes);
    write_idx("short_lab.idx.gz", true, 1, short_ls, classes);
    char sub[256];
    tmp(sub, sizeof sub, "sub");
    mkdir(sub, 0700);
    write_idx("sub/img.idx", false, 3, is, pixels);
    write_idx("sub/lab.idx", false, 1, ls, classes);
    /* Fashion-MNIST's names in a directory of our own. */
    tmp(sub, sizeof sub, "fm");
    mkdir(sub, 0700);
    write_idx("fm/train-images-idx3-ubyte.gz", true, 3, is, pixels);
    write_idx("fm/train-labels-idx1-ubyte.gz", true, 1, ls, classes);
    int64_t ts[3] = {N / 2, 4, 5}, tls[1] = {N / 2};
    write_idx("fm/t10k-images-idx3-ubyte.gz", true, 3, ts, pixels);
    write_idx("fm/t10k-labels-idx1-ubyte.gz", true, 1, tls, classes);
    write_text("not_idx.gz", "hello, I am not an IDX file\n");

    char path[256];
    tmp(path, sizeof path, "d.h5");
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    int64_t fs[2] = {N, 6};
    ct_tensor ft = ct_tensor_view(feats, CT_F32, CT_CPU, 2, fs);
    ct_tensor lt;
    CT_ASSERT(ct_tensor_alloc(&lt, CT_I64, CT_CPU, 1, ls) == CT_OK);
    for (int64_t i = 0; i < N; i++) ((int64_t *)lt.data)[i] = classes[i];
    CT_ASSERT(ct_h5_write_tensor(f, "x", &ft) == CT_OK && ct_h5_write_tensor(f, "y", &lt) == CT_OK);
    ct_tensor_free(&lt);
    H5Fclose(f);

    n_tokens = 50 + (int64_t)ct_rng_below(&rng, 50);
    tokens = malloc((size_t)n_tokens * sizeof *tokens);
    for (int64_t i = 0; i < n_tokens; i++) tokens[i] = (uint16_t)ct_rng_below(&rng, 1000);
    tmp(path, sizeof path, "t.bin");
    FILE *tf = fopen(path, "wb");
    fwrite(tokens, sizeof *tokens, (size_t)n_tokens, tf); /* little-endian on this machine */
    fclose(tf);
}

static void remove_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char p[512];
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat st;
        if (stat(p, &st) == 0 && S_ISDIR(st.st_mode))
            remove_dir(p);
        else
            unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

/* --- helpers ------------------------------------------------------------------------------------ */

/* The spec text with every "@" replaced by the temporary directory. */
static json_t *spec_of(const char *text) {
    char buf[4096], *o = buf;
    for (const char *c = text; *c && o < buf + sizeof buf - 80; c++)
        if (*c == '@')
            o += snprintf(o, 80, "%s", tmpdir);
        else
            *o++ = *c;
    *o = 0;
    json_error_t e;
    json_t *j = json_loads(buf, 0, &e);
    if (!j) ct_abort_at(__FILE__, __LINE__, "bad test JSON %s: %s", buf, e.text);
    return j;
}

static ct_status from(const char *text, const char *base_dir, ct_dataset **out) {
    json_t *j = spec_of(text);
    ct_status s = ct_dataset_from_json(j, "data.train", base_dir, out);
    json_decref(j);
    return s;
}

static ct_dataset *open_ok(const char *text, const char *base_dir) {
    ct_dataset *ds = NULL;
    ct_status s = from(text, base_dir, &ds);
    CHECK(s == CT_OK && ds, "%s: %s: %s", text, ct_status_str(s), ct_last_error());
    return s == CT_OK ? ds : NULL;
}

/* Fetches samples 0..n into freshly allocated tensors. */
static void fetch_all(ct_dataset *ds, ct_tensor *x, ct_tensor *y, uint64_t epoch) {
    int64_t n = ct_dataset_length(ds);
    CT_ASSERT(ct_dataset_alloc_batch(ds, n, x, y) == CT_OK);
    int64_t *idx = malloc((size_t)n * sizeof *idx);
    for (int64_t i = 0; i < n; i++) idx[i] = i;
    ct_fetch_ctx ctx = {7, epoch};
    CHECK_OK(ct_dataset_get_batch(ds, idx, n, &ctx, x, y));
    free(idx);
}

/* The idx samples: pixel * scale (scale 0: / 255), labels as written. */
static void check_idx_samples(const char *label, ct_dataset *ds, int64_t n, double scale) {
    CHECK(ct_dataset_length(ds) == n, "%s: length %lld, expected %lld", label, (long long)ct_dataset_length(ds),
          (long long)n);
    const ct_sample_spec *sp = &ds->spec;
    CHECK(sp->feature_shape.ndim == 3 && sp->feature_shape.dims[0] == 1 && sp->feature_shape.dims[1] == 4 &&
              sp->feature_shape.dims[2] == 5 && sp->label_shape.ndim == 0,
          "%s: sample shape", label);
    ct_tensor x, y;
    fetch_all(ds, &x, &y, 0);
    int64_t bad = 0;
    for (int64_t i = 0; i < n * 20; i++) {
        float want = scale == 0 ? pixels[i] / 255.0f : (float)(pixels[i] * scale);
        bad += ((float *)x.data)[i] != want;
    }
    for (int64_t i = 0; i < n; i++) bad += ((int64_t *)y.data)[i] != classes[i];
    CHECK(bad == 0, "%s: %lld values differ from the files", label, (long long)bad);
    ct_tensor_free(&x);
    ct_tensor_free(&y);
}

/* --- tests -------------------------------------------------------------------------------------- */

static void test_idx(void) {
    ct_dataset *ds = open_ok("{\"type\": \"idx\", \"images\": \"@/img.idx.gz\", \"labels\": \"@/lab.idx.gz\"}", NULL);
    if (ds) {
        check_idx_samples("idx", ds, N, 0);
        CHECK(ds->spec.num_classes == 7, "idx: num_classes %lld (max label + 1)", (long long)ds->spec.num_classes);
    }
    ct_dataset_free(ds);
    ds = open_ok("{\"type\": \"idx\", \"images\": \"@/img.idx.gz\", \"labels\": \"@/lab.idx.gz\", \"scale\": 0.5, "
                 "\"num_classes\": 12}",
                 "/nonexistent"); /* absolute paths ignore base_dir */
    if (ds) {
        check_idx_samples("idx scale 0.5", ds, N, 0.5);
        CHECK(ds->spec.num_classes == 12, "idx: num_classes %lld", (long long)ds->spec.num_classes);
    }
    ct_dataset_free(ds);
    /* Relative to base_dir, with and without a trailing slash, into a subdirectory. */
    char base[128];
    snprintf(base, sizeof base, "%s/", tmpdir);
    const char *rel = "{\"type\": \"idx\", \"images\": \"sub/img.idx\", \"labels\": \"sub/lab.idx\"}";
    ds = open_ok(rel, tmpdir);
    if (ds) check_idx_samples("relative", ds, N, 0);
    CHECK(ds && strstr(ds->source, tmpdir), "relative: source '%s' names the resolved file", ds ? ds->source : "");
    ct_dataset_free(ds);
    ds = open_ok(rel, base);
    if (ds) CHECK(strstr(ds->source, "//") == NULL, "base_dir with '/': source '%s'", ds->source);
    ct_dataset_free(ds);
    /* "." and NULL leave relative paths to the working directory. */
    char cwd[512];
    CT_ASSERT(getcwd(cwd, sizeof cwd));
    CT_ASSERT(chdir(tmpdir) == 0);
    ds = open_ok(rel, ".");
    if (ds) CHECK(strcmp(ds->source, "sub/img.idx") == 0, "base_dir \".\": source '%s'", ds->source);
    ct_dataset_free(ds);
    ds = open_ok(rel, NULL);
    ct_dataset_free(ds);
    CT_ASSERT(chdir(cwd) == 0);
}

static void test_hdf5(void) {
    ct_dataset *ds = open_ok("{\"type\": \"hdf5\", \"path\": \"d.h5\", \"features\": \"x\", \"labels\": \"y\", "
                             "\"num_classes\": 9}",
                             tmpdir);
    if (!ds) return;
    CHECK(ct_dataset_length(ds) == N && ds->spec.feature_shape.ndim == 1 && ds->spec.feature_shape.dims[0] == 6,
          "hdf5: length %lld", (long long)ct_dataset_length(ds));
    CHECK(ds->spec.num_classes == 9, "hdf5: num_classes %lld", (long long)ds->spec.num_classes);
    ct_tensor x, y;
    fetch_all(ds, &x, &y, 0);
    int64_t bad = 0;
    for (int64_t i = 0; i < N * 6; i++) bad += ((float *)x.data)[i] != feats[i];
    for (int64_t i = 0; i < N; i++) bad += ((int64_t *)y.data)[i] != classes[i];
    CHECK(bad == 0, "hdf5: %lld values differ", (long long)bad);
    ct_tensor_free(&x);
    ct_tensor_free(&y);
    ct_dataset_free(ds);
    ds = open_ok("{\"type\": \"hdf5\", \"path\": \"@/d.h5\", \"features\": \"x\", \"labels\": \"y\", \"scale\": 2}",
                 NULL);
    if (ds) {
        fetch_all(ds, &x, &y, 0);
        CHECK(((float *)x.data)[5] == 2 * feats[5], "hdf5 scale 2: %g vs %g", ((float *)x.data)[5], 2 * feats[5]);
        ct_tensor_free(&x);
        ct_tensor_free(&y);
    }
    ct_dataset_free(ds);
}

static void test_tokens(void) {
    int64_t context = 2 + (int64_t)ct_rng_below(&rng, 6), stride = 1 + (int64_t)ct_rng_below(&rng, 5);
    char text[256];
    snprintf(text, sizeof text,
             "{\"type\": \"tokens\", \"path\": \"t.bin\", \"context\": %lld, \"stride\": %lld, \"vocab_size\": 1000}",
             (long long)context, (long long)stride);
    ct_dataset *ds = open_ok(text, tmpdir);
    if (!ds) return;
    int64_t want = (n_tokens - context - 1) / stride + 1;
    CHECK(ct_dataset_length(ds) == want, "tokens: length %lld, expected %lld", (long long)ct_dataset_length(ds),
          (long long)want);
    CHECK(ds->spec.num_classes == 1000, "tokens: num_classes %lld", (long long)ds->spec.num_classes);
    ct_tensor x, y;
    fetch_all(ds, &x, &y, 0);
    int64_t bad = 0;
    for (int64_t i = 0; i < want; i++)
        for (int64_t t = 0; t < context; t++) {
            bad += ((int64_t *)x.data)[i * context + t] != tokens[i * stride + t];
            bad += ((int64_t *)y.data)[i * context + t] != tokens[i * stride + t + 1];
        }
    CHECK(bad == 0, "tokens: %lld ids differ", (long long)bad);
    ct_tensor_free(&x);
    ct_tensor_free(&y);
    ct_dataset_free(ds);
    /* Defaults: 2 bytes per token, stride = context. */
    ds = open_ok("{\"type\": \"tokens\", \"path\": \"t.bin\", \"context\": 8}", tmpdir);
    if (ds) CHECK(ct_dataset_length(ds) == (n_tokens - 9) / 8 + 1, "tokens defaults: length %lld",
                  (long long)ct_dataset_length(ds));
    ct_dataset_free(ds);
}

static void test_limit_and_transforms(void) {
    int64_t limit = 1 + (int64_t)ct_rng_below(&rng, (uint64_t)N - 1);
    char text[512];
    snprintf(text, sizeof text,
             "{\"type\": \"idx\", \"images\": \"img.idx.gz\", \"labels\": \"lab.idx.gz\", \"limit\": %lld}",
             (long long)limit);
    ct_dataset *ds = open_ok(text, tmpdir);
    if (ds) check_idx_samples("limit", ds, limit, 0);
    ct_dataset_free(ds);
    ds = open_ok("{\"type\": \"idx\", \"images\": \"img.idx.gz\", \"labels\": \"lab.idx.gz\", \"limit\": 100000}",
                 tmpdir);
    if (ds) CHECK(ct_dataset_length(ds) == N, "limit above the length keeps everything");
    ct_dataset_free(ds);

    /* normalize then a certain flip, on top of a limit: (x - 0.5) / 0.25, mirrored along W. */
    snprintf(text, sizeof text,
             "{\"type\": \"idx\", \"images\": \"img.idx.gz\", \"labels\": \"lab.idx.gz\", \"limit\": %lld, "
             "\"transforms\": [{\"type\": \"normalize\", \"mean\": 0.5, \"std\": 0.25}, "
             "{\"type\": \"random_hflip\", \"p\": 1}]}",
             (long long)limit);
    ds = open_ok(text, tmpdir);
    if (ds) {
        CHECK(ct_dataset_length(ds) == limit, "transforms keep the limit: %lld", (long long)ct_dataset_length(ds));
        ct_tensor x, y;
        fetch_all(ds, &x, &y, 3);
        int64_t bad = 0;
        for (int64_t i = 0; i < limit; i++)
            for (int h = 0; h < 4; h++)
                for (int w = 0; w < 5; w++) {
                    float v = pixels[i * 20 + h * 5 + (4 - w)] / 255.0f;
                    float want = (float)((v - 0.5) / 0.25);
                    float got = ((float *)x.data)[i * 20 + h * 5 + w];
                    bad += fabsf(got - want) > 1e-6f * fmaxf(1.0f, fabsf(want));
                }
        CHECK(bad == 0, "normalize + flip: %lld values differ", (long long)bad);
        ct_tensor_free(&x);
        ct_tensor_free(&y);
    }
    ct_dataset_free(ds);
    /* A crop on images, an empty list. */
    ds = open_ok("{\"type\": \"idx\", \"images\": \"img.idx.gz\", \"labels\": \"lab.idx.gz\", "
                 "\"transforms\": [{\"type\": \"random_crop\", \"padding\": 2}]}",
                 tmpdir);
    if (ds) {
        ct_tensor x, y;
        fetch_all(ds, &x, &y, 1);
        ct_tensor_free(&x);
        ct_tensor_free(&y);
    }
    ct_dataset_free(ds);
    ds = open_ok("{\"type\": \"idx\", \"images\": \"img.idx.gz\", \"labels\": \"lab.idx.gz\", \"transforms\": []}",
                 tmpdir);
    if (ds) check_idx_samples("no transforms", ds, N, 0);
    ct_dataset_free(ds);
}

static void test_fashion_mnist(void) {
    /* The standard file names, on small files: split train and test (t10k). */
    ct_dataset *ds = open_ok("{\"type\": \"fashion_mnist\", \"dir\": \"fm\"}", tmpdir);
    if (ds) {
        check_idx_samples("fashion_mnist names, train", ds, N, 0);
        CHECK(ds->spec.num_classes == 10, "fashion_mnist: 10 classes, got %lld", (long long)ds->spec.num_classes);
    }
    ct_dataset_free(ds);
    ds = open_ok("{\"type\": \"fashion_mnist\", \"split\": \"test\", \"dir\": \"@/fm\", \"limit\": 3}", NULL);
    if (ds) CHECK(ct_dataset_length(ds) == 3, "fashion_mnist test + limit: %lld", (long long)ct_dataset_length(ds));
    ct_dataset_free(ds);
    ds = open_ok("{\"type\": \"fashion_mnist\", \"split\": \"test\", \"dir\": \"@/fm\"}", NULL);
    if (ds) CHECK(ct_dataset_length(ds) == N / 2, "fashion_mnist test split: %lld", (long long)ct_dataset_length(ds));
    ct_dataset_free(ds);

    if (access(FMNIST "/train-images-idx3-ubyte.gz", R_OK) != 0 || access(FMNIST "/t10k-images-idx3-ubyte.gz", R_OK) != 0) {
        printf("note: Fashion-MNIST is not installed at %s; skipping the checks on the real files\n", FMNIST);
        return;
    }
    static const struct {
        const char *text;
        int64_t length;
    } cases[] = {{"{\"type\": \"fashion_mnist\"}", 60000},
                 {"{\"type\": \"fashion_mnist\", \"split\": \"train\"}", 60000},
                 {"{\"type\": \"fashion_mnist\", \"split\": \"test\", \"dir\": \"" FMNIST "\"}", 10000},
                 {"{\"type\": \"fashion_mnist\", \"split\": \"test\", \"limit\": 1000, "
                  "\"transforms\": [{\"type\": \"normalize\", \"mean\": 0.2860, \"std\": 0.3530}]}",
                  1000}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ds = open_ok(cases[i].text, "/somewhere/else");
        if (!ds) continue;
        CHECK(ct_dataset_length(ds) == cases[i].length, "%s: length %lld, expected %lld", cases[i].text,
              (long long)ct_dataset_length(ds), (long long)cases[i].length);
        const ct_sample_spec *sp = &ds->spec;
        CHECK(sp->num_classes == 10 && sp->feature_shape.ndim == 3 && sp->feature_shape.dims[1] == 28 &&
                  sp->feature_shape.dims[2] == 28,
              "%s: spec", cases[i].text);
        ct_dataset_free(ds);
    }
}

/* --- errors ------------------------------------------------------------------------------------- */

static void expect_err(const char *text, const char *base_dir, ct_status want, const char *m1, const char *m2) {
    ct_dataset *ds = (ct_dataset *)&ds;
    char a[512], b[512];
    /* "@" in the expected parts stands for the temporary directory too. */
    const char *parts[2] = {m1, m2};
    char *outs[2] = {a, b};
    for (int k = 0; k < 2; k++) {
        char *o = outs[k];
        for (const char *c = parts[k] ? parts[k] : ""; *c; c++)
            if (*c == '@')
                o += sprintf(o, "%s", tmpdir);
            else
                *o++ = *c;
        *o = 0;
    }
    ct_status s = from(text, base_dir, &ds);
    CHECK(s == want, "%s -> %s (wanted %s): %s", text, ct_status_str(s), ct_status_str(want), ct_last_error());
    CHECK(ds == NULL, "%s: *out is NULL after a failure", text);
    CHECK(strncmp(ct_last_error(), "data.train", 10) == 0, "%s: message does not start with the path: %s", text,
          ct_last_error());
    CHECK(strstr(ct_last_error(), a) != NULL, "%s: message lacks '%s': %s", text, a, ct_last_error());
    if (m2) CHECK(strstr(ct_last_error(), b) != NULL, "%s: message lacks '%s': %s", text, b, ct_last_error());
}

static void test_errors(void) {
    expect_err("[1]", NULL, CT_ERR_CONFIG, "data.train: expected a dataset object with a \"type\"", NULL);
    expect_err("{\"images\": \"x\"}", NULL, CT_ERR_CONFIG, "data.train: missing required key 'type'", NULL);
    expect_err("{\"type\": 5}", NULL, CT_ERR_CONFIG, "data.train.type: expected a string", NULL);
    expect_err("{\"type\": \"hdf\"}", NULL, CT_ERR_CONFIG, "data.train.type: unknown dataset type 'hdf', did you mean 'hdf5'?",
               NULL);
    expect_err("{\"type\": \"csv\"}", NULL, CT_ERR_CONFIG,
               "data.train.type: unknown dataset type 'csv' (known: fashion_mnist, idx, hdf5, tokens)", NULL);
    expect_err("{\"type\": \"fashion-mnist\"}", NULL, CT_ERR_CONFIG, "did you mean 'fashion_mnist'?", NULL);

    /* fashion_mnist */
    expect_err("{\"type\": \"fashion_mnist\", \"split\": \"tets\"}", NULL, CT_ERR_CONFIG,
               "data.train.split: unknown split 'tets', did you mean 'test'?", NULL);
    expect_err("{\"type\": \"fashion_mnist\", \"split\": \"validation\"}", NULL, CT_ERR_CONFIG,
               "data.train.split: unknown split 'validation' (expected train or test)", NULL);
    expect_err("{\"type\": \"fashion_mnist\", \"dri\": \"x\"}", NULL, CT_ERR_CONFIG,
               "data.train: unknown key 'dri', did you mean 'dir'?", NULL);
    expect_err("{\"type\": \"fashion_mnist\", \"dir\": \"nowhere\"}", tmpdir, CT_ERR_IO,
               "data.train.dir: @/nowhere/train-images-idx3-ubyte.gz: cannot open", NULL);
    expect_err("{\"type\": \"fashion_mnist\", \"dir\": \"\"}", tmpdir, CT_ERR_CONFIG,
               "data.train.dir: expected a directory, got an empty string", NULL);

    /* idx */
    expect_err("{\"type\": \"idx\", \"labels\": \"lab.idx.gz\"}", tmpdir, CT_ERR_CONFIG,
               "data.train: missing required key 'images'", NULL);
    expect_err("{\"type\": \"idx\", \"images\": \"img.idx.gz\", \"labels\": 3}", tmpdir, CT_ERR_CONFIG,
               "data.train.labels: expected a string", NULL);
    expect_err("{\"type\": \"idx\", \"images\": \"\", \"labels\": \"lab.idx.gz\"}", tmpdir, CT_ERR_CONFIG,
               "data.train.images: expected a file path, got an empty string", NULL);
    expect_err("{\"type\": \"idx\", \"imges\": \"img.idx.gz\", \"labels\": \"lab.idx.gz\"}", tmpdir, CT_ERR_CONFIG,
               "data.train: unknown key 'imges', did you mean 'images'?", NULL);
    expect_err("{\"type\": \"idx\", \"images\": \"x.gz\", \"labels\": \"lab.idx.gz\"}", tmpdir, CT_ERR_IO,
               "data.train.images: @/x.gz: cannot open: No such file or directory", NULL);
    expect_err("{\"type\": \"idx\", \"images\": \"img.idx.gz\", \"labels\": \"y.gz\"}", tmpdir, CT_ERR_IO,
               "data.train.labels: @/y.gz: cannot open: No such file or directory", NULL);
    expect_err("{\"type\": \"idx\", \"images\": \"not_idx.gz\", \"labels\": \"lab.idx.gz\"}", tmpdir, CT_ERR_FORMAT,
               "data.train.images: @/not_idx.gz: not an IDX file", NULL);
    expect_err("{\"type\": \"idx\", \"images\": \"img.idx.gz\", \"labels\": \"short_lab.idx.gz\"}", tmpdir,
               CT_ERR_FORMAT, "data.train: @/img.idx.gz has", "labels");
    expect_err("{\"type\": \"idx\", \"images\": \"img.idx.gz\", \"labels\": \"lab.idx.gz\", \"num_classes\": 3}", tmpdir,
               CT_ERR_FORMAT, "data.train.labels: @/lab.idx.gz: label 6 at position 0 is outside [0, 3)", NULL);
    expect_err("{\"type\": \"idx\", \"images\": \"img.idx.gz\", \"labels\": \"lab.idx.gz\", \"num_classes\": -1}",
               tmpdir, CT_ERR_CONFIG, "data.train.num_classes: -1; expected >= 0", NULL);
    expect_err("{\"type\": \"idx\", \"images\": \"img.idx.gz\", \"labels\": \"lab.idx.gz\", \"scale\": -2}", tmpdir,
               CT_ERR_CONFIG, "data.train.scale: -2; expected a number >= 0", NULL);
    expect_err("{\"type\": \"idx\", \"images\": \"img.idx.gz\", \"labels\": \"lab.idx.gz\", \"scale\": \"x\"}", tmpdir,
               CT_ERR_CONFIG, "data.train.scale: expected a number", NULL);
    /* A relative path without base_dir stays relative (to the working directory). */
    expect_err("{\"type\": \"idx\", \"images\": \"ct_surely_missing.gz\", \"labels\": \"lab.idx.gz\"}", NULL, CT_ERR_IO,
               "data.train.images: ct_surely_missing.gz: cannot open", NULL);

    /* hdf5 */
    expect_err("{\"type\": \"hdf5\", \"path\": \"d.h5\"}", tmpdir, CT_ERR_FORMAT,
               "data.train.path: @/d.h5: no dataset 'features'", NULL);
    expect_err("{\"type\": \"hdf5\", \"path\": \"nope.h5\"}", tmpdir, CT_ERR_IO,
               "data.train.path: @/nope.h5: cannot open: No such file or directory", NULL);
    expect_err("{\"type\": \"hdf5\", \"path\": \"img.idx.gz\"}", tmpdir, CT_ERR_FORMAT,
               "data.train.path: @/img.idx.gz: not an HDF5 file", NULL);
    expect_err("{\"type\": \"hdf5\", \"file\": \"d.h5\"}", tmpdir, CT_ERR_CONFIG, "data.train: unknown key 'file'", NULL);
    expect_err("{\"type\": \"hdf5\", \"features\": \"x\"}", tmpdir, CT_ERR_CONFIG, "data.train: missing required key 'path'",
               NULL);
    expect_err("{\"type\": \"hdf5\", \"path\": \"d.h5\", \"features\": \"x\", \"labels\": \"y\", \"num_classes\": -3}",
               tmpdir, CT_ERR_CONFIG, "data.train: @/d.h5: num_classes -3", NULL);
    expect_err("{\"type\": \"hdf5\", \"path\": \"d.h5\", \"features\": \"x\", \"labels\": \"y\", \"num_classes\": 2.5}",
               tmpdir, CT_ERR_CONFIG, "data.train.num_classes: expected an integer", NULL);

    /* tokens */
    expect_err("{\"type\": \"tokens\", \"path\": \"t.bin\"}", tmpdir, CT_ERR_CONFIG,
               "data.train: missing required key 'context'", NULL);
    expect_err("{\"type\": \"tokens\", \"path\": \"t.bin\", \"context\": 4, \"bytes_per_token\": 3}", tmpdir,
               CT_ERR_CONFIG, "data.train.bytes_per_token: 3; expected 2 (uint16 ids) or 4 (uint32 ids)", NULL);
    expect_err("{\"type\": \"tokens\", \"path\": \"t.bin\", \"context\": 0}", tmpdir, CT_ERR_CONFIG,
               "data.train: @/t.bin: context 0 must be at least 1", NULL);
    expect_err("{\"type\": \"tokens\", \"path\": \"t.bin\", \"context\": 4, \"stride\": -1}", tmpdir, CT_ERR_CONFIG,
               "data.train: @/t.bin: stride -1 must be >= 0", NULL);
    expect_err("{\"type\": \"tokens\", \"path\": \"t.bin\", \"context\": 4, \"vocab_size\": 1}", tmpdir, CT_ERR_FORMAT,
               "data.train.path: @/t.bin: token id", "outside the vocabulary [0, 1)");
    expect_err("{\"type\": \"tokens\", \"path\": \"t.bin\", \"context\": 100000}", tmpdir, CT_ERR_FORMAT,
               "data.train.path: @/t.bin: the file has", "context + 1 = 100001");
    expect_err("{\"type\": \"tokens\", \"path\": \"t.bin\", \"contxt\": 4}", tmpdir, CT_ERR_CONFIG,
               "data.train: unknown key 'contxt', did you mean 'context'?", NULL);

    /* limit */
    const char *base = "{\"type\": \"idx\", \"images\": \"img.idx.gz\", \"labels\": \"lab.idx.gz\", ";
    char text[512];
    snprintf(text, sizeof text, "%s\"limit\": 0}", base);
    expect_err(text, tmpdir, CT_ERR_CONFIG, "data.train.limit: 0; expected a number of samples >= 1", NULL);
    snprintf(text, sizeof text, "%s\"limit\": -5}", base);
    expect_err(text, tmpdir, CT_ERR_CONFIG, "data.train.limit: -5", NULL);
    snprintf(text, sizeof text, "%s\"limit\": \"10\"}", base);
    expect_err(text, tmpdir, CT_ERR_CONFIG, "data.train.limit: expected an integer", NULL);
    snprintf(text, sizeof text, "%s\"limt\": 10}", base);
    expect_err(text, tmpdir, CT_ERR_CONFIG, "data.train: unknown key 'limt', did you mean 'limit'?", NULL);
    /* Spec errors come before any file is read: a limit typo with a missing file names the limit. */
    expect_err("{\"type\": \"idx\", \"images\": \"x\", \"labels\": \"y\", \"limit\": 0}", tmpdir, CT_ERR_CONFIG,
               "data.train.limit", NULL);

    /* transforms */
    snprintf(text, sizeof text, "%s\"transforms\": {\"type\": \"normalize\"}}", base);
    expect_err(text, tmpdir, CT_ERR_CONFIG, "data.train.transforms: expected a list of transforms", NULL);
    snprintf(text, sizeof text, "%s\"transforms\": [{\"type\": \"random_hflip\"}, {\"type\": \"normalise\"}]}", base);
    expect_err(text, tmpdir, CT_ERR_CONFIG,
               "data.train.transforms[1].type: unknown transform type 'normalise', did you mean 'normalize'?", NULL);
    snprintf(text, sizeof text, "%s\"transforms\": [{\"type\": \"random_hflip\", \"p\": 2}]}", base);
    expect_err(text, tmpdir, CT_ERR_CONFIG, "data.train.transforms[0]: random_hflip: p = 2 must be in [0, 1]", NULL);
    snprintf(text, sizeof text, "%s\"transforms\": [{\"type\": \"normalize\", \"mean\": [0, 0], \"std\": [1, 1]}]}",
             base);
    expect_err(text, tmpdir, CT_ERR_CONFIG, "data.train.transforms: @/img.idx.gz: transform 0 (normalize)",
               "channels");
    expect_err("{\"type\": \"hdf5\", \"path\": \"d.h5\", \"features\": \"x\", \"labels\": \"y\", "
               "\"transforms\": [{\"type\": \"random_crop\", \"padding\": 1}]}",
               tmpdir, CT_ERR_CONFIG, "data.train.transforms: @/d.h5: transform 0 (random_crop)",
               "are not images [C, H, W]");
    expect_err("{\"type\": \"tokens\", \"path\": \"t.bin\", \"context\": 4, "
               "\"transforms\": [{\"type\": \"normalize\", \"mean\": 0, \"std\": 1}]}",
               tmpdir, CT_ERR_CONFIG, "data.train.transforms: @/t.bin: transform 0 (normalize)", "i64");
    /* A transform typo is found before the files are read. */
    expect_err("{\"type\": \"idx\", \"images\": \"x\", \"labels\": \"y\", \"transforms\": [{\"type\": \"flip\"}]}",
               tmpdir, CT_ERR_CONFIG, "data.train.transforms[0].type: unknown transform type 'flip'", NULL);

    /* path NULL means "data". */
    ct_dataset *ds;
    json_t *j = json_loads("{\"type\": \"idx\"}", 0, NULL);
    CHECK_ERR(ct_dataset_from_json(j, NULL, NULL, &ds), CT_ERR_CONFIG, "data: missing required key 'images'");
    json_decref(j);
}

int main(void) {
    ct_test_begin("test_dataset_json");
    ct_rng_init(&rng, ct_test_seed, 0, 0);
    snprintf(tmpdir, sizeof tmpdir, "/tmp/ct_dataset_json_XXXXXX");
    if (!mkdtemp(tmpdir)) {
        printf("cannot create a temporary directory\n");
        return 1;
    }
    ct_h5_quiet();
    write_files();
    test_idx();
    test_hdf5();
    test_tokens();
    test_limit_and_transforms();
    test_fashion_mnist();
    test_errors();
    remove_dir(tmpdir);
    free(pixels);
    free(classes);
    free(feats);
    free(tokens);
    return ct_test_finish();
}
