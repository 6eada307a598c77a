/* IDX reading: round trips of random raw and gzip'd files of every supported type, truncated,
 * overlong and corrupt files rejected by name, and the real Fashion-MNIST files (60000 + 10000, ten balanced classes).
 * The IDX dataset on top: samples equal the files' data, files that disagree are rejected by name,
 * and subsets (max_*_samples) keep the first n samples. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "core/rng.h"
#include "data/dataset.h"
#include "data/idx.h"
#include "testlib.h"

static void write_idx(const char *path, bool gz, unsigned char type, int ndim, const int64_t *shape,
                      const void *data, size_t bytes, size_t es, size_t truncate_to) {
    size_t header = 4 + 4 * (size_t)ndim;
    unsigned char *buf = malloc(header + bytes);
    buf[0] = buf[1] = 0;
    buf[2] = type;
    buf[3] = (unsigned char)ndim;
    for (int i = 0; i < ndim; i++)
        for (int b = 0; b < 4; b++) buf[4 + 4 * i + b] = (unsigned char)(shape[i] >> (24 - 8 * b));
    const unsigned char *src = data;
    for (size_t i = 0; i < bytes; i += es)
        for (size_t b = 0; b < es; b++) buf[header + i + b] = src[i + es - 1 - b]; /* big-endian */
    size_t total = truncate_to ? truncate_to : header + bytes;
    if (gz) {
        gzFile f = gzopen(path, "wb");
        gzwrite(f, buf, (unsigned)total);
        gzclose(f);
    } else {
        FILE *f = fopen(path, "wb");
        fwrite(buf, 1, total, f);
        fclose(f);
    }
    free(buf);
}

static void round_trips(void) {
    ct_rng r;
    ct_rng_init(&r, ct_test_seed, 0, CT_RNG_USER);
    char path[] = "/tmp/ct_idx_XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    const struct {
        unsigned char type;
        ct_dtype dt;
    } kinds[] = {{0x08, CT_U8}, {0x0C, CT_I32}, {0x0D, CT_F32}, {0x0E, CT_F64}};
    for (int gz = 0; gz < 2; gz++)
        for (size_t k = 0; k < 4; k++) {
            int64_t shape[3] = {1 + (int64_t)ct_rng_below(&r, 7), 1 + (int64_t)ct_rng_below(&r, 5), 3};
            ct_tensor want;
            ct_tensor_alloc(&want, kinds[k].dt, CT_CPU, 3, shape);
            unsigned char *p = want.data;
            for (size_t i = 0; i < ct_tensor_nbytes(&want); i++) p[i] = (unsigned char)ct_rng_u32(&r);
            write_idx(path, gz, kinds[k].type, 3, shape, want.data, ct_tensor_nbytes(&want), ct_dtype_size(kinds[k].dt), 0);
            ct_tensor got;
            CHECK_OK(ct_idx_read(path, &got));
            CHECK(ct_shape_eq(&got, &want) && got.dtype == want.dtype &&
                      memcmp(got.data, want.data, ct_tensor_nbytes(&want)) == 0,
                  "round trip of type 0x%02x (gz=%d) differs", kinds[k].type, gz);
            ct_tensor_free(&got);
            /* The same file cut short: header intact, data missing. */
            write_idx(path, gz, kinds[k].type, 3, shape, want.data, ct_tensor_nbytes(&want),
                      ct_dtype_size(kinds[k].dt), 16 + ct_tensor_nbytes(&want) / 2);
            CHECK_ERR(ct_idx_read(path, &got), CT_ERR_FORMAT, path, "truncated");
            /* A header that describes less than the file holds (2 of the 3 columns). */
            int64_t smaller[3] = {shape[0], shape[1], 2};
            write_idx(path, gz, kinds[k].type, 3, smaller, want.data, ct_tensor_nbytes(&want),
                      ct_dtype_size(kinds[k].dt), 0);
            CHECK_ERR(ct_idx_read(path, &got), CT_ERR_FORMAT, path, "more data than the IDX header describes");
            ct_tensor_free(&want);
        }
    /* A header claiming far more than the file holds is an error before anything that size is
     * allocated (60000 x 65536 x 256 bytes would be a terabyte). */
    int64_t huge[3] = {60000, 65536, 256};
    for (int gz = 0; gz < 2; gz++) {
        uint8_t few[8] = {1, 2, 3, 4, 5, 6, 7, 8};
        write_idx(path, gz, 0x08, 3, huge, few, sizeof few, 1, 0);
        ct_tensor t;
        CHECK_ERR(ct_idx_read(path, &t), CT_ERR_FORMAT, path, "truncated", "1006632960000 bytes");
    }
    FILE *f = fopen(path, "wb");
    fputs("not an idx file at all", f);
    fclose(f);
    ct_tensor got;
    CHECK_ERR(ct_idx_read(path, &got), CT_ERR_FORMAT, path, "magic");
    unlink(path);
    CHECK_ERR(ct_idx_read("/nonexistent/dir/file.idx", &got), CT_ERR_IO, "/nonexistent/dir/file.idx");
}

static void fashion_mnist(void) {
    const char *dir = "/usr/share/datasets/fashion-mnist/";
    char path[256];
    snprintf(path, sizeof path, "%strain-images-idx3-ubyte.gz", dir);
    if (access(path, R_OK) != 0) {
        printf("Fashion-MNIST not installed; skipping the real-data check\n");
        return;
    }
    const char *files[2][2] = {{"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"},
                               {"t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"}};
    const int64_t counts[2] = {60000, 10000};
    for (int s = 0; s < 2; s++) {
        ct_tensor img, lab;
        snprintf(path, sizeof path, "%s%s", dir, files[s][0]);
        CHECK_OK(ct_idx_read(path, &img));
        snprintf(path, sizeof path, "%s%s", dir, files[s][1]);
        CHECK_OK(ct_idx_read(path, &lab));
        CHECK(img.ndim == 3 && img.shape[0] == counts[s] && img.shape[1] == 28 && img.shape[2] == 28,
              "images shape");
        CHECK(lab.ndim == 1 && lab.shape[0] == counts[s], "labels shape");
        int64_t per_class[10] = {0}, bad = 0;
        for (int64_t i = 0; i < lab.shape[0]; i++) {
            unsigned v = ((unsigned char *)lab.data)[i];
            if (v < 10) per_class[v]++;
            else bad++;
        }
        CHECK(bad == 0, "%lld labels outside 0..9", (long long)bad);
        for (int c = 0; c < 10; c++)
            CHECK(per_class[c] == counts[s] / 10, "class %d has %lld samples", c, (long long)per_class[c]);
        ct_tensor_free(&img);
        ct_tensor_free(&lab);
    }
}

static void idx_dataset(void) {
    ct_rng r;
    ct_rng_init(&r, ct_test_seed, 1, CT_RNG_USER);
    char img[] = "/tmp/ct_idxds_img_XXXXXX", lab[] = "/tmp/ct_idxds_lab_XXXXXX";
    close(mkstemp(img));
    close(mkstemp(lab));
    int64_t n = 5 + (int64_t)ct_rng_below(&r, 20), h = 1 + (int64_t)ct_rng_below(&r, 5), w = 1 + (int64_t)ct_rng_below(&r, 5);
    int64_t ishape[3] = {n, h, w};
    uint8_t *pixels = malloc((size_t)(n * h * w));
    uint8_t *labels = malloc((size_t)n);
    for (int64_t i = 0; i < n * h * w; i++) pixels[i] = (uint8_t)ct_rng_u32(&r);
    for (int64_t i = 0; i < n; i++) labels[i] = (uint8_t)ct_rng_below(&r, 7);
    labels[n - 1] = 6; /* so the inferred class count is 7 */
    write_idx(img, true, 0x08, 3, ishape, pixels, (size_t)(n * h * w), 1, 0);
    write_idx(lab, false, 0x08, 1, &n, labels, (size_t)n, 1, 0);
    ct_dataset *ds;
    CHECK_OK(ct_idx_dataset_create(img, lab, 0, 0, &ds));
    CHECK(ct_dataset_length(ds) == n, "length %lld", (long long)ct_dataset_length(ds));
    CHECK(ds->spec.feature_shape.ndim == 3 && ds->spec.feature_shape.dims[0] == 1 && ds->spec.feature_shape.dims[1] == h &&
              ds->spec.feature_shape.dims[2] == w && ds->spec.num_classes == 7 && ds->spec.label_shape.ndim == 0,
          "spec of an [N, H, W] file");
    ct_tensor f, l;
    CHECK_OK(ct_dataset_alloc_batch(ds, 4, &f, &l));
    int64_t idx[4] = {n - 1, 0, (int64_t)ct_rng_below(&r, (uint64_t)n), n - 1};
    CHECK_OK(ct_dataset_get_batch(ds, idx, 4, NULL, &f, &l));
    int bad = 0;
    for (int i = 0; i < 4; i++) {
        bad += ((int64_t *)l.data)[i] != labels[idx[i]];
        for (int64_t j = 0; j < h * w; j++) bad += ((float *)f.data)[i * h * w + j] != pixels[idx[i] * h * w + j] / 255.0f;
    }
    CHECK(bad == 0, "%d values of a fetched batch differ from the files", bad);
    int64_t out_of_range[1] = {n};
    CHECK_ERR(ct_dataset_get_batch(ds, out_of_range, 1, NULL, &f, &l), CT_ERR_INVALID_ARG, img, "outside");
    ct_dataset *sub;
    CHECK_OK(ct_subset_dataset_create(ds, 3, &sub));
    CHECK(ct_dataset_length(sub) == 3, "subset length");
    int64_t third[1] = {3};
    CHECK_ERR(ct_dataset_get_batch(sub, third, 1, NULL, &f, &l), CT_ERR_INVALID_ARG, "index 3", "[0, 3)");
    int64_t first[1] = {2};
    CHECK_OK(ct_dataset_get_batch(sub, first, 1, NULL, &f, &l));
    CHECK(((int64_t *)l.data)[0] == labels[2], "subset sample 2 is the dataset's sample 2");
    ct_dataset_free(sub);
    ct_tensor_free(&f);
    ct_tensor_free(&l);

    /* Files that disagree, and labels outside the declared classes. */
    CHECK_ERR(ct_idx_dataset_create(img, lab, 0, 6, &ds), CT_ERR_FORMAT, lab, "label 6", "[0, 6)");
    int64_t fewer = n - 1;
    write_idx(lab, false, 0x08, 1, &fewer, labels, (size_t)fewer, 1, 0);
    CHECK_ERR(ct_idx_dataset_create(img, lab, 0, 0, &ds), CT_ERR_FORMAT, img, lab, "labels");
    CHECK_ERR(ct_idx_dataset_create(img, "/nonexistent/labels.idx", 0, 0, &ds), CT_ERR_IO, "/nonexistent/labels.idx");
    write_idx(lab, false, 0x08, 3, ishape, pixels, (size_t)(n * h * w), 1, 0);
    CHECK_ERR(ct_idx_dataset_create(img, lab, 0, 0, &ds), CT_ERR_FORMAT, lab, "rank 1");
    /* int32 labels can be negative: said as such, with or without declared classes */
    int32_t *signed_labels = calloc((size_t)n, sizeof *signed_labels);
    signed_labels[n / 2] = -1;
    int64_t all = n;
    write_idx(lab, false, 0x0C, 1, &all, signed_labels, (size_t)n * 4, 4, 0);
    char at[80];
    snprintf(at, sizeof at, "label -1 at position %lld is negative; class ids start at 0", (long long)(n / 2));
    CHECK_ERR(ct_idx_dataset_create(img, lab, 0, 0, &ds), CT_ERR_FORMAT, lab, at);
    CHECK_ERR(ct_idx_dataset_create(img, lab, 0, 6, &ds), CT_ERR_FORMAT, lab, at);
    free(signed_labels);
    unlink(img);
    unlink(lab);
    free(pixels);
    free(labels);
}

int main(void) {
    ct_test_begin("test_idx");
    round_trips();
    fashion_mnist();
    idx_dataset();
    return ct_test_finish();
}
