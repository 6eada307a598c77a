/* A layer an application defines itself: Swish with a learnable slope per feature,
 * y = x * sigmoid(beta * x) (Ramachandran et al., 2017; beta = 1 is SiLU). See swish_layer.c. */
#ifndef SWISH_LAYER_H
#define SWISH_LAYER_H

#include <jansson.h>

#include "model/module.h"

/* features: size of the last input dimension (0: taken from the input); beta0: beta's initial value. */
ct_status swish_create(int64_t features, double beta0, ct_module **out);
/* {"type": "swish", "features": 64, "beta": 1.0}, both optional: what ct_register_module_type takes. */
ct_status swish_from_json(const json_t *spec, const char *path, ct_module **out);

#endif
