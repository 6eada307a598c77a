/* The fuzz targets' shared helpers (see fuzz_common.h). */
#define _GNU_SOURCE
#include "common.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/format/h5io.h"
#include "core/log.h"

#ifdef _OPENMP
#include <omp.h>
#endif

uint8_t fz_u8(fz_input *in) {
    if (in->n == 0) return 0;
    in->n--;
    return *in->p++;
}

uint16_t fz_u16(fz_input *in) { return (uint16_t)(fz_u8(in) | (uint16_t)fz_u8(in) << 8); }

uint32_t fz_u32(fz_input *in) { return (uint32_t)fz_u16(in) | (uint32_t)fz_u16(in) << 16; }

uint64_t fz_u64(fz_input *in) { return (uint64_t)fz_u32(in) | (uint64_t)fz_u32(in) << 32; }

bool fz_bool(fz_input *in) { return fz_u8(in) & 1; }

int64_t fz_range(fz_input *in, int64_t lo, int64_t hi) {
    if (hi <= lo) return lo;
    uint64_t span = (uint64_t)hi - (uint64_t)lo, v;
    /* as many bytes as the span needs, so small ranges cost one byte of input */
    if (span < 0x100) v = fz_u8(in);
    else if (span < 0x10000) v = fz_u16(in);
    else if (span < 0x100000000ull) v = fz_u32(in);
    else v = fz_u64(in);
    if (span != UINT64_MAX) v %= span + 1;
    return (int64_t)((uint64_t)lo + v);
}

int fz_pick(fz_input *in, int n) { return (int)fz_range(in, 0, n - 1); }

double fz_f64(fz_input *in) {
    uint64_t bits = fz_u64(in);
    double d;
    memcpy(&d, &bits, sizeof d);
    return d;
}

const uint8_t *fz_bytes(fz_input *in, size_t max, size_t *len) {
    size_t want = (size_t)fz_range(in, 0, (int64_t)max);
    if (want > in->n) want = in->n;
    const uint8_t *p = in->p;
    in->p += want;
    in->n -= want;
    *len = want;
    return p;
}

const uint8_t *fz_rest(fz_input *in, size_t *len) {
    const uint8_t *p = in->p;
    *len = in->n;
    in->p += in->n;
    in->n = 0;
    return p;
}

/* --- encoding seeds ------------------------------------------------------------------------------ */

void fzo_raw(fz_output *o, const void *data, size_t len) {
    if (o->n + len > o->cap) {
        size_t cap = o->cap ? o->cap : 256;
        while (cap < o->n + len) cap *= 2;
        uint8_t *p = realloc(o->p, cap);
        if (!p) abort();
        o->p = p;
        o->cap = cap;
    }
    if (len) memcpy(o->p + o->n, data, len);
    o->n += len;
}

void fzo_u8(fz_output *o, uint8_t v) { fzo_raw(o, &v, 1); }
void fzo_u16(fz_output *o, uint16_t v) { fzo_u8(o, (uint8_t)v), fzo_u8(o, (uint8_t)(v >> 8)); }
void fzo_u32(fz_output *o, uint32_t v) { fzo_u16(o, (uint16_t)v), fzo_u16(o, (uint16_t)(v >> 16)); }
void fzo_u64(fz_output *o, uint64_t v) { fzo_u32(o, (uint32_t)v), fzo_u32(o, (uint32_t)(v >> 32)); }

void fzo_range(fz_output *o, int64_t lo, int64_t hi, int64_t v) {
    if (hi <= lo) return;
    if (v < lo || v > hi) abort();
    uint64_t span = (uint64_t)hi - (uint64_t)lo, d = (uint64_t)v - (uint64_t)lo;
    if (span < 0x100) fzo_u8(o, (uint8_t)d);
    else if (span < 0x10000) fzo_u16(o, (uint16_t)d);
    else if (span < 0x100000000ull) fzo_u32(o, (uint32_t)d);
    else fzo_u64(o, d);
}

void fzo_bytes(fz_output *o, size_t max, const void *data, size_t len) {
    if (len > max) abort();
    fzo_range(o, 0, (int64_t)max, (int64_t)len);
    fzo_raw(o, data, len);
}

void fzo_free(fz_output *o) {
    free(o->p);
    memset(o, 0, sizeof *o);
}

bool fz_writing_seeds(void) {
    const char *dir = getenv("CT_FUZZ_WRITE_SEEDS");
    return dir && dir[0];
}

void fz_seed(const char *name, const void *data, size_t n) {
    if (!fz_writing_seeds()) return;
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", getenv("CT_FUZZ_WRITE_SEEDS"), name);
    fz_write_file(path, data, n);
}

uint8_t *fz_read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "fuzz: cannot read %s: %s\n", path, strerror(errno));
        abort();
    }
    size_t cap = 4096, len = 0;
    uint8_t *buf = malloc(cap);
    for (size_t got; buf && (got = fread(buf + len, 1, cap - len, f)) > 0;) {
        len += got;
        if (len == cap) buf = realloc(buf, cap *= 2);
    }
    fclose(f);
    if (!buf) abort();
    *n = len;
    return buf;
}

/* --- the temporary directory ---------------------------------------------------------------------- */

static char tmpdir[256];

static void remove_contents(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char path[512];
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (e->d_type == DT_DIR) {
            remove_contents(path);
            rmdir(path);
        } else {
            unlink(path);
        }
    }
    closedir(d);
}

static void remove_tmpdir(void) {
    if (!tmpdir[0]) return;
    remove_contents(tmpdir);
    rmdir(tmpdir);
}

const char *fz_tmpdir(void) {
    if (tmpdir[0]) return tmpdir;
    const char *base = getenv("CT_FUZZ_TMPDIR");
    if (!base || !base[0]) base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("TMPDIR");
    if (!base || !base[0]) base = "/tmp";
    snprintf(tmpdir, sizeof tmpdir, "%s/ctrainer-fuzz-XXXXXX", base);
    if (!mkdtemp(tmpdir)) {
        fprintf(stderr, "fuzz: cannot make a temporary directory under %s: %s\n", base, strerror(errno));
        abort();
    }
    atexit(remove_tmpdir);
    return tmpdir;
}

const char *fz_path(char *buf, size_t cap, const char *name) {
    int n = snprintf(buf, cap, "%s/%s", fz_tmpdir(), name);
    if (n < 0 || (size_t)n >= cap) {
        fprintf(stderr, "fuzz: path too long: %s/%s\n", fz_tmpdir(), name);
        abort();
    }
    return buf;
}

void fz_write_file(const char *path, const void *data, size_t n) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    const char *p = data;
    while (fd >= 0 && n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) break;
        p += w;
        n -= (size_t)w;
    }
    if (fd < 0 || n > 0 || close(fd) != 0) {
        fprintf(stderr, "fuzz: cannot write %s: %s\n", path, strerror(errno));
        abort();
    }
}

void fz_clean_tmpdir(void) { remove_contents(fz_tmpdir()); }

void fz_remove_tree(const char *dir) {
    remove_contents(dir);
    rmdir(dir);
}

/* --- HDF5 handles ---------------------------------------------------------------------------------- */

static const struct {
    H5I_type_t type;
    const char *name;
} h5_kinds[] = {{H5I_FILE, "file"},           {H5I_GROUP, "group"},         {H5I_DATATYPE, "datatype"},
                {H5I_DATASPACE, "dataspace"}, {H5I_DATASET, "dataset"},     {H5I_ATTR, "attribute"},
                {H5I_GENPROP_LST, "property list"}};
#define N_H5_KINDS (sizeof h5_kinds / sizeof h5_kinds[0])
static hsize_t h5_baseline[N_H5_KINDS];

static void h5_counts(hsize_t *out) {
    for (size_t i = 0; i < N_H5_KINDS; i++) {
        out[i] = 0;
        if (H5Inmembers(h5_kinds[i].type, &out[i]) < 0) out[i] = 0;
    }
}

void fz_h5_mark_handles(void) {
    ct_h5_lock();
    h5_counts(h5_baseline);
    ct_h5_unlock();
}

void fz_h5_check_handles(void) {
    hsize_t now[N_H5_KINDS];
    ct_h5_lock();
    h5_counts(now);
    ct_h5_unlock();
    for (size_t i = 0; i < N_H5_KINDS; i++)
        if (now[i] > h5_baseline[i]) {
            fprintf(stderr, "fuzz: %llu HDF5 %s handle(s) left open by this input (%llu before it)\n",
                    (unsigned long long)(now[i] - h5_baseline[i]), h5_kinds[i].name,
                    (unsigned long long)h5_baseline[i]);
            abort();
        }
}

/* --- set-up -------------------------------------------------------------------------------------- */

void fz_init(void) {
    static bool done;
    if (done) return;
    done = true;
    ct_log_set_level(CT_LOG_LEVEL_CRITICAL + 1);
#ifdef _OPENMP
    omp_set_num_threads(1);
#endif
    setenv("OPENBLAS_NUM_THREADS", "1", 0);
    ct_h5_lock();
    ct_h5_quiet();
    ct_h5_unlock();
    fz_h5_mark_handles();
    fz_tmpdir();
}

ct_status fz_report(const char *what, ct_status s) {
    static int verbose = -1;
    if (verbose < 0) verbose = getenv("CT_FUZZ_VERBOSE") != NULL;
    if (verbose && s == CT_OK) fprintf(stderr, "fuzz: %s: ok\n", what);
    if (verbose && s != CT_OK) fprintf(stderr, "fuzz: %s: %s: %s\n", what, ct_status_str(s), ct_last_error());
    return s;
}

void fz_check(ct_status s, const char *what) {
    if (s == CT_OK) return;
    fprintf(stderr, "fuzz: %s failed: %s: %s\n", what, ct_status_str(s), ct_last_error());
    abort();
}
