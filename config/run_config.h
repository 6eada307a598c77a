/* Run configs: the JSON file `ctrainer train run.json` reads, and where its errors point.
 *
 * A run config is one JSON object with the sections
 *   "model"          the model (model/layers.h: mlp, cnn, sequential, gpt, or any registered layer type)
 *   "data"           {"train": dataset, "eval": dataset or {"name": dataset, ...}, "test": dataset}
 *   "loss"           a loss spec (model/loss.h; default cross_entropy)
 *   "metrics"        a list of metric specs (eval/metric.h)
 *   "training_args"  Hugging Face's TrainingArguments (config/args.h)
 *   "callbacks"      a list of callback specs (callbacks/callback.h)
 *   "init_from"      a .safetensors file (relative to the config's directory) whose weights replace
 *                    the model's initialisation (model/model_safetensors.h)
 * Unknown sections get "did you mean".
 *
 * jansson reports line:column for syntax errors only; once parsed, values have no positions. So the
 * loader keeps the file's text, and ct_run_config_locate walks it to find where a JSON path
 * ("training_args.learning_rate", "model.layers[2].out_features") sits. Config errors anywhere
 * (argument schema, layers, optimizer, datasets) start their message with the path of the value
 * they are about; ct_run_config_annotate finds that path and puts "file:line:column: " in front, so
 * every config error points at the line to fix, from one place. */
#ifndef CT_RUN_CONFIG_H
#define CT_RUN_CONFIG_H

#include <jansson.h>
#include <stdbool.h>

#include "core/status.h"

typedef struct ct_run_config {
    json_t *root;   /* owned object */
    char *text;     /* the file's text as read (NULL for a config built in memory) */
    char *file;     /* the path it was read from ("<memory>" otherwise) */
    char *base_dir; /* the file's directory, for relative paths inside it ("." otherwise) */
    bool modified;  /* a --set changed root after loading: positions may point at the original */
} ct_run_config;

/* Reads and parses `file`. A missing or unreadable file is CT_ERR_IO naming it; a syntax error is
 * CT_ERR_CONFIG "file:line:column: <jansson's message>"; a root that is not an object or an unknown
 * section is CT_ERR_CONFIG with its position. */
ct_status ct_run_config_load(const char *file, ct_run_config *out);
/* From text in memory (tests); `name` stands for the file name in messages. */
ct_status ct_run_config_parse(const char *text, const char *name, ct_run_config *out);
void ct_run_config_free(ct_run_config *c);

/* Applies `--set dotted.key=JSON`: "model.hidden=[256,128]", "training_args.seed=3",
 * "data.train.limit=100". Intermediate objects are created as needed; the value must be valid JSON
 * (a bare word that is not JSON is taken as a string, as a convenience). CT_ERR_CONFIG naming the
 * assignment when it is malformed. */
ct_status ct_run_config_set(ct_run_config *c, const char *assignment);

/* The section `name` (NULL when absent). */
json_t *ct_run_config_section(const ct_run_config *c, const char *name);

/* Finds the 1-based line and column of the value at `path` in the file's text. False when the text
 * is unknown or the path is not in it. */
bool ct_run_config_locate(const ct_run_config *c, const char *path, int *line, int *column);

/* For a CT_ERR_CONFIG status s whose message (ct_last_error()) starts with a JSON path of this
 * config, rewrites the message as "file:line:column: message" (or "file: message" when the path has
 * no position). Returns s unchanged; any other status passes through untouched. */
ct_status ct_run_config_annotate(const ct_run_config *c, ct_status s);

#endif
