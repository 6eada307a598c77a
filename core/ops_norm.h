/* Ops: norm family (declarations; CPU kernels in core/cpu/). Included by core/ops.h. */
#ifndef CT_OPS_NORM_H
#define CT_OPS_NORM_H

#include "core/tensor.h"

#endif
