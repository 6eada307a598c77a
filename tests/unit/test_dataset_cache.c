/* Dataset caches (data/dataset_cache.h; the "cache" key of the idx and fashion_mnist specs):
 *   - samples and specs through the cache are bit-identical to the IDX files' for every IDX element
 *     type (u8, i32, f32, f64; raw and gzip'd), default and random scales, num_classes, limit and
 *     transforms on top, the fashion_mnist type (small files with the standard names, and the real
 *     test split when installed);
 *   - a fresh cache is reused (same inode and mtime, no "building" line); one whose sources changed
 *     (newer, older, or future mtimes; content changed under an older mtime) or that another spec
 *     built at the same path is rebuilt, once; a damaged cache of ours is rebuilt with a warning;
 *   - a file ctrainer did not write (not HDF5, or HDF5 without the record) is an error and is left
 *     untouched; errors name the key (data.train.cache / .images / .labels / .scale) and the file;
 *     a bad source fails exactly as without a cache and writes nothing;
 *   - processes building the same cache at once (fork) all get the right data and leave no
 *     temporary files behind;
 *   - a cache that cannot be written (a file in its path: ENOTDIR; a file size limit: EFBIG; a quota
 *     from the fault hook: EDQUOT; where
 *     this process may mount one, a full tmpfs: ENOSPC, and a read-only one: EROFS; without root, a
 *     directory it may not write: EACCES) is a warning naming the cache and errno's text, the
 *     sources are read instead (bit-identical samples), and nothing of the cache is left: no
 *     temporary file, no directory made for it.
 * Why one file of over 600 lines: every case builds on the same IDX fixtures and the same compare-
 * with-the-sources check, and a cache's whole life (built, reused, rebuilt, refused, given up on) is
 * read best in order. */
#define _GNU_SOURCE /* unshare */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include "core/format/h5io.h"
#include "core/io_fault.h"
#include "core/log.h"
#include "core/rng.h"
#include "data/convert.h"
#include "data/dataset_cache.h"
#include "data/dataset_json.h"
#include "testlib.h"

#define FMNIST "/usr/share/datasets/fashion-mnist"

static ct_rng rng;
static char dir[64];
static int64_t N;

/* --- files -------------------------------------------------------------------------------------- */

static void path_of(char *buf, size_t cap, const char *name) { snprintf(buf, cap, "%s/%s", dir, name); }

/* An IDX file of element type `type` (0x08 u8, 0x0C i32, 0x0D f32, 0x0E f64) from native data. */
static void write_idx(const char *name, bool gz, int type, int ndim, const int64_t *shape, const void *data) {
    char path[256];
    path_of(path, sizeof path, name);
    size_t es = type == 0x08 ? 1 : type == 0x0E ? 8 : 4, header = 4 + 4 * (size_t)ndim, count = 1;
    for (int i = 0; i < ndim; i++) count *= (size_t)shape[i];
    unsigned char *buf = malloc(header + count * es);
    buf[0] = buf[1] = 0;
    buf[2] = (unsigned char)type;
    buf[3] = (unsigned char)ndim;
    for (int i = 0; i < ndim; i++)
        for (int b = 0; b < 4; b++) buf[4 + 4 * i + b] = (unsigned char)(shape[i] >> (24 - 8 * b));
    const unsigned char *src = data;
    for (size_t i = 0; i < count; i++) /* big-endian elements */
        for (size_t b = 0; b < es; b++) buf[header + i * es + b] = src[i * es + es - 1 - b];
    if (gz) {
        gzFile f = gzopen(path, "wb");
        gzwrite(f, buf, (unsigned)(header + count * es));
        gzclose(f);
    } else {
        FILE *f = fopen(path, "wb");
        fwrite(buf, 1, header + count * es, f);
        fclose(f);
    }
    free(buf);
}

static void write_u8_labels(const char *name, bool gz, int64_t n, int classes, uint64_t salt) {
    uint8_t *l = malloc((size_t)n);
    for (int64_t i = 0; i < n; i++) l[i] = (uint8_t)((ct_rng_below(&rng, (uint64_t)classes) + salt) % (uint64_t)classes);
    l[n / 2] = (uint8_t)(classes - 1); /* max label + 1 = classes */
    write_idx(name, gz, 0x08, 1, (int64_t[]){n}, l);
    free(l);
}

static void write_u8_images(const char *name, bool gz, int64_t n) {
    uint8_t *p = malloc((size_t)n * 35);
    for (int64_t i = 0; i < n * 35; i++) p[i] = (uint8_t)ct_rng_below(&rng, 256);
    p[0] = 0;
    p[1] = 255;
    write_idx(name, gz, 0x08, 3, (int64_t[]){n, 5, 7}, p);
    free(p);
}

static void write_files(void) {
    N = 30 + (int64_t)ct_rng_below(&rng, 60);
    write_u8_images("u8.idx.gz", true, N);
    write_u8_images("u8.idx", false, N);
    write_u8_labels("lab.idx.gz", true, N, 7, 0);
    write_u8_labels("lab.idx", false, N, 7, 0);
    write_u8_labels("short_lab.idx", false, N - 1, 7, 0);
    float *f = malloc((size_t)N * 11 * sizeof *f);
    for (int64_t i = 0; i < N * 11; i++) f[i] = (float)(ct_rng_normal(&rng) * 3.0);
    write_idx("f32.idx.gz", true, 0x0D, 2, (int64_t[]){N, 11}, f);
    free(f);
    double *d = malloc((size_t)N * 24 * sizeof *d);
    for (int64_t i = 0; i < N * 24; i++) d[i] = ct_rng_normal(&rng) * 1e3;
    write_idx("f64.idx", false, 0x0E, 4, (int64_t[]){N, 3, 4, 2}, d);
    free(d);
    /* N x 512 random doubles (over 100 KB, hardly compressible): a cache larger than the limits of
     * the unwritable cases */
    d = malloc((size_t)N * 512 * sizeof *d);
    for (int64_t i = 0; i < N * 512; i++) d[i] = ct_rng_normal(&rng);
    write_idx("big.idx", false, 0x0E, 2, (int64_t[]){N, 512}, d);
    free(d);
    int32_t *q = malloc((size_t)N * 6 * sizeof *q);
    for (int64_t i = 0; i < N * 6; i++) q[i] = (int32_t)ct_rng_below(&rng, 1u << 21) - (1 << 20);
    write_idx("i32.idx.gz", true, 0x0C, 2, (int64_t[]){N, 6}, q);
    for (int64_t i = 0; i < N; i++) q[i] = (int32_t)ct_rng_below(&rng, 12);
    q[3] = 11;
    write_idx("i32_lab.idx", false, 0x0C, 1, (int64_t[]){N}, q);
    free(q);
    char sub[256];
    path_of(sub, sizeof sub, "fm");
    mkdir(sub, 0755);
    write_u8_images("fm/train-images-idx3-ubyte.gz", true, N);
    write_u8_labels("fm/train-labels-idx1-ubyte.gz", true, N, 10, 0);
    write_u8_images("fm/t10k-images-idx3-ubyte.gz", true, N / 2);
    write_u8_labels("fm/t10k-labels-idx1-ubyte.gz", true, N / 2, 10, 0);
    path_of(sub, sizeof sub, "a_dir");
    mkdir(sub, 0755);
}

static void remove_dir(const char *d) {
    DIR *dd = opendir(d);
    if (!dd) return;
    struct dirent *e;
    char p[512];
    while ((e = readdir(dd))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", d, e->d_name);
        struct stat st;
        if (stat(p, &st) == 0 && S_ISDIR(st.st_mode)) remove_dir(p);
        else unlink(p);
    }
    closedir(dd);
    rmdir(d);
}

/* Files in directory d whose names contain `part` ("": every entry but . and ..). */
static int count_files_in(const char *d, const char *part) {
    DIR *dd = opendir(d);
    int n = 0;
    struct dirent *e;
    while (dd && (e = readdir(dd)))
        if (strstr(e->d_name, part) && strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) n++;
    if (dd) closedir(dd);
    return n;
}

/* Files in the test directory whose names contain `part` (temporary build files: ".build-", ".tmp-"). */
static int count_files(const char *part) { return count_files_in(dir, part); }

static bool stat_of(const char *name, struct stat *st) {
    char p[256];
    path_of(p, sizeof p, name);
    return stat(p, st) == 0;
}

static bool exists(const char *name) {
    struct stat st;
    return stat_of(name, &st);
}

/* Sets a file's mtime to `base`'s mtime + delta seconds. */
static void set_mtime(const char *name, const struct stat *base, long delta) {
    char p[256];
    path_of(p, sizeof p, name);
    struct timespec ts[2] = {base->st_mtim, base->st_mtim};
    ts[0].tv_sec += delta;
    ts[1].tv_sec += delta;
    CT_ASSERT(utimensat(AT_FDCWD, p, ts, 0) == 0);
}

static bool same_file_version(const struct stat *a, const struct stat *b) {
    return a->st_ino == b->st_ino && a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

/* --- stderr capture (the "building" lines) -------------------------------------------------------- */

static int saved_fd = -1;

static void capture_begin(void) {
    char p[256];
    path_of(p, sizeof p, "stderr.txt");
    fflush(stderr);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    saved_fd = dup(2);
    dup2(fd, 2);
    close(fd);
}

/* What was written since capture_begin (malloc'd; also echoed to the real stderr). */
static char *capture_end(void) {
    fflush(stderr);
    dup2(saved_fd, 2);
    close(saved_fd);
    char p[256];
    path_of(p, sizeof p, "stderr.txt");
    FILE *f = fopen(p, "rb");
    char *buf = calloc(1, 65536);
    size_t n = fread(buf, 1, 65535, f);
    buf[n] = 0;
    fclose(f);
    fputs(buf, stderr);
    return buf;
}

static int count(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

/* --- opening and comparing ------------------------------------------------------------------------ */

static ct_status from(const char *text, ct_dataset **out) {
    json_error_t e;
    json_t *j = json_loads(text, 0, &e);
    if (!j) ct_abort_at(__FILE__, __LINE__, "bad test JSON %s: %s", text, e.text);
    ct_status s = ct_dataset_from_json(j, "data.train", dir, out);
    json_decref(j);
    return s;
}

static ct_dataset *open_ok(const char *text) {
    ct_dataset *ds = NULL;
    ct_status s = from(text, &ds);
    CHECK(s == CT_OK && ds, "%s: %s: %s", text, ct_status_str(s), ct_last_error());
    return s == CT_OK ? ds : NULL;
}

/* Opens `text`, capturing stderr; *lines gets the number of "building" lines. */
static ct_dataset *open_counting(const char *text, int *builds, char **out_log) {
    capture_begin();
    ct_dataset *ds = open_ok(text);
    char *log = capture_end();
    *builds = count(log, ": building ");
    if (out_log) *out_log = log;
    else free(log);
    return ds;
}

static bool same_shape(const ct_shape *a, const ct_shape *b) {
    if (a->ndim != b->ndim) return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->dims[i] != b->dims[i]) return false;
    return true;
}

/* Every sample of a and b, fetched in a random order, compared byte for byte; and their specs. */
static void same_samples(const char *label, ct_dataset *a, ct_dataset *b) {
    if (!a || !b) return;
    int64_t n = ct_dataset_length(a);
    CHECK(n == ct_dataset_length(b), "%s: lengths %lld and %lld", label, (long long)n, (long long)ct_dataset_length(b));
    if (n != ct_dataset_length(b)) return;
    const ct_sample_spec *x = &a->spec, *y = &b->spec;
    CHECK(same_shape(&x->feature_shape, &y->feature_shape) && same_shape(&x->label_shape, &y->label_shape) &&
              x->feature_dtype == y->feature_dtype && x->label_dtype == y->label_dtype &&
              x->num_classes == y->num_classes,
          "%s: specs differ (num_classes %lld and %lld)", label, (long long)x->num_classes, (long long)y->num_classes);
    int64_t *idx = malloc((size_t)n * sizeof *idx);
    for (int64_t i = 0; i < n; i++) idx[i] = i;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)ct_rng_below(&rng, (uint64_t)i + 1), t = idx[i];
        idx[i] = idx[j];
        idx[j] = t;
    }
    ct_tensor fa, la, fb, lb;
    CT_ASSERT(ct_dataset_alloc_batch(a, n, &fa, &la) == CT_OK && ct_dataset_alloc_batch(b, n, &fb, &lb) == CT_OK);
    ct_fetch_ctx ctx = {11, 0};
    CHECK_OK(ct_dataset_get_batch(a, idx, n, &ctx, &fa, &la));
    CHECK_OK(ct_dataset_get_batch(b, idx, n, &ctx, &fb, &lb));
    CHECK(memcmp(fa.data, fb.data, ct_tensor_nbytes(&fa)) == 0, "%s: features are not bit-identical", label);
    CHECK(memcmp(la.data, lb.data, ct_tensor_nbytes(&la)) == 0, "%s: labels are not bit-identical", label);
    /* Not all zero, not all alike: the comparison means something. */
    bool varied = false;
    for (int64_t i = 1; i < ct_tensor_numel(&fa) && !varied; i++) varied = ((float *)fa.data)[i] != ((float *)fa.data)[0];
    CHECK(varied, "%s: the features are all equal", label);
    ct_tensor_free(&fa);
    ct_tensor_free(&la);
    ct_tensor_free(&fb);
    ct_tensor_free(&lb);
    free(idx);
}

/* The spec `body` (the keys inside {...}) without a cache and with "cache": cache. */
static void compare(const char *label, const char *body, const char *cache, int want_builds) {
    char plain[1024], cached[1200];
    snprintf(plain, sizeof plain, "{%s}", body);
    snprintf(cached, sizeof cached, "{%s, \"cache\": \"%s\"}", body, cache);
    int builds;
    ct_dataset *a = open_ok(plain), *b = open_counting(cached, &builds, NULL);
    same_samples(label, a, b);
    if (want_builds >= 0)
        CHECK(builds == want_builds, "%s: %d \"building\" lines, expected %d", label, builds, want_builds);
    ct_dataset_free(a);
    ct_dataset_free(b);
}

/* The cache holds the record of its sources. */
static void check_record(const char *cache) {
    char p[256];
    path_of(p, sizeof p, cache);
    ct_h5_lock();
    hid_t f = H5Fopen(p, H5F_ACC_RDONLY, H5P_DEFAULT);
    char *rec = NULL;
    ct_status s = f < 0 ? CT_ERR_IO : ct_h5_read_string_attr(f, CT_DATASET_CACHE_ATTR, &rec);
    if (f >= 0) H5Fclose(f);
    ct_h5_unlock();
    CHECK(s == CT_OK && rec && strstr(rec, "images ") && strstr(rec, "labels "), "%s: no record of the sources", cache);
    free(rec);
}

/* --- tests -------------------------------------------------------------------------------------- */

static void test_identical(void) {
    char body[512];
    compare("u8 gz", "\"type\": \"idx\", \"images\": \"u8.idx.gz\", \"labels\": \"lab.idx.gz\"", "c_u8gz.h5", 1);
    check_record("c_u8gz.h5");
    compare("u8 raw", "\"type\": \"idx\", \"images\": \"u8.idx\", \"labels\": \"lab.idx\"", "c_u8.h5", 1);
    double scale = 0.001 + ct_rng_uniform(&rng) * 2;
    snprintf(body, sizeof body,
             "\"type\": \"idx\", \"images\": \"u8.idx.gz\", \"labels\": \"lab.idx.gz\", \"scale\": %.17g, "
             "\"num_classes\": 9",
             scale);
    compare("u8 scaled", body, "c_u8gz.h5", 0); /* the same sources: the cache of the first case */
    compare("f32", "\"type\": \"idx\", \"images\": \"f32.idx.gz\", \"labels\": \"lab.idx\"", "c_f32.h5", 1);
    snprintf(body, sizeof body, "\"type\": \"idx\", \"images\": \"f32.idx.gz\", \"labels\": \"lab.idx\", \"scale\": %.17g",
             0.01 + ct_rng_uniform(&rng) * 100);
    compare("f32 scaled", body, "c_f32.h5", 0);
    snprintf(body, sizeof body, "\"type\": \"idx\", \"images\": \"f64.idx\", \"labels\": \"lab.idx.gz\", \"scale\": %.17g",
             ct_rng_uniform(&rng) * 1e-3 + 1e-6);
    compare("f64 scaled", body, "c_f64.h5", 1);
    compare("f64", "\"type\": \"idx\", \"images\": \"f64.idx\", \"labels\": \"lab.idx.gz\"", "c_f64.h5", 0);
    snprintf(body, sizeof body,
             "\"type\": \"idx\", \"images\": \"i32.idx.gz\", \"labels\": \"i32_lab.idx\", \"scale\": %.17g",
             ct_rng_uniform(&rng) + 0.01);
    compare("i32 scaled, i32 labels", body, "c_i32.h5", 1);
    compare("limit and transforms",
            "\"type\": \"idx\", \"images\": \"u8.idx.gz\", \"labels\": \"lab.idx.gz\", \"limit\": 17, "
            "\"transforms\": [{\"type\": \"normalize\", \"mean\": [0.3], \"std\": [0.7]}]",
            "c_u8gz.h5", 0);
    /* Absolute paths and a cache in a subdirectory. */
    snprintf(body, sizeof body, "\"type\": \"idx\", \"images\": \"%s/u8.idx\", \"labels\": \"%s/lab.idx\"", dir, dir);
    char cache[256];
    snprintf(cache, sizeof cache, "%s/a_dir/abs.h5", dir);
    compare("absolute paths", body, cache, 1);
    CHECK(exists("a_dir/abs.h5"), "the absolute cache path was not used");
    /* Missing directories on the way to the cache are made, as output_dir's are. */
    compare("cache in new directories", "\"type\": \"idx\", \"images\": \"u8.idx\", \"labels\": \"lab.idx\"",
            "new_dir/deeper/c.h5", 1);
    CHECK(exists("new_dir/deeper/c.h5"), "the cache's directories were not made");
    CHECK(count_files(".build-") == 0 && count_files(".tmp-") == 0, "temporary files left behind");
}

static void test_fashion_mnist(void) {
    compare("fashion_mnist train", "\"type\": \"fashion_mnist\", \"dir\": \"fm\"", "fm_train.h5", 1);
    compare("fashion_mnist test", "\"type\": \"fashion_mnist\", \"dir\": \"fm\", \"split\": \"test\"", "fm_test.h5", 1);
    compare("fashion_mnist again", "\"type\": \"fashion_mnist\", \"dir\": \"fm\", \"split\": \"test\"", "fm_test.h5", 0);
    if (access(FMNIST "/t10k-images-idx3-ubyte.gz", R_OK) == 0) {
        compare("real Fashion-MNIST test split", "\"type\": \"fashion_mnist\", \"split\": \"test\"", "real_t10k.h5", 1);
        ct_dataset *ds = open_ok("{\"type\": \"fashion_mnist\", \"split\": \"test\", \"cache\": \"real_t10k.h5\"}");
        CHECK(ds && ct_dataset_length(ds) == 10000 && ds->spec.num_classes == 10, "real test split through the cache");
        ct_dataset_free(ds);
    } else {
        printf("(the real Fashion-MNIST is not installed at %s: not compared)\n", FMNIST);
    }
}

static const char *const REUSE = "{\"type\": \"idx\", \"images\": \"r_img.idx\", \"labels\": \"r_lab.idx.gz\", \"cache\": \"r.h5\"}";
static const char *const REUSE_PLAIN = "{\"type\": \"idx\", \"images\": \"r_img.idx\", \"labels\": \"r_lab.idx.gz\"}";

static void compare_reuse(const char *label, int want_builds, const char *reason) {
    int builds;
    char *log;
    ct_dataset *b = open_counting(REUSE, &builds, &log), *a = open_ok(REUSE_PLAIN);
    CHECK(builds == want_builds, "%s: %d \"building\" lines, expected %d", label, builds, want_builds);
    if (reason) CHECK(strstr(log, reason) != NULL, "%s: the log does not say '%s': %s", label, reason, log);
    same_samples(label, a, b);
    ct_dataset_free(a);
    ct_dataset_free(b);
    free(log);
}

static void test_reuse_and_rebuild(void) {
    write_u8_images("r_img.idx", false, N);
    write_u8_labels("r_lab.idx.gz", true, N, 5, 0);
    compare_reuse("first open", 1, "(it does not exist yet)");
    struct stat s1, s2;
    CT_ASSERT(stat_of("r.h5", &s1));
    /* Fresh: used as it is, not rewritten. Sources with mtimes well in the past make "fresh" not a
     * matter of the clock's resolution. */
    set_mtime("r_img.idx", &s1, -100);
    set_mtime("r_lab.idx.gz", &s1, -100);
    compare_reuse("records differ after touching the sources", 1, "built from other files");
    CT_ASSERT(stat_of("r.h5", &s1));
    compare_reuse("fresh", 0, NULL);
    CT_ASSERT(stat_of("r.h5", &s2));
    CHECK(same_file_version(&s1, &s2), "a fresh cache was rewritten (inode or mtime changed)");
    compare_reuse("fresh again", 0, NULL);

    /* A source newer than the cache. */
    set_mtime("r_lab.idx.gz", &s2, 5);
    compare_reuse("a newer source", 1, "built from other files");
    CT_ASSERT(stat_of("r.h5", &s1));
    CHECK(!same_file_version(&s1, &s2), "the cache was not replaced");
    /* ... whose mtime is in the future (clock skew on a shared file system): rebuilt once, not on
     * every start, although the cache stays older than it. */
    set_mtime("r_lab.idx.gz", &s1, 3600);
    compare_reuse("a source from the future", 1, "built from other files");
    compare_reuse("a source from the future, again", 0, NULL);
    /* The cache's own mtime does not matter; only the sources' as recorded. */
    set_mtime("r.h5", &s1, -7200);
    compare_reuse("cache with an old mtime", 0, NULL);

    /* New content under an older mtime (say, cp -p of an older version): the record tells. */
    CT_ASSERT(stat_of("r.h5", &s1));
    write_u8_labels("r_lab.idx.gz", true, N, 5, 3);
    set_mtime("r_lab.idx.gz", &s1, -3600);
    compare_reuse("replaced by an older file", 1, "built from other files");
    compare_reuse("and then fresh", 0, NULL);

    /* Another spec whose cache is the same path: each gets its own data (the cache is rebuilt for
     * each in turn rather than giving one the other's samples). */
    for (int round = 0; round < 2; round++) {
        compare("other sources at the same path",
                "\"type\": \"idx\", \"images\": \"u8.idx\", \"labels\": \"lab.idx\"", "r.h5", 1);
        compare_reuse("back to the first sources", 1, "built from other files");
    }
    CHECK(count_files(".build-") == 0 && count_files(".tmp-") == 0, "temporary files left behind");
}

/* Opens the cache for writing and applies `damage`. */
static void damage(const char *name, int how) {
    char p[256];
    path_of(p, sizeof p, name);
    ct_h5_lock();
    hid_t f = H5Fopen(p, H5F_ACC_RDWR, H5P_DEFAULT);
    CT_ASSERT(f >= 0);
    if (how == 0) CT_ASSERT(H5Ldelete(f, "features", H5P_DEFAULT) >= 0);
    else CT_ASSERT(H5Adelete_by_name(f, "labels", "num_classes", H5P_DEFAULT) >= 0);
    H5Fclose(f);
    ct_h5_unlock();
}

static void test_damaged(void) {
    compare_reuse("before damage", 0, NULL);
    damage("r.h5", 0); /* a dataset gone: the record is there, but it does not open */
    compare_reuse("without features", 1, "cannot be read");
    compare_reuse("repaired", 0, NULL);
    damage("r.h5", 1); /* the labels' num_classes attribute gone */
    compare_reuse("without num_classes", 1, "damaged");
    compare_reuse("repaired again", 0, NULL);
}

/* A file that is not ctrainer's cache: an error naming the key and the file, and the file as it was. */
static void check_not_ours(const char *label, const char *name, const char *what) {
    struct stat before, after;
    CT_ASSERT(stat_of(name, &before));
    char spec[512], p[256];
    path_of(p, sizeof p, name);
    snprintf(spec, sizeof spec, "{\"type\": \"idx\", \"images\": \"u8.idx\", \"labels\": \"lab.idx\", \"cache\": \"%s\"}",
             name);
    ct_dataset *ds = NULL;
    CHECK_ERR(from(spec, &ds), CT_ERR_FORMAT, "data.train.cache: ", p, "not a dataset cache written by ctrainer", what,
              "delete it or choose another path");
    CHECK(!ds, "%s: a dataset came back", label);
    CT_ASSERT(stat_of(name, &after));
    CHECK(same_file_version(&before, &after) && before.st_size == after.st_size, "%s: the file was touched", label);
}

static void test_not_ours(void) {
    char p[256];
    path_of(p, sizeof p, "notes.h5");
    FILE *f = fopen(p, "w");
    fputs("my precious notes\n", f);
    fclose(f);
    check_not_ours("a text file", "notes.h5", "not a readable HDF5 file");
    /* `ctrainer data convert`'s output: HDF5, but without the record. */
    char img[256], lab[256];
    path_of(img, sizeof img, "u8.idx");
    path_of(lab, sizeof lab, "lab.idx");
    path_of(p, sizeof p, "converted.h5");
    CHECK_OK(ct_convert_idx_to_hdf5(img, lab, p, 0, -1));
    check_not_ours("an HDF5 file without the record", "converted.h5", "without the 'ctrainer_cache_of' attribute");
    /* An IDX source given as the cache by mistake (a typo): never overwritten. */
    check_not_ours("a gzip'd IDX file", "lab.idx.gz", "not a readable HDF5 file");
}

/* The same status and message with and without a cache, and no cache file written. */
static void same_error(const char *label, const char *body, const char *cache) {
    char plain[1024], cached[1200];
    snprintf(plain, sizeof plain, "{%s}", body);
    snprintf(cached, sizeof cached, "{%s, \"cache\": \"%s\"}", body, cache);
    ct_dataset *ds = NULL;
    ct_status a = from(plain, &ds);
    char msg[2048];
    snprintf(msg, sizeof msg, "%s", ct_last_error());
    ct_status b = from(cached, &ds);
    CHECK(a != CT_OK && a == b && strcmp(msg, ct_last_error()) == 0,
          "%s: without a cache %s '%s', with one %s '%s'", label, ct_status_str(a), msg, ct_status_str(b),
          ct_last_error());
    CHECK(!exists(cache), "%s: the cache %s was written", label, cache);
}

static void test_errors(void) {
    ct_dataset *ds = NULL;
    const char *u8 = "\"type\": \"idx\", \"images\": \"u8.idx\", \"labels\": \"lab.idx\"";
    char spec[1024], p[256];
    snprintf(spec, sizeof spec, "{%s, \"cache\": \"u8.idx\"}", u8);
    CHECK_ERR(from(spec, &ds), CT_ERR_CONFIG, "data.train.cache: ", "is the same file as the source");
    snprintf(spec, sizeof spec, "{%s, \"cache\": \"a_dir\"}", u8);
    CHECK_ERR(from(spec, &ds), CT_ERR_IO, "data.train.cache: ", "a_dir: is a directory");
    snprintf(spec, sizeof spec, "{%s, \"cache\": \"\"}", u8);
    CHECK_ERR(from(spec, &ds), CT_ERR_CONFIG, "data.train.cache: expected a file path");
    snprintf(spec, sizeof spec, "{%s, \"cache\": 3}", u8);
    CHECK_ERR(from(spec, &ds), CT_ERR_CONFIG, "data.train.cache");
    snprintf(spec, sizeof spec, "{%s, \"cahce\": \"c.h5\"}", u8);
    CHECK_ERR(from(spec, &ds), CT_ERR_CONFIG, "data.train", "cahce", "cache");
    CHECK_ERR(from("{\"type\": \"fashion_mnist\", \"dir\": \"fm\", \"cache\": \"\"}", &ds), CT_ERR_CONFIG,
              "data.train.cache: expected a file path");
    snprintf(spec, sizeof spec, "{%s, \"scale\": 1e-50, \"cache\": \"tiny.h5\"}", u8);
    CHECK_ERR(from(spec, &ds), CT_ERR_CONFIG, "data.train", "scale 1e-50 is 0 in float32");
    CHECK(!exists("tiny.h5"), "a cache was written for a refused scale");
    CHECK(!ds, "a dataset came back from a failing spec");

    /* The sources' own errors: exactly the messages without a cache, and nothing written. */
    same_error("missing images", "\"type\": \"idx\", \"images\": \"nope.idx.gz\", \"labels\": \"lab.idx\"", "e1.h5");
    same_error("missing labels", "\"type\": \"idx\", \"images\": \"u8.idx\", \"labels\": \"nope.idx\"", "e2.h5");
    same_error("short labels", "\"type\": \"idx\", \"images\": \"u8.idx\", \"labels\": \"short_lab.idx\"", "e3.h5");
    same_error("not IDX", "\"type\": \"idx\", \"images\": \"u8.idx\", \"labels\": \"notes.h5\"", "e4.h5");
    same_error("labels outside num_classes",
               "\"type\": \"idx\", \"images\": \"u8.idx\", \"labels\": \"lab.idx\", \"num_classes\": 3", "e5.h5");
    same_error("fashion_mnist without files", "\"type\": \"fashion_mnist\", \"dir\": \"a_dir\"", "e6.h5");
    /* num_classes too small for a cache that exists and is fresh: it knows the largest label. */
    snprintf(spec, sizeof spec, "{%s, \"num_classes\": 3, \"cache\": \"c_u8.h5\"}", u8);
    path_of(p, sizeof p, "lab.idx");
    CHECK_ERR(from(spec, &ds), CT_ERR_FORMAT, "data.train.labels: ", p, "label 6 is outside [0, 3)");
    /* A cache that cannot be read (permissions; root reads everything). */
    if (geteuid() != 0) {
        path_of(p, sizeof p, "c_u8.h5");
        chmod(p, 0);
        snprintf(spec, sizeof spec, "{%s, \"cache\": \"c_u8.h5\"}", u8);
        CHECK_ERR(from(spec, &ds), CT_ERR_IO, "data.train.cache: ", p, "cannot read the cache");
        chmod(p, 0644);
    }
}

/* --- a cache that cannot be written ----------------------------------------------------------------- */

/* The idx spec of `images` (and lab.idx) with "cache": cache (relative to the test directory) opens
 * with a warning naming the cache and `why` (errno's text), gives the sources' samples, and leaves
 * nothing in `left` (a directory that must be empty or gone afterwards; NULL: no temporary files in
 * the test directory). */
static void unwritable(const char *label, const char *images, const char *cache, const char *why, const char *left) {
    char spec[1024], p[512], plain[512];
    snprintf(plain, sizeof plain, "\"type\": \"idx\", \"images\": \"%s\", \"labels\": \"lab.idx\"", images);
    snprintf(spec, sizeof spec, "{%s, \"cache\": \"%s\"}", plain, cache);
    path_of(p, sizeof p, cache);
    capture_begin();
    ct_dataset *b = open_ok(spec);
    char *log = capture_end();
    CHECK(strstr(log, "warning: data.train.cache: the cache ") && strstr(log, p) && strstr(log, why) &&
              strstr(log, "cannot be written") && strstr(log, "reading "),
          "%s: no warning naming %s and '%s': %s", label, p, why, log);
    free(log);
    snprintf(spec, sizeof spec, "{%s}", plain);
    ct_dataset *a = open_ok(spec);
    same_samples(label, a, b);
    ct_dataset_free(a);
    ct_dataset_free(b);
    CHECK(!exists(cache), "%s: %s exists", label, cache);
    CHECK(count_files(".tmp-") == 0 && count_files(".build-") == 0, "%s: temporary files left behind", label);
    if (left) CHECK(count_files_in(left, "") == 0, "%s: %s is not empty", label, left);
}

/* A private mount namespace (root, else a user namespace mapping this user to root): false when
 * neither is allowed here. */
static bool private_mounts(void) {
    if (unshare(CLONE_NEWNS) != 0) {
        uid_t uid = getuid();
        gid_t gid = getgid();
        if (unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) return false;
        char map[64], path[64];
        const char *files[3] = {"/proc/self/setgroups", "/proc/self/uid_map", "/proc/self/gid_map"};
        for (int i = 0; i < 3; i++) {
            snprintf(path, sizeof path, "%s", files[i]);
            if (i == 0) snprintf(map, sizeof map, "deny");
            else snprintf(map, sizeof map, "0 %u 1", i == 1 ? (unsigned)uid : (unsigned)gid);
            int fd = open(path, O_WRONLY);
            bool ok = fd >= 0 && write(fd, map, strlen(map)) == (ssize_t)strlen(map);
            if (fd >= 0) close(fd);
            if (!ok && i > 0) return false;
        }
    }
    return mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0;
}

/* A full tmpfs (ENOSPC) and a read-only one (EROFS), in a child with mounts of its own. */
static int tmpfs_child(void) {
    if (!private_mounts()) {
        printf("skipped: tmpfs: no mount namespace here (%s)\n", strerror(errno));
        return 77;
    }
    char fs[256];
    path_of(fs, sizeof fs, "fs");
    mkdir(fs, 0755);
    /* four pages: the cache's directory fits, its file of big.idx does not */
    if (mount("tmpfs", fs, "tmpfs", 0, "size=16384") != 0) {
        printf("skipped: tmpfs: mount: %s\n", strerror(errno));
        return 77;
    }
    unwritable("full tmpfs", "big.idx", "fs/sub/c.h5", "No space left on device", fs);
    if (mount("tmpfs", fs, "tmpfs", MS_REMOUNT | MS_RDONLY, "size=16384") != 0) {
        printf("skipped: read-only tmpfs: remount: %s\n", strerror(errno));
    } else {
        unwritable("read-only tmpfs", "f64.idx", "fs/c.h5", "Read-only file system", fs);
        unwritable("read-only tmpfs, a directory to make", "f64.idx", "fs/sub/c.h5", "Read-only file system", fs);
    }
    umount(fs);
    rmdir(fs);
    fflush(NULL);
    return ct_test_failed ? 1 : 0;
}

static void test_unwritable(void) {
    /* a file stands where a directory of its path should be */
    unwritable("a file in the path", "f64.idx", "lab.idx/dir/c.h5", "Not a directory", NULL);
    /* a file size limit below the cache's size (SIGXFSZ ignored: write() fails with EFBIG); the
     * directories made for it are removed again */
    struct rlimit old, lim;
    CT_ASSERT(getrlimit(RLIMIT_FSIZE, &old) == 0);
    lim = (struct rlimit){.rlim_cur = 16384, .rlim_max = old.rlim_max};
    if (old.rlim_max == RLIM_INFINITY || old.rlim_max >= lim.rlim_cur) {
        void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
        CT_ASSERT(setrlimit(RLIMIT_FSIZE, &lim) == 0);
        unwritable("a file size limit", "big.idx", "made/for/it/c.h5", "File too large", NULL);
        CT_ASSERT(setrlimit(RLIMIT_FSIZE, &old) == 0);
        signal(SIGXFSZ, prev);
        CHECK(!exists("made"), "the directories made for a cache that failed are left");
    }
    /* a quota, from the fault hook every write of the cache passes (core/io_fault.h): the first
     * write fails, and so does every later one */
    ct_io_fault_arm((int64_t)ct_rng_below(&rng, 60000), -1, EDQUOT);
    unwritable("a quota", "big.idx", "quota/c.h5", "Disk quota exceeded", NULL);
    CHECK(ct_io_fault_count() > 0, "the fault hook saw no write of the cache");
    ct_io_fault_disarm();
    CHECK(!exists("quota"), "the directory made for a cache that failed is left");
    /* no permission to write (root writes everywhere) */
    if (geteuid() != 0) {
        char p[256];
        path_of(p, sizeof p, "locked");
        mkdir(p, 0555);
        unwritable("a directory without write permission", "f64.idx", "locked/c.h5", "Permission denied", p);
        rmdir(p);
    }
    fflush(NULL);
    pid_t kid = fork();
    CT_ASSERT(kid >= 0);
    if (kid == 0) _exit(tmpfs_child());
    int st = 0;
    waitpid(kid, &st, 0);
    CHECK(WIFEXITED(st) && (WEXITSTATUS(st) == 0 || WEXITSTATUS(st) == 77), "the tmpfs cases failed (status %d)", st);
}

/* Processes building the same missing cache at once, as nodes on a shared file system may. */
static void test_concurrent(void) {
    const char *spec = "{\"type\": \"idx\", \"images\": \"f64.idx\", \"labels\": \"lab.idx\", \"cache\": \"conc.h5\"}";
    const char *plain = "{\"type\": \"idx\", \"images\": \"f64.idx\", \"labels\": \"lab.idx\"}";
    enum { K = 4 };
    pid_t kids[K];
    fflush(NULL);
    for (int k = 0; k < K; k++) {
        kids[k] = fork();
        CT_ASSERT(kids[k] >= 0);
        if (kids[k] == 0) {
            ct_test_failed = 0;
            ct_dataset *a = open_ok(plain), *b = open_ok(spec);
            same_samples("concurrent build", a, b);
            ct_dataset_free(a);
            ct_dataset_free(b);
            fflush(NULL);
            _exit(ct_test_failed ? 1 : 0);
        }
    }
    for (int k = 0; k < K; k++) {
        int st = 0;
        waitpid(kids[k], &st, 0);
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "process %d of %d building the same cache failed", k, K);
    }
    CHECK(count_files(".build-") == 0 && count_files(".tmp-") == 0, "temporary files left behind");
    int builds;
    ct_dataset *b = open_counting(spec, &builds, NULL), *a = open_ok(plain);
    CHECK(builds == 0, "the cache built by concurrent processes is rebuilt (%d)", builds);
    same_samples("after the concurrent build", a, b);
    ct_dataset_free(a);
    ct_dataset_free(b);
}

int main(void) {
    ct_test_begin("test_dataset_cache");
    ct_log_set_level(CT_LOG_LEVEL_INFO); /* the "building" lines are info lines */
    ct_rng_init(&rng, ct_test_seed, 0, 0);
    snprintf(dir, sizeof dir, "/tmp/ct_cache_XXXXXX");
    CT_ASSERT(mkdtemp(dir));
    write_files();
    test_identical();
    test_fashion_mnist();
    test_reuse_and_rebuild();
    test_damaged();
    test_not_ours();
    test_errors();
    test_unwritable();
    test_concurrent();
    remove_dir(dir);
    return ct_test_finish();
}
