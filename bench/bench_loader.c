/* Data loader throughput: samples/s over one shuffled epoch of Fashion-MNIST's training set (60000
 * images, u8 pixels converted to float32 on fetch), batch 128, with background workers. Loading the
 * files is not timed; the consumer only touches each batch (a checksum of one value per row), so the
 * figure is what the loader can feed a training loop at most. bench/loader.py compares it with the
 * training throughput measured in the same run.
 * Usage: bench_loader [DATA_DIR] [NUM_WORKERS] [BATCH]. Prints one JSON line. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "data/loader.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : "/usr/share/datasets/fashion-mnist";
    int workers = argc > 2 ? atoi(argv[2]) : 1;
    int64_t batch = argc > 3 ? atoll(argv[3]) : 128;
    char img[1024], lab[1024];
    snprintf(img, sizeof img, "%s/train-images-idx3-ubyte.gz", dir);
    snprintf(lab, sizeof lab, "%s/train-labels-idx1-ubyte.gz", dir);
    ct_dataset *ds;
    ct_loader *l;
    ct_loader_config cfg = {.batch_size = batch, .shuffle = true, .seed = 42, .world_size = 1, .num_workers = workers};
    if (ct_idx_dataset_create(img, lab, 0, 10, &ds) != CT_OK || ct_loader_create(ds, &cfg, &l) != CT_OK) {
        fprintf(stderr, "bench_loader: %s\n", ct_last_error());
        return 1;
    }
    double checksum = 0;
    int64_t samples = 0, batches = 0;
    double t0 = now();
    ct_status s = ct_loader_start_epoch(l, 0);
    ct_batch *b;
    while (s == CT_OK && (s = ct_loader_next(l, &b)) == CT_OK && b) {
        const float *x = b->features.data;
        int64_t row = b->rows ? ct_tensor_numel(&b->features) / b->rows : 0;
        for (int64_t i = 0; i < b->rows; i++) checksum += x[i * row + 400];
        samples += b->rows;
        batches++;
    }
    double dt = now() - t0;
    if (s != CT_OK) {
        fprintf(stderr, "bench_loader: %s\n", ct_last_error());
        return 1;
    }
    printf("{\"bench\": \"loader\", \"dataset\": \"fashion-mnist train\", \"batch\": %lld, \"num_workers\": %d, "
           "\"batches\": %lld, \"samples\": %lld, \"seconds\": %.4f, \"loader_samples_per_s\": %.0f, "
           "\"checksum\": %.3f}\n",
           (long long)batch, workers, (long long)batches, (long long)samples, dt, samples / dt, checksum);
    ct_loader_free(l);
    ct_dataset_free(ds);
    return 0;
}
