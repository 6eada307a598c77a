/* Private pieces of the GPT model (model/gpt.c): the transformer block and its causal
 * self-attention (model/gpt_block.c). Their children are ordinary layers under nanoGPT's local
 * names, which is how the model finds them again to apply GPT-2's initialisation. */
#ifndef CT_GPT_IMPL_H
#define CT_GPT_IMPL_H

#include "model/layers.h"

/* One pre-LayerNorm block, nanoGPT's Block: x + attn(ln_1(x)), then x + mlp(ln_2(x)), with the
 * children ln_1, attn (c_attn, c_proj, attn_dropout, resid_dropout), ln_2 and mlp (a sequential of
 * c_fc, gelu, c_proj, dropout). Maps [T, n_embd] to itself for T up to the model's n_positions. */
ct_status ct_gpt_block_create(const ct_gpt_config *cfg, ct_module **out);

/* Makes child parent's child `name` (destroying child when that fails) and stores it in *slot
 * (when slot is not NULL). */
ct_status ct_gpt_adopt(ct_module *parent, ct_module *child, const char *name, ct_module **slot);

/* The child of m with the given local name; aborts when there is none (the GPT's own structure). */
ct_module *ct_gpt_child(const ct_module *m, const char *local_name);

#endif
