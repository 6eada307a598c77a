/* IDX reading: round trips of random raw and gzip'd files of every supported type, truncated and
 * corrupt files rejected by name, and the real Fashion-MNIST files (60000 + 10000, ten balanced classes). */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "core/rng.h"
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
            ct_tensor_free(&want);
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

int main(void) {
    ct_test_begin("test_idx");
    round_trips();
    fashion_mnist();
    return ct_test_finish();
}
