/* Hugging Face's from_pretrained for ctrainer: a saved model back in one call.
 *
 * A saved model directory (a run's output_dir after training, or any checkpoint-<step>) holds
 * model.h5 with the weights, the architecture (the "config" attribute: the run config's "model", or
 * the layers' own specs for a model built in C, model/module.h's to_json) and the per-sample input
 * shape. ct_model_from_pretrained rebuilds the layers from the architecture (any registered layer
 * type, ct_register_module_type included), builds the model for that input, verifies the directory's
 * manifest and loads the weights through the one reader of saved models (ct_checkpoint_load_model),
 * so a damaged file is an error naming it rather than a model that predicts garbage. */
#ifndef CT_PRETRAINED_H
#define CT_PRETRAINED_H

#include "model/model.h"

typedef struct ct_pretrained_options {
    ct_device device;  /* where to build the model (zero: the CPU) */
    int64_t max_batch; /* largest batch forward will see (0: 64); the Trainer grows it when it needs more */
    uint64_t seed;     /* dropout's key, as ct_model_options.seed */
} ct_pretrained_options;

/* Builds *out from dir (o NULL: the defaults above). The model is ready for ct_model_forward, in
 * evaluation mode (dropout off, batch norms on their running statistics) as Hugging Face's
 * from_pretrained returns one, or for a Trainer (ct_trainer_setup.model; training switches it to
 * training mode); free it with ct_model_free. Errors name dir and the file: no
 * model.h5, no architecture in it, an unknown layer type (register it first), a manifest that does
 * not match, a missing or mis-shaped tensor. On failure *out needs no freeing. */
ct_status ct_model_from_pretrained(const char *dir, const ct_pretrained_options *o, ct_model *out);

#endif
