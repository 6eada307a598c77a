/* CRC-32C (Castagnoli): the checksum of TFRecord framing (TensorBoard event files), iSCSI and
 * ext4. Reflected polynomial 0x82F63B78, initial value and final xor 0xFFFFFFFF; table-driven,
 * one byte at a time (event files are small: speed does not matter, portability does). Debian 12
 * has no C library for it that a Debian package installs, hence these few lines. */
#ifndef CT_CRC32C_H
#define CT_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* crc32c("123456789") = 0xE3069283. */
uint32_t ct_crc32c(const void *data, size_t n);
/* Continues a CRC over more bytes: ct_crc32c_extend(ct_crc32c(a, na), b, nb) is the CRC of a then
 * b. ct_crc32c_extend(0, data, n) is ct_crc32c(data, n). */
uint32_t ct_crc32c_extend(uint32_t crc, const void *data, size_t n);

#endif
