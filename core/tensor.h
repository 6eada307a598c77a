/* Tensors: a typed, shaped, contiguous view of memory on a device.
 *
 * A ct_tensor is a small value (pass it by pointer or copy it freely); it does not own its memory
 * unless it came from ct_tensor_alloc, in which case ct_tensor_free releases it. Layouts are always
 * row-major and contiguous, which keeps every op simple and lets a batch be sliced by rows
 * (ct_tensor_rows) without copying. Parameters are views into the model's flat buffers; activations
 * are views into the model's arena. */
#ifndef CT_TENSOR_H
#define CT_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/device.h"
#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ct_dtype {
    CT_F32 = 0,
    CT_F64 = 1,  /* the reference path: finite-difference gradient checks run in double */
    CT_I32 = 2,  /* labels */
    CT_I64 = 3,  /* labels and token ids */
    CT_BF16 = 4, /* storage type reserved for the CUDA backend's mixed precision */
    CT_U8 = 5,   /* raw bytes, e.g. image pixels before scaling */
} ct_dtype;

#define CT_MAX_DIMS 6

typedef struct ct_tensor {
    void *data;
    ct_dtype dtype;
    ct_device device;
    int ndim;
    int64_t shape[CT_MAX_DIMS];
} ct_tensor;

size_t ct_dtype_size(ct_dtype dt);
const char *ct_dtype_name(ct_dtype dt);
static inline bool ct_dtype_is_float(ct_dtype dt) { return dt == CT_F32 || dt == CT_F64 || dt == CT_BF16; }

/* A view over existing memory. */
ct_tensor ct_tensor_view(void *data, ct_dtype dt, ct_device dev, int ndim, const int64_t *shape);

/* Bytes of a tensor of this shape and dtype; CT_ERR_SHAPE for a negative size or one that overflows
 * (shapes come from configs and files, so their product is checked before anything is allocated).
 * A 0 counts as 1 in that check: [0, 2^40, 2^40] is empty but refused, its rows being unaddressable. */
ct_status ct_shape_nbytes(int ndim, const int64_t *shape, ct_dtype dt, size_t *bytes);

/* Allocates zeroed, 64-byte aligned memory for a tensor of the given shape. */
ct_status ct_tensor_alloc(ct_tensor *t, ct_dtype dt, ct_device dev, int ndim, const int64_t *shape);
/* Copies src's elements into dst (same dtype and element count; any devices, e.g. host to GPU). */
ct_status ct_tensor_copy_to(ct_tensor *dst, const ct_tensor *src);
void ct_tensor_free(ct_tensor *t);

int64_t ct_tensor_numel(const ct_tensor *t);
size_t ct_tensor_nbytes(const ct_tensor *t);
/* Elements per index of dimension 0 (the per-sample size for batch-major tensors). */
int64_t ct_tensor_row_numel(const ct_tensor *t);

/* Rows [start, start+n) of dimension 0, as a view. */
ct_tensor ct_tensor_rows(const ct_tensor *t, int64_t start, int64_t n);
/* The same memory with another shape of the same element count; CT_ERR_SHAPE otherwise. */
ct_status ct_tensor_reshape(const ct_tensor *t, int ndim, const int64_t *shape, ct_tensor *out);

bool ct_shape_eq(const ct_tensor *a, const ct_tensor *b);
/* "[128, 784] f32 cpu" into buf; returns buf. */
const char *ct_tensor_str(const ct_tensor *t, char *buf, size_t cap);
const char *ct_shape_str(int ndim, const int64_t *shape, char *buf, size_t cap);

/* CT_OK, or an error naming `who`, the device expected and the tensor given. */
ct_status ct_expect_device(const char *who, const ct_tensor *t, ct_device dev);

/* Host memory used for tensors: 64-byte aligned, zeroed. */
void *ct_host_alloc(size_t bytes);
void ct_host_free(void *p);

/* Fills a float tensor (F32/F64) from a double array, or copies it out; CPU tensors only. */
void ct_tensor_fill(ct_tensor *t, double value);
void ct_tensor_copy_from_f64(ct_tensor *t, const double *src);
void ct_tensor_copy_to_f64(const ct_tensor *t, double *dst);
/* Element i of a float or integer CPU tensor as double. */
double ct_tensor_get(const ct_tensor *t, int64_t i);
/* Element i as a double wherever t lives (PyTorch's .item()): on a device one element is copied to
 * the host first, so this is for messages and rare reads, never for loops. NaN if the copy fails. */
double ct_tensor_item(const ct_tensor *t, int64_t i);
void ct_tensor_set(ct_tensor *t, int64_t i, double v);
/* CT_OK when every element of a CPU tensor is finite (integer tensors always are); otherwise
 * CT_ERR_FORMAT naming the first NaN or infinity and how many there are ("holds 3 non-finite values,
 * the first nan at element 17 of 784"). For values read from files (weights, optimizer state): a NaN
 * loaded there would otherwise train and evaluate without nan_inf_policy ever seeing a bad step. The
 * caller prefixes the tensor's name and file. */
ct_status ct_tensor_check_finite(const ct_tensor *t);

/* A per-sample shape: the tensor shape without its leading batch dimension. */
typedef struct ct_shape {
    int ndim;
    int64_t dims[CT_MAX_DIMS - 1];
} ct_shape;

/* Per-sample shape helpers. */
int64_t ct_shape_numel(const ct_shape *s);
const char *ct_sample_shape_str(const ct_shape *s, char *buf, size_t cap);
/* The full tensor shape [batch, dims...]. */
void ct_shape_with_batch(const ct_shape *s, int64_t batch, int *ndim, int64_t *shape);

#ifdef __cplusplus
}
#endif

#endif
