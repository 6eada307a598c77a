/* What the emulation's stand-ins for NVIDIA's libraries share (emulated_runtime.cpp defines it):
 * a float32 or float64 GEMM on host memory, its float32 inputs rounded as tensor cores round them
 * under math mode `mode` (ct_op_gemm's arguments otherwise). */
#ifndef CT_EMULATED_LIBRARIES_H
#define CT_EMULATED_LIBRARIES_H

#include "core/device.h"
#include "core/tensor.h"

void ct_emu_gemm(ct_math_mode mode, bool trans_a, bool trans_b, double alpha, const ct_tensor *a, const ct_tensor *b,
                 double beta, ct_tensor *c);

#endif
