/* Model weights in HDF5: the format of saved models and of the weights inside checkpoints.
 *
 * model.h5 holds one dataset per parameter and per buffer, named by its PyTorch-style name
 * ("layers.0.weight", "layers.1.running_mean") with its shape and the model's dtype, and the model's
 * JSON spec as the root attribute "config" (the spec given, else the layers' own: ct_module_to_json),
 * the per-sample input as "input_shape" (a JSON list) and "input_dtype" (f32, i64, ...), so h5py, h5dump and a PyTorch state_dict loader read it
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
/* The architecture a saved model.h5 records: *spec (a new reference: the "config" attribute), the
 * per-sample input shape and dtype. CT_ERR_FORMAT naming the file when it has none (saved from a
 * model with a layer without to_json) or they are damaged. ct_model_from_pretrained
 * (checkpoint/pretrained.h) builds the model from it. */
ct_status ct_model_read_h5_architecture(const char *file, json_t **spec, ct_shape *in_shape, ct_dtype *in_dtype);
/* Reads every parameter and buffer of m from `file` (CT_ERR_IO when it cannot be opened,
 * CT_ERR_FORMAT naming the tensor for a missing, extra or mis-shaped one). */
ct_status ct_model_load_h5(ct_model *m, const char *file);

#endif
