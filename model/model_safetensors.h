/* A model's weights as a PyTorch state_dict in safetensors: what `ctrainer export` writes and what
 * a run config's "init_from" reads.
 *
 * ctrainer's parameter and buffer names are PyTorch's module names (nn.Sequential indices for the
 * mlp and cnn presets, nanoGPT's names for gpt), so the file is the state_dict of the PyTorch
 * module of the same architecture, loadable with model.load_state_dict(load_file(...)) and the
 * default strict=True. Two things PyTorch's state_dict has that ctrainer's store does not are
 * added on save and accepted on load:
 *   - "<bn>.num_batches_tracked" (an I64 scalar) beside every batch norm's running_mean and
 *     running_var. ctrainer always updates the running statistics with a momentum and keeps no
 *     count, so the value written is 0; PyTorch reads it only when momentum=None.
 *   - "lm_head.weight" for the GPT, whose head is tied to transformer.wte.weight (nanoGPT's
 *     state_dict lists the one tensor under both names): written as a copy. On load it must equal
 *     transformer.wte.weight, and when the file has only lm_head.weight (safetensors.torch.save_model
 *     keeps one name of a tied pair, and records the other in "__metadata__") it provides wte.
 * More generally, a name the model needs that is missing from the file but that "__metadata__"
 * maps to a tensor of the file (save_model's record of a tensor it dropped as shared) is read from
 * that tensor. nanoGPT's causal-mask buffers "transformer.h.<i>.attn.bias" (4-D, written by
 * PyTorch versions without flash attention) carry no weights and are skipped.
 *
 * Loading is strict like load_state_dict(strict=True): every parameter and buffer must be in the
 * file with the same shape; F16, BF16, F32 and F64 are converted to the model's dtype. Missing and
 * unexpected names are reported together, with a "did you mean" for an unexpected name close to a
 * missing one (a wrapper's prefix such as "model." included). */
#ifndef CT_MODEL_SAFETENSORS_H
#define CT_MODEL_SAFETENSORS_H

#include <jansson.h>

#include "core/format/safetensors.h"
#include "model/model.h"

/* One tensor of a state dict (a CPU F32 or F64 tensor). */
typedef struct ct_named_tensor {
    const char *name;
    ct_tensor value;
} ct_named_tensor;

/* Writes items (the parameters and buffers of a model whose root module type is model_type, e.g.
 * "gpt", "sequential") with PyTorch's extras (above) to `file`, converting floats to dtype (F16,
 * BF16, F32 or F64; CT_ST_NUM_DTYPES keeps each tensor's own). "__metadata__" is {"format": "pt"},
 * which Hugging Face's loaders expect. */
ct_status ct_state_dict_save_safetensors(const char *model_type, const ct_named_tensor *items, int n, ct_st_dtype dtype,
                                         const char *file);
/* The same for a built model's parameters and buffers. */
ct_status ct_model_save_safetensors(const ct_model *m, ct_st_dtype dtype, const char *file);

/* Reads every parameter and buffer of m from `file` (strict, see above). CT_ERR_IO when it cannot be
 * read, CT_ERR_FORMAT naming the file and the tensors for a file that does not fit the model (names,
 * shapes, dtypes, a tied head that is not tied), found before anything is read: m is then unchanged. */
ct_status ct_model_load_safetensors(ct_model *m, const char *file);

/* A run config's "init_from" value (a path to a .safetensors file, relative to base_dir unless
 * absolute): loads it into m. A value that is not a non-empty string is CT_ERR_CONFIG
 * "init_from: ..."; other errors are prefixed "init_from: ". */
ct_status ct_model_init_from_json(ct_model *m, const json_t *value, const char *base_dir);

#endif
