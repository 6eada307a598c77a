/* Private to config/: what the training-argument files share beyond args.h. args.c holds the schema
 * table and everything read from it; args_refused.c the Hugging Face arguments ctrainer refuses;
 * args_doc.c the reference page (docs/config.md) written from both. */
#ifndef CT_ARGS_IMPL_H
#define CT_ARGS_IMPL_H

#include <jansson.h>
#include <stdbool.h>

/* A field of Hugging Face's TrainingArguments that has no use here: its default there, and why. */
typedef struct ct_refused_arg {
    const char *name, *hf_default, *why;
} ct_refused_arg;

/* The whole list (*n entries), in the order docs/config.md gives it. */
const ct_refused_arg *ct_refused_args(int *n);
/* The entry named name, or NULL. */
const ct_refused_arg *ct_refused_arg_find(const char *name);
/* Whether v asks for nothing (Hugging Face's default, null, false, "", [] or {}, or an object of only
 * a harmless key at a boolean, such as gradient_checkpointing_kwargs' use_reentrant): a config
 * written for Hugging Face may name the argument at such a value, which is ignored. */
bool ct_refused_arg_asks_nothing(const ct_refused_arg *r, const json_t *v);

/* Whether schema row i (ct_training_args_schema's order) takes "a count or a ratio". */
bool ct_training_args_count_or_ratio(int i);

#endif
