/* The safetensors format (github.com/huggingface/safetensors): reading and writing, with every rule
 * of the format checked on read.
 *
 * A file is an 8-byte little-endian header size N, N bytes of UTF-8 JSON
 *   {"__metadata__": {"key": "value", ...}, "name": {"dtype": "F32", "shape": [2, 3],
 *    "data_offsets": [begin, end]}, ...}
 * padded with spaces to a multiple of 8, then the tensors' raw little-endian, row-major bytes;
 * offsets are relative to the end of the header. The writer produces what the reference writer
 * (safetensors' Rust core, which safetensors.torch.save_file calls) produces byte for byte: tensors
 * ordered by dtype, widest first (the reference's enum order, descending), then by name, laid out
 * contiguously in that order, "__metadata__" first, compact JSON, keys dtype/shape/data_offsets.
 * (The reference writes metadata keys in hash order; here they are sorted, so output is
 * deterministic.)
 *
 * The reader accepts exactly what the format allows and says what is wrong otherwise, naming the
 * file and the tensor: a header size beyond the file or the 100 MB limit, a header that does not
 * start with '{' or is not JSON, a duplicate name, an unknown dtype or key, a shape whose size
 * does not match its data_offsets, offsets outside the data, gaps, overlaps and trailing bytes.
 * It reads only the header when opening and each tensor's bytes when asked, so files larger than
 * memory are fine. The host must be little-endian (x86-64, AArch64), which is checked at build time. */
#ifndef CT_SAFETENSORS_H
#define CT_SAFETENSORS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The format's element types, in the reference's order (which the writer sorts by). */
typedef enum ct_st_dtype {
    CT_ST_BOOL,
    CT_ST_F4,
    CT_ST_F6_E2M3,
    CT_ST_F6_E3M2,
    CT_ST_U8,
    CT_ST_I8,
    CT_ST_F8_E5M2,
    CT_ST_F8_E4M3,
    CT_ST_F8_E8M0,
    CT_ST_F8_E4M3FNUZ,
    CT_ST_F8_E5M2FNUZ,
    CT_ST_I16,
    CT_ST_U16,
    CT_ST_F16,
    CT_ST_BF16,
    CT_ST_I32,
    CT_ST_U32,
    CT_ST_F32,
    CT_ST_C64,
    CT_ST_F64,
    CT_ST_I64,
    CT_ST_U64,
    CT_ST_NUM_DTYPES
} ct_st_dtype;

/* The largest header the reference reader accepts (100 MB). */
#define CT_ST_MAX_HEADER ((uint64_t)100000000)

/* "F32", ...; NULL for a value outside the enum. */
const char *ct_st_dtype_name(ct_st_dtype dt);
/* False when name is not one of the format's dtypes. */
bool ct_st_dtype_parse(const char *name, ct_st_dtype *out);
/* Bits per element (4 for F4, 6 for F6_*, 64 for C64). */
int ct_st_dtype_bits(ct_st_dtype dt);
/* The safetensors dtype of a float tensor dtype (F32, F64, BF16). */
ct_st_dtype ct_st_dtype_of(ct_dtype dt);
/* F16, BF16, F32 and F64: the ones read into and written from float tensors. */
bool ct_st_dtype_is_float(ct_st_dtype dt);

/* --- reading ------------------------------------------------------------------------------------ */

typedef struct ct_st_tensor {
    const char *name;
    ct_st_dtype dtype;
    int ndim;
    const int64_t *shape; /* ndim entries (none for a scalar) */
    int64_t numel;
    uint64_t begin, end; /* byte offsets into the data section */
} ct_st_tensor;

typedef struct ct_st_file ct_st_file;

/* Opens `path` and validates its header (CT_ERR_IO when it cannot be read, CT_ERR_FORMAT naming the
 * file, and the tensor where there is one, for anything the format does not allow). */
ct_status ct_st_open(const char *path, ct_st_file **out);
/* The same over a file image in memory (borrowed until ct_st_close); `name` stands for the file. */
ct_status ct_st_open_memory(const void *data, size_t size, const char *name, ct_st_file **out);
void ct_st_close(ct_st_file *f);

const char *ct_st_path(const ct_st_file *f);
int ct_st_count(const ct_st_file *f);
/* Tensor i in name order (0 <= i < count). */
const ct_st_tensor *ct_st_get(const ct_st_file *f, int i);
/* The tensor called name, or NULL. */
const ct_st_tensor *ct_st_find(const ct_st_file *f, const char *name);
/* The "__metadata__" object (string values only), or NULL when the header has none. */
const json_t *ct_st_metadata(const ct_st_file *f);

/* Copies t's end - begin raw bytes into dst. */
ct_status ct_st_read_raw(ct_st_file *f, const ct_st_tensor *t, void *dst);
/* Reads a float tensor (F16, BF16, F32, F64) into dst, a CPU F32 or F64 tensor with t's number of
 * elements, converting (F64 to F32 rounds to nearest). Other dtypes are CT_ERR_DTYPE naming t. */
ct_status ct_st_read_float(ct_st_file *f, const ct_st_tensor *t, ct_tensor *dst);

/* --- writing ------------------------------------------------------------------------------------ */

typedef struct ct_st_entry {
    const char *name;
    ct_st_dtype dtype;
    int ndim;
    const int64_t *shape;
    const void *data; /* raw little-endian bytes, numel * bits / 8 of them */
} ct_st_entry;

/* The file image of n entries and a metadata object (NULL, or an object of strings) in *out
 * (malloc'd, *size bytes). Duplicate or reserved names, negative sizes and non-string metadata are
 * CT_ERR_INVALID_ARG naming the entry. */
ct_status ct_st_serialize(const ct_st_entry *entries, int n, const json_t *metadata, void **out, size_t *size);
/* Writes the same to `path` through a temporary file renamed into place. */
ct_status ct_st_write(const char *path, const ct_st_entry *entries, int n, const json_t *metadata);

/* --- element conversion ------------------------------------------------------------------------- */

/* IEEE binary16 and bfloat16 from and to float; float to either rounds to nearest even, as
 * PyTorch's .half() and .bfloat16() do (NaN stays NaN, overflow becomes infinity). */
float ct_f16_to_f32(uint16_t h);
uint16_t ct_f32_to_f16(float f);
float ct_bf16_to_f32(uint16_t h);
uint16_t ct_f32_to_bf16(float f);
/* Converts n elements of a float tensor's memory (src_dt F32 or F64) to dst_dt's raw bytes (F16,
 * BF16, F32 or F64) in dst. F64 goes to F16 and BF16 through float, as PyTorch does. */
void ct_st_convert_from(const void *src, ct_dtype src_dt, ct_st_dtype dst_dt, void *dst, int64_t n);

#ifdef __cplusplus
}
#endif
#endif
