/* `ctrainer export --model DIR [--format safetensors] [--output OUT_DIR] [--dtype D] [CONFIG]`: a
 * saved model as model.safetensors and config.json for PyTorch (model/export.h). */
#include <stdio.h>
#include <string.h>

#include "checkpoint/checkpoint_io.h"
#include "cli/cli.h"
#include "cli/output_guard.h"
#include "config/run_config.h"
#include "model/export.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: ctrainer export --model DIR [--format safetensors] [--output OUT_DIR] [--dtype f32|f64|bf16|f16]\n"
            "                       [CONFIG]\n\n"
            "Writes the model saved in DIR (a run's output_dir or a checkpoint-N directory, with model.h5) as\n"
            "OUT_DIR/model.safetensors and OUT_DIR/config.json (OUT_DIR defaults to DIR).\n\n"
            "model.safetensors is the state_dict of the PyTorch module of the same architecture: tensor names\n"
            "are ctrainer's parameter names, which are PyTorch's (nn.Sequential indices for the mlp and cnn\n"
            "presets, nanoGPT's names for gpt), batch norms also get num_batches_tracked and the GPT its tied\n"
            "lm_head.weight, so that in PyTorch\n"
            "    from safetensors.torch import load_file\n"
            "    model.load_state_dict(load_file(\"OUT_DIR/model.safetensors\"))\n"
            "loads it strictly. config.json is the model's spec with every size filled in (for gpt the\n"
            "GPT2Config sizes); as a run config's \"model\" with \"init_from\": \"OUT_DIR/model.safetensors\"\n"
            "it rebuilds the same model.\n\n"
            "  --model DIR      the saved model (required)\n"
            "  --format F       the output format: safetensors (the default and only one)\n"
            "  --output OUT_DIR where to write (created when missing; default DIR; not another saved model's)\n"
            "  --dtype D        convert the weights to f32, f64, bf16 or f16 (default: as saved)\n"
            "  CONFIG           a run config whose \"model\" describes the model (default: the spec saved\n"
            "                   with it)\n");
}

int ct_cli_export(int argc, char **argv) {
    const char *model = NULL, *format = "safetensors", *output = NULL, *dtype = NULL, *config = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        }
        const char **slot = strcmp(a, "--model") == 0    ? &model
                            : strcmp(a, "--format") == 0 ? &format
                            : strcmp(a, "--output") == 0 ? &output
                            : strcmp(a, "--dtype") == 0  ? &dtype
                                                         : NULL;
        if (slot) {
            if (i + 1 >= argc) {
                fprintf(stderr, "ctrainer export: %s needs a value\n", a);
                return 2;
            }
            *slot = argv[++i];
        } else if (strncmp(a, "-", 1) == 0) {
            fprintf(stderr, "ctrainer export: unknown option '%s' (ctrainer export --help)\n", a);
            return 2;
        } else if (config) {
            fprintf(stderr, "ctrainer export: unexpected argument '%s' (the config is '%s')\n", a, config);
            return 2;
        } else {
            config = a;
        }
    }
    if (!model) {
        fprintf(stderr, "ctrainer export: --model DIR is required (a directory with model.h5)\n");
        usage(stderr);
        return 2;
    }
    if (strcmp(format, "safetensors") != 0) {
        fprintf(stderr, "ctrainer export: unknown format '%s' (supported: safetensors)\n", format);
        return 2;
    }
    ct_run_config rc = {0};
    const json_t *spec = NULL;
    if (config) {
        ct_status s = ct_run_config_load(config, &rc);
        if (s != CT_OK) {
            fprintf(stderr, "ctrainer export: %s\n", ct_last_error());
            return 2;
        }
        spec = ct_run_config_section(&rc, "model");
        if (!spec) {
            fprintf(stderr, "ctrainer export: %s: the run config has no \"model\" section\n", config);
            ct_run_config_free(&rc);
            return 2;
        }
    }
    /* Another saved model's directory keeps its own files: its model.safetensors is its weights. */
    if (output && !cli_same_file(output, model) && ct_checkpoint_has_manifest(output)) {
        fprintf(stderr, "ctrainer export: --output %s holds another saved model (its manifest.json), whose "
                "model.safetensors and config.json this export would replace; choose another directory\n", output);
        ct_run_config_free(&rc);
        return 2;
    }
    /* the saved model checks out against its manifest before anything is read from it */
    ct_export_options o = {.model_dir = model, .output_dir = output, .model_spec = spec, .dtype = dtype,
                           .verify_dir = ct_checkpoint_verify};
    int n = 0;
    ct_status s = ct_export_safetensors(&o, &n);
    if (s == CT_OK) {
        const char *dir = output ? output : model;
        printf("exported %d tensors to %s/model.safetensors, the model's config to %s/config.json\n", n, dir, dir);
    } else {
        if (config) ct_run_config_annotate(&rc, s);
        fprintf(stderr, "ctrainer export: %s\n", ct_last_error());
    }
    ct_run_config_free(&rc);
    return s == CT_OK ? 0 : s == CT_ERR_CONFIG || s == CT_ERR_INVALID_ARG ? 2 : 1;
}
