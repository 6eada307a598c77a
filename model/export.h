/* Exporting a saved model for PyTorch: `ctrainer export`.
 *
 * A saved model directory (a run's output_dir or one of its checkpoint-N) holds model.h5: every
 * parameter and buffer under its PyTorch name, and the model's JSON spec. Exporting writes, into
 * the output directory,
 *   model.safetensors  the PyTorch state_dict of the same architecture (model/model_safetensors.h:
 *                      ctrainer's names, plus num_batches_tracked for batch norms and the GPT's
 *                      tied lm_head.weight), metadata {"format": "pt"};
 *   config.json        the model's spec with the values its builder would otherwise take from
 *                      defaults or from the data filled in (for gpt every GPT2Config size:
 *                      vocab_size, n_positions, n_embd, n_layer, n_head, ...; for the mlp and cnn
 *                      presets num_classes), so it is a complete "model" section for a run config,
 *                      and with "init_from" pointing at model.safetensors rebuilds the same model.
 * The model is not rebuilt: its input shape would need the data. The tensors are taken as
 * model.h5 has them (float32, or float64 for a model trained in double) unless a dtype is asked for. */
#ifndef CT_EXPORT_H
#define CT_EXPORT_H

#include <jansson.h>

#include "core/status.h"

typedef struct ct_export_options {
    const char *model_dir;    /* a directory with model.h5 */
    const char *output_dir;   /* NULL: model_dir; created when missing */
    const json_t *model_spec; /* NULL: the spec saved in model.h5 (its "config" attribute) */
    const char *dtype;        /* "f32", "f64", "bf16", "f16"; NULL or "": as saved */
    /* checks model_dir before anything is read from it, once the options are known to be valid
     * (`ctrainer export` passes ct_checkpoint_verify, which sits above this area); NULL: none */
    ct_status (*verify_dir)(const char *model_dir);
} ct_export_options;

/* CT_ERR_IO for a directory without a readable model.h5, CT_ERR_CONFIG for a missing or invalid
 * model spec or an unknown dtype, CT_ERR_FORMAT for a model.h5 that is not one ctrainer wrote. On
 * success *n_tensors (may be NULL) is the number of tensors written. */
ct_status ct_export_safetensors(const ct_export_options *o, int *n_tensors);

#endif
