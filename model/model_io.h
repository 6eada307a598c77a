/* Model weights in HDF5: the format of saved models and of the weights inside checkpoints.
 *
 * model.h5 holds one dataset per parameter and per buffer, named by its PyTorch-style name
 * ("layers.0.weight", "layers.1.running_mean") with its shape and the model's dtype, and the model's
 * JSON spec as the root attribute "config", so h5py, h5dump and a PyTorch state_dict loader read it
 * directly. The file is written under a temporary name and renamed, so a crash never leaves half of
 * one behind. Loading is strict, as PyTorch's load_state_dict(strict=True): a tensor missing from the
 * file, one the model does not have, or a shape that differs is an error naming it. */
#ifndef CT_MODEL_IO_H
#define CT_MODEL_IO_H

#include <jansson.h>

#include "model/model.h"

/* Writes the model's parameters and buffers to `file`; spec (may be NULL) becomes the "config"
 * attribute. */
ct_status ct_model_save_h5(const ct_model *m, const json_t *spec, const char *file);
/* The same file from copies of the model's flat parameters and buffers (a snapshot taken earlier:
 * the model gives names, shapes and offsets only); buffers may be NULL when the model has none. */
ct_status ct_model_save_h5_values(const ct_model *m, const ct_tensor *values, const ct_tensor *buffers,
                                  const json_t *spec, const char *file);
/* Reads every parameter and buffer of m from `file` (CT_ERR_IO when it cannot be opened,
 * CT_ERR_FORMAT naming the tensor for a missing, extra or mis-shaped one). */
ct_status ct_model_load_h5(ct_model *m, const char *file);

#endif
