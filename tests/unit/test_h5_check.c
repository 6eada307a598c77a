/* The check before every H5Dread (core/format/h5_check.h) and the format ctrainer writes HDF5 in
 * (ct_h5_file_create):
 *  - files in HDF5's older format (h5py's default, no metadata checksums) whose dataset header lies,
 *    made by patching the bytes libhdf5 wrote: a chunk dimension larger than the dataset's fixed one
 *    (the flip that made H5Dread copy out of bounds), a contiguous block past the end of the file
 *    and a stored size that disagrees with the shape; each refused by every reader (the HDF5 data
 *    set, tensors read as model.h5 reads them, the check itself) with a message naming the
 *    dataset and what is wrong, before anything is read;
 *  - headers libhdf5 writes but ctrainer does not read: a float that is not IEEE, external
 *    storage (raw data in another file named by this one), a filter other than deflate, shuffle
 *    and Fletcher-32;
 *  - well-formed files of both formats pass and read back;
 *  - the format ctrainer writes: one byte flipped in a dataset's header is refused by libhdf5's
 *    checksum, the message saying so, instead of being decoded. */
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/format/h5_check.h"
#include "core/format/h5io.h"
#include "core/fs.h"
#include "data/dataset.h"
#include "testlib.h"

static char tmpdir[64];

static const char *tmp_path(char *buf, size_t cap, const char *name) {
    snprintf(buf, cap, "%s/%s", tmpdir, name);
    return buf;
}

/* Replaces the one occurrence of `from` in the file by `to` (the same length); false when the bytes
 * are not there exactly once (libhdf5 laid the file out otherwise: the test then says so). */
static bool patch(const char *path, const void *from, const void *to, size_t len) {
    size_t n;
    uint8_t *b = (uint8_t *)ct_test_read_file(path, &n);
    if (!b) return false;
    size_t found = 0, at = 0;
    for (size_t i = 0; i + len <= n; i++)
        if (memcmp(b + i, from, len) == 0) found++, at = i;
    if (found == 1) {
        memcpy(b + at, to, len);
        FILE *f = fopen(path, "wb");
        found = f && fwrite(b, 1, n, f) == n ? 1 : 0;
        if (f) fclose(f);
    }
    free(b);
    return found == 1;
}

static void put_u32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put_u64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* A data file in the older format: features [300, 3] f32 in chunks of [64, 3] (or contiguous),
 * labels [300] i64, with the given dataset creation list for the features. */
static void write_data(const char *path, bool chunked, hid_t type, hid_t dcpl_in) {
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hsize_t fd[2] = {300, 3}, ld[1] = {300}, chunk[2] = {64, 3};
    float x[900];
    int64_t y[300];
    for (int i = 0; i < 900; i++) x[i] = (float)i / 7.0f;
    for (int i = 0; i < 300; i++) y[i] = i % 3;
    hid_t dcpl = dcpl_in >= 0 ? H5Pcopy(dcpl_in) : H5Pcreate(H5P_DATASET_CREATE);
    if (chunked) H5Pset_chunk(dcpl, 2, chunk);
    hid_t fs = H5Screate_simple(2, fd, NULL), ls = H5Screate_simple(1, ld, NULL);
    hid_t a = H5Dcreate2(f, "features", type, fs, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    hid_t b = H5Dcreate2(f, "labels", H5T_STD_I64LE, ls, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    CHECK(a >= 0 && b >= 0, "cannot create the datasets of %s", path);
    CHECK(H5Dwrite(a, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, x) >= 0, "cannot write %s", path);
    CHECK(H5Dwrite(b, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, y) >= 0, "cannot write %s", path);
    H5Dclose(a);
    H5Dclose(b);
    H5Sclose(fs);
    H5Sclose(ls);
    H5Pclose(dcpl);
    H5Fclose(f);
}

/* The three readers on a file: the HDF5 data set (open and every sample), the features as a tensor
 * (model.h5's reader), and the check itself. Each must answer want (CT_OK or the error with the
 * given part of its message). */
static void expect_readers(const char *path, ct_status want, const char *msg) {
    ct_hdf5_dataset_config cfg = {.path = path};
    ct_dataset *ds = NULL;
    ct_status s = ct_hdf5_dataset_create(&cfg, &ds);
    if (ds) {
        ct_tensor x, y;
        int64_t idx[300];
        for (int i = 0; i < 300; i++) idx[i] = i;
        ct_fetch_ctx ctx = {0};
        if (ct_dataset_alloc_batch(ds, 300, &x, &y) == CT_OK) {
            s = ct_dataset_get_batch(ds, idx, 300, &ctx, &x, &y);
            ct_tensor_free(&x);
            ct_tensor_free(&y);
        }
        ct_dataset_free(ds);
    }
    if (want == CT_OK) CHECK(s == CT_OK, "%s as a data set: %s", path, ct_last_error());
    else CHECK_ERR(s, want, path, "dataset 'features'", msg);

    ct_h5_lock();
    ct_h5_quiet();
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    CHECK(f >= 0, "%s: libhdf5 cannot open it", path);
    if (f >= 0) {
        ct_tensor t = {0};
        s = ct_h5_read_tensor_alloc(f, "features", CT_F32, &t);
        if (want == CT_OK) {
            CHECK(s == CT_OK, "%s as a tensor: %s", path, ct_last_error());
            CHECK(s != CT_OK || (t.ndim == 2 && ((float *)t.data)[899] == 899.0f / 7.0f), "%s: wrong values", path);
            ct_tensor_free(&t);
        } else {
            CHECK_ERR(s, want, "hdf5: dataset 'features'", msg);
        }
        hid_t d = H5Dopen2(f, "features", H5P_DEFAULT);
        s = ct_h5_check_dataset(d, "features");
        if (want == CT_OK) CHECK(s == CT_OK, "%s: the check refuses it: %s", path, ct_last_error());
        else CHECK_ERR(s, want, msg);
        H5Dclose(d);
        H5Fclose(f);
    }
    ct_h5_unlock();
}

static void chunk_larger_than_dims(void) {
    char path[128];
    tmp_path(path, sizeof path, "chunk.h5");
    write_data(path, true, H5T_IEEE_F32LE, -1);
    expect_readers(path, CT_OK, NULL);
    /* The layout message of the older format stores the chunk's dimensions as 4-byte integers, then
     * the element size: 64, 3, 4. One byte flipped in the 3 gave [64, 14876675] in the wild. */
    uint8_t from[12], to[12];
    put_u32(from, 64), put_u32(from + 4, 3), put_u32(from + 8, 4);
    memcpy(to, from, sizeof to);
    put_u32(to + 4, 0xE30003);
    CHECK(patch(path, from, to, sizeof from), "no chunk layout [64, 3] x 4 bytes found in %s", path);
    expect_readers(path, CT_ERR_FORMAT, "chunk shape [64, 14876675] exceeds the dataset's fixed shape [300, 3]");
}

static void contiguous_past_the_end(void) {
    char path[128];
    tmp_path(path, sizeof path, "contig.h5");
    write_data(path, false, H5T_IEEE_F32LE, -1);
    expect_readers(path, CT_OK, NULL);
    /* the layout message of a contiguous dataset: its address, then its size (3600 bytes) */
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT), d = H5Dopen2(f, "features", H5P_DEFAULT);
    haddr_t addr = H5Dget_offset(d);
    H5Dclose(d);
    H5Fclose(f);
    uint8_t from[16], to[16];
    put_u64(from, addr), put_u64(from + 8, 3600);
    put_u64(to, addr + (1u << 20)), put_u64(to + 8, 3600);
    CHECK(patch(path, from, to, sizeof from), "no contiguous layout at %llu found in %s", (unsigned long long)addr,
          path);
    expect_readers(path, CT_ERR_FORMAT, "lie beyond the end of the file");
    /* the size of the block disagrees with [300, 3] f32: libhdf5 would read 3600 bytes from it */
    CHECK(patch(path, to, from, sizeof from), "cannot restore %s", path);
    put_u64(to, addr), put_u64(to + 8, 360);
    CHECK(patch(path, from, to, sizeof from), "cannot patch the size in %s", path);
    expect_readers(path, CT_ERR_FORMAT, "it stores 360 bytes, its shape and type need 3600");
}

/* What libhdf5 writes but ctrainer does not read: refused with a reason, never read. */
static void unsupported_headers(void) {
    char path[128], ext[128];
    tmp_path(path, sizeof path, "unsupported.h5");
    hid_t odd = H5Tcopy(H5T_IEEE_F32LE);
    H5Tset_ebias(odd, 100);
    write_data(path, false, odd, -1);
    H5Tclose(odd);
    expect_readers(path, CT_ERR_FORMAT, "its floats of 4 bytes are not IEEE half, single or double precision");

    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_external(dcpl, tmp_path(ext, sizeof ext, "raw.bin"), 0, 3600);
    write_data(path, false, H5T_IEEE_F32LE, dcpl);
    H5Pclose(dcpl);
    expect_readers(path, CT_ERR_FORMAT, "keeps its data in 1 external file(s)");

    dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_scaleoffset(dcpl, H5Z_SO_FLOAT_DSCALE, 2);
    write_data(path, true, H5T_IEEE_F32LE, dcpl);
    H5Pclose(dcpl);
    expect_readers(path, CT_ERR_FORMAT, "('scaleoffset') is not one ctrainer reads (deflate, shuffle, fletcher32)");

    dcpl = H5Pcreate(H5P_DATASET_CREATE); /* what `data convert` and h5py write: read */
    H5Pset_shuffle(dcpl);
    H5Pset_deflate(dcpl, 4);
    H5Pset_fletcher32(dcpl);
    write_data(path, true, H5T_IEEE_F32LE, dcpl);
    H5Pclose(dcpl);
    expect_readers(path, CT_OK, NULL);
}

/* The innermost message on libhdf5's error stack ("incorrect metadata checksum ..."). */
static herr_t first_detail(unsigned n, const H5E_error2_t *e, void *data) {
    char *buf = data;
    if (!buf[0] && e->desc) snprintf(buf, 256, "%s", e->desc);
    return 0;
}

/* ct_h5_file_create's format: the same chunk layout lives in a checksummed object header, so the
 * same damage is libhdf5's checksum error, not a decoded lie. */
static void checksummed_format(void) {
    char path[128];
    tmp_path(path, sizeof path, "ours.h5");
    ct_h5_lock();
    hid_t f;
    CHECK_OK(ct_h5_file_create(path, &f));
    hsize_t dims[2] = {300, 3}, chunk[2] = {64, 3};
    hid_t space = H5Screate_simple(2, dims, NULL), dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, 2, chunk);
    hid_t d = H5Dcreate2(f, "features", H5T_IEEE_F32LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    float x[900] = {0};
    CHECK(d >= 0 && H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, x) >= 0, "cannot write %s", path);
    H5Dclose(d);
    H5Pclose(dcpl);
    H5Sclose(space);
    H5Fclose(f);
    ct_h5_unlock();
    /* the chunk dimensions as the 1.10 layout message keeps them (8-byte sizes here): find the 64 */
    size_t n;
    uint8_t *b = (uint8_t *)ct_test_read_file(path, &n);
    CHECK(b && b[8] == 3, "%s: superblock version %d, expected 3 (the HDF5 1.10 format)", path, b ? b[8] : -1);
    free(b);
    uint8_t from[2] = {64, 3}, to[2] = {64, 0xE3};
    bool patched = patch(path, from, to, sizeof from);
    CHECK(patched, "no chunk dimensions 64, 3 found in %s", path);
    if (!patched) return;
    /* In a child: libhdf5 1.10 loses a block of its own (an object header's, from its free lists)
     * when a header fails its checksum, which LeakSanitizer would pin on this test; _exit ends the
     * child without its leak check. The answer travels in the exit status. */
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
        char detail[256] = "";
        f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
        d = f >= 0 ? H5Dopen2(f, "features", H5P_DEFAULT) : -1;
        if (d < 0) H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, first_detail, detail);
        _exit(d >= 0 ? 1 : strstr(detail, "checksum") ? 0 : 2);
    }
    int status = 0;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status), "the child did not finish");
    CHECK(WEXITSTATUS(status) != 1, "%s: a flipped byte of the layout opened without a checksum error", path);
    CHECK(WEXITSTATUS(status) != 2, "%s: refused, but not for its checksum", path);
}

int main(void) {
    ct_test_begin("test_h5_check");
    snprintf(tmpdir, sizeof tmpdir, "/tmp/ct_test_h5check_XXXXXX");
    if (!mkdtemp(tmpdir)) {
        printf("cannot create a temporary directory\n");
        return 1;
    }
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    chunk_larger_than_dims();
    contiguous_past_the_end();
    unsupported_headers();
    checksummed_format();
    CHECK_OK(ct_remove_tree(tmpdir));
    return ct_test_finish();
}
