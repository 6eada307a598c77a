/* The parts of TensorBoard logging (see tensorboard.h) that need no protobuf-c, so they are built in
 * every configuration: TFRecord's CRC mask, an event's wall time and Hugging Face's tag rewriting. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "callbacks/tensorboard.h"

uint32_t ct_tfrecord_mask_crc(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

double ct_tb_wall_time(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void ct_tb_rewrite_key(const char *key, char *out, size_t n) {
    if (strncmp(key, "eval_", 5) == 0) snprintf(out, n, "eval/%s", key + 5);
    else if (strncmp(key, "test_", 5) == 0) snprintf(out, n, "test/%s", key + 5);
    else snprintf(out, n, "train/%s", key);
}
