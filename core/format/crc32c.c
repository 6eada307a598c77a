/* CRC-32C (Castagnoli), reflected, with a 256-entry table computed once (see crc32c.h). */
#include "core/format/crc32c.h"

#include <pthread.h>

static uint32_t table[256];
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void make_table(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        table[i] = c;
    }
}

uint32_t ct_crc32c_extend(uint32_t crc, const void *data, size_t n) {
    pthread_once(&table_once, make_table);
    const unsigned char *p = data;
    uint32_t c = ~crc;
    for (size_t i = 0; i < n; i++) c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
    return ~c;
}

uint32_t ct_crc32c(const void *data, size_t n) { return ct_crc32c_extend(0, data, n); }
