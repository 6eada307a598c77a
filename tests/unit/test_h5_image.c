/* HDF5 files built in memory (core/format/h5_image.h): the same content written through the sec2
 * driver to disk (ct_h5_file_create) and into an image (ct_h5_image_create / _finish) gives the same
 * bytes, for a file of a few hundred bytes and for one of several MiB that outgrows the size hint
 * and the driver's first buffer (so the buffer taken over is longer than the file and its length
 * comes from the superblock); a discarded image frees what it held (the sanitizer and valgrind
 * runs check that). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/format/h5_image.h"
#include "core/format/h5io.h"
#include "testlib.h"

static ct_rng rng;

/* Datasets of random floats whose sizes add up to about `floats`, and a string attribute. */
static void write_content(hid_t f, int64_t floats, uint64_t seed) {
    ct_rng r;
    ct_rng_init(&r, seed, 3, CT_RNG_USER);
    int64_t left = floats;
    for (int i = 0; left > 0; i++) {
        int64_t n = i == 0 ? 7 : left < 4096 ? left : 1 + (int64_t)ct_rng_below(&r, (uint64_t)left);
        ct_tensor t;
        CHECK_OK(ct_tensor_alloc(&t, CT_F32, CT_CPU, 1, &n));
        for (int64_t k = 0; k < n; k++) ((float *)t.data)[k] = (float)ct_rng_normal(&r);
        char name[32];
        snprintf(name, sizeof name, "layer.%d.weight", i);
        CHECK_OK(ct_h5_write_tensor(f, name, &t));
        ct_tensor_free(&t);
        left -= n;
    }
    CHECK_OK(ct_h5_write_string_attr(f, "spec", "{\"type\": \"sequential\"}"));
}

static void same_bytes_as_sec2(int64_t floats, size_t size_hint) {
    uint64_t seed = ct_rng_u64(&rng);
    char path[64];
    snprintf(path, sizeof path, "/tmp/ct_h5_image_%d.h5", (int)getpid());
    ct_h5_lock();
    ct_h5_quiet();
    hid_t f;
    CHECK_OK(ct_h5_file_create(path, &f));
    write_content(f, floats, seed);
    CHECK(H5Fclose(f) >= 0, "closing %s", path);
    ct_h5_image im;
    void *image = NULL;
    size_t size = 0;
    CHECK_OK(ct_h5_image_create(size_hint, &im));
    write_content(im.file, floats, seed);
    CHECK_OK(ct_h5_image_finish(&im, &image, &size));
    CHECK(im.file == -1 && im.buffer == NULL, "finish leaves nothing behind");
    ct_h5_unlock();
    size_t n = 0;
    char *disk = ct_test_read_file(path, &n);
    CHECK(disk && n == size && memcmp(disk, image, n) == 0,
          "%lld floats (hint %zu bytes): the image (%zu bytes) differs from the sec2 driver's file (%zu bytes)",
          (long long)floats, size_hint, size, n);
    free(disk);
    free(image);
    unlink(path);
}

static void discarded(void) {
    ct_h5_lock();
    ct_h5_image im;
    CHECK_OK(ct_h5_image_create(1 << 20, &im));
    write_content(im.file, 300000, 7);
    ct_h5_image_discard(&im);
    CHECK(im.file == -1 && im.buffer == NULL, "discard leaves nothing behind");
    ct_h5_unlock();
}

int main(void) {
    ct_test_begin("test_h5_image");
    ct_rng_init(&rng, ct_test_seed, 1, CT_RNG_USER);
    same_bytes_as_sec2(10, 0);
    same_bytes_as_sec2(100, 400);
    same_bytes_as_sec2(ct_test_between(&rng, 500000, 1500000), 0);          /* several 1 MiB steps */
    same_bytes_as_sec2(ct_test_between(&rng, 500000, 1500000), 4 << 20);    /* about the file's size */
    discarded();
    return ct_test_finish();
}
