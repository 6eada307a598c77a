/* Helpers of the CUDA tests: skip where there is no GPU, and run one op on the CPU and on the GPU
 * from the same random inputs, then compare.
 *
 * A test calls ct_cuda_test_begin (exits 77, "skipped", in a build without CUDA or on a machine
 * without a visible GPU), makes CPU tensors with ct_ct_rand / ct_ct_zeros, mirrors them on the GPU
 * with ct_ct_to_gpu, runs the op on both sets, and compares with ct_ct_check_close, which copies
 * the GPU tensor back and reports the largest relative error (|a - b| / max(|b|, floor)) against
 * the tolerance (float32: 1e-5 where the math is the same; TF32 1e-3; bf16 1e-2). */
#ifndef CT_CUDA_TESTLIB_H
#define CT_CUDA_TESTLIB_H

#include <stdbool.h>
#include <stdint.h>

#include "core/rng.h"
#include "core/tensor.h"
#include "testlib.h"

/* Prints the seed, or exits 77 when no GPU can run the tests. */
void ct_cuda_test_begin(const char *name);

/* A CPU tensor of uniform values in [lo, hi) (f32/f64), or of integers in [lo, hi) (i32/i64/u8). */
ct_tensor ct_ct_rand(ct_rng *rng, ct_dtype dt, int ndim, const int64_t *shape, double lo, double hi);
ct_tensor ct_ct_zeros(ct_dtype dt, int ndim, const int64_t *shape);
/* A copy of a CPU tensor on cuda:0 (aborts on failure: the test cannot go on). */
ct_tensor ct_ct_to_gpu(const ct_tensor *cpu);
/* A CPU copy of a GPU tensor. */
ct_tensor ct_ct_to_cpu(const ct_tensor *gpu);
/* CHECKs that gpu (copied back) equals cpu elementwise within rel_tol (relative to max(|cpu|,
 * floor)); names the worst element. Returns the largest relative error. */
double ct_ct_check_close(const char *what, const ct_tensor *gpu, const ct_tensor *cpu, double rel_tol, double floor);
/* CHECKs that gpu (copied back) is within rel_tol of cpu in root mean square, relative to cpu's:
 * for reduced-precision math, whose rounding leaves every element a small independent error (a
 * maximum would measure the rare cancelling element; ct_ct_check_close bounds those more loosely).
 * A NaN on one side only fails. Returns the relative RMS error. */
double ct_ct_check_rms_close(const char *what, const ct_tensor *gpu, const ct_tensor *cpu, double rel_tol);
/* CHECKs each element of gpu (copied back) within tol of cpu relative to scale's element: for sums,
 * scale is the sum of the absolute values of the terms (the same op on |inputs|), which is what
 * rounding the inputs or reordering the sum can change, where a plain relative error means nothing
 * on elements whose terms cancel. A NaN fails. */
void ct_ct_check_scaled(const char *what, const ct_tensor *gpu, const ct_tensor *cpu, const ct_tensor *scale,
                        double tol);
/* |t|, a new CPU tensor. */
ct_tensor ct_ct_abs(const ct_tensor *t);
/* Root mean square of a CPU tensor's finite elements: the scale of a comparison floor. */
double ct_ct_rms(const ct_tensor *t);
/* CHECKs exact equality (integer outputs, masks, indices). */
void ct_ct_check_equal(const char *what, const ct_tensor *gpu, const ct_tensor *cpu);

#endif
