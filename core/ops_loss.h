/* Ops: loss family (declarations; CPU kernels in core/cpu/). Included by core/ops.h. */
#ifndef CT_OPS_LOSS_H
#define CT_OPS_LOSS_H

#include "core/tensor.h"

#endif
