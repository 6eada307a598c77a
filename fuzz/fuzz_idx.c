/* Fuzz target: IDX files (data/idx.h), raw and gzip'd, and what reads them: the IDX dataset
 * (images + labels, data/idx_dataset.c) and the conversion to HDF5 (`ctrainer data convert`,
 * data/convert.h).
 *
 * Input: a u8 of options, a u16 that splits the rest into the images file and the labels file,
 * then their bytes. Option bits 0 and 1 gzip the images and the labels (the harness compresses the
 * bytes, so the decompressed stream is the fuzzer's; a gzip'd file that is itself corrupt comes
 * from bit 2, which names a raw file ".gz" — zlib reads both transparently — and from the fuzzer
 * writing gzip bytes); bits 3-5 pick the scale and num_classes; bit 6 converts the pair to HDF5.
 * Every file is read alone (ct_idx_read) and as a dataset, whose first, last and a few middle
 * samples are fetched. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "common.h"
#include "data/convert.h"
#include "data/dataset.h"
#include "data/idx.h"

/* Elements of one image fetched at most (headers may claim far more than they hold). */
#define MAX_ROW_ELEMENTS ((int64_t)1 << 16)

/* Writes the bytes to path, gzip-compressed when gz. */
static void write_file(const char *path, const uint8_t *p, size_t n, bool gz) {
    if (!gz) {
        fz_write_file(path, p, n);
        return;
    }
    gzFile f = gzopen(path, "wb");
    if (!f || (n && gzwrite(f, p, (unsigned)n) != (int)n) || gzclose(f) != Z_OK) abort();
}

static void read_alone(const char *path) {
    ct_tensor t = {0};
    if (fz_report("ct_idx_read", ct_idx_read(path, &t)) == CT_OK) {
        /* the tensor must hold the bytes its shape says: touch the last one */
        size_t bytes = ct_tensor_nbytes(&t);
        volatile uint8_t last = bytes ? ((uint8_t *)t.data)[bytes - 1] : 0;
        (void)last;
        ct_tensor_free(&t);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static bool ready;
    if (!ready) {
        fz_init();
        ready = true;
    }
    fz_input in = {data, size};
    uint8_t opts = fz_u8(&in);
    size_t split = (size_t)fz_u16(&in);
    size_t rest;
    const uint8_t *p = fz_rest(&in, &rest);
    if (split > rest) split = rest;

    bool raw_gz_name = opts & 4;
    char images[512], labels[512];
    fz_path(images, sizeof images, (opts & 1) || raw_gz_name ? "images.idx.gz" : "images.idx");
    fz_path(labels, sizeof labels, (opts & 2) || raw_gz_name ? "labels.idx.gz" : "labels.idx");
    write_file(images, p, split, opts & 1);
    write_file(labels, p + split, rest - split, opts & 2);

    read_alone(images);
    read_alone(labels);

    static const double scales[] = {0, 1, 1.0 / 255, -2, 1e-300, 3e38, NAN, INFINITY};
    static const int64_t classes[] = {0, 0, 1, 3, 10, 256, -1, INT64_MAX};
    ct_dataset *ds = NULL;
    if (fz_report("ct_idx_dataset_create",
                  ct_idx_dataset_create(images, labels, scales[(opts >> 3) & 7], classes[(opts >> 3) & 7], &ds)) ==
        CT_OK) {
        int64_t n = ct_dataset_length(ds);
        ct_tensor f, l;
        if (n > 0 && ct_shape_numel(&ds->spec.feature_shape) <= MAX_ROW_ELEMENTS &&
            ct_dataset_alloc_batch(ds, 3, &f, &l) == CT_OK) {
            int64_t idx[3] = {0, n - 1, n / 2};
            fz_report("get_batch", ct_dataset_get_batch(ds, idx, 3, &(ct_fetch_ctx){.seed = 1}, &f, &l));
            ct_tensor_free(&f);
            ct_tensor_free(&l);
        }
        ct_dataset_free(ds);
    }
    if (opts & 64) {
        char out[512];
        fz_report("ct_convert_idx_to_hdf5",
                  ct_convert_idx_to_hdf5(images, labels, fz_path(out, sizeof out, "out.h5"), opts >> 7, -1));
    }
    fz_clean_tmpdir();
    fz_h5_check_handles();
    ct_error_clear();
    return 0;
}
