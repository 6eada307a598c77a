/* A run: everything a run config describes, built and ready to hand to a Trainer.
 *
 * ct_run_prepare turns a loaded run config (config/run_config.h) into training arguments (defaults,
 * then the config's "training_args", then command-line overrides), datasets, a model built for the
 * largest batch, a loss and the callbacks the config lists; every config error on the way points at
 * its file:line:column. ct_run_setup then gives the ct_trainer_setup for ct_trainer_init. The CLI is
 * a thin layer over these two calls, and a C application that subclasses the Trainer can use them
 * to keep its models and data in JSON too. Pieces the application makes in C (its own dataset object,
 * a loss) join the JSON sections through ct_run_build_with; its own types can also be named in the
 * JSON once registered (ct_register_dataset_type, ct_register_metric_type, ct_register_loss_type,
 * ct_register_callback_type, ct_register_module_type). */
#ifndef CT_RUN_H
#define CT_RUN_H

#include "config/run_config.h"
#include "trainer/trainer.h"

/* A command-line override of one training argument: --name value. */
typedef struct ct_arg_override {
    const char *name, *value;
} ct_arg_override;

typedef struct ct_run {
    ct_run_config config;
    ct_training_args args;
    ct_dataset *train;
    int n_eval;
    ct_dataset *eval[CT_TRAINER_MAX_EVAL_SETS];
    char eval_names[CT_TRAINER_MAX_EVAL_SETS][64];
    ct_dataset *test;
    ct_device device; /* training_args.device as resolved for this process: where the model is built */
    ct_model model;
    bool model_built;
    ct_loss *loss;
    ct_callback_list callbacks; /* from the config's "callbacks"; ct_trainer_init takes them */
} ct_run;

/* What to build: the training set only when training; the test set only when predicting. */
typedef enum ct_run_purpose { CT_RUN_TRAIN, CT_RUN_EVALUATE, CT_RUN_PREDICT } ct_run_purpose;

/* Takes ownership of *config (also on failure). Resolves the arguments (n overrides applied after
 * the config's training_args) and validates them, builds the data the purpose needs, the model (its
 * "num_classes" defaults to the data's for the mlp and cnn presets), the loss (default
 * cross_entropy) and the callbacks. The model is built on training_args.device (ct_training_args_device:
 * "auto" takes the GPU of the process's local rank where one is visible). On failure everything built so far is released.
 * Same as ct_run_resolve followed by ct_run_build(r, purpose, NULL). */
ct_status ct_run_prepare(ct_run *r, ct_run_config *config, const ct_arg_override *overrides, int n,
                         ct_run_purpose purpose);

/* ct_run_prepare in two stages, for a program of several processes: the communicator needs the
 * resolved arguments (ddp_timeout), and the datasets are best built with it. ct_run_resolve takes
 * ownership of *config (also on failure) and resolves and validates the arguments; ct_run_build then
 * builds the rest. With a communicator, the datasets are built inside
 * ct_comm_main_process_first(comm, true, "building datasets", ...) (dist/comm.h): local rank 0 of
 * each node first (say, building a missing dataset cache, data/dataset_cache.h), then the others,
 * which find it built; a failure of a node's first process fails every process, with its message.
 * NULL: built here, as by ct_run_prepare. Each stage releases everything in r on failure (r is
 * then zeroed, so ct_run_free of it is harmless). */
ct_status ct_run_resolve(ct_run *r, ct_run_config *config, const ct_arg_override *overrides, int n);
ct_status ct_run_build(ct_run *r, ct_run_purpose purpose, ct_comm *comm);
/* What an application made in C, in place of the config's section for it: datasets instead of
 * "data"'s "train", "eval" (n_eval sets; names as the JSON's keys, NULL for a single unnamed one) and
 * "test", a loss instead of "loss". Everything given moves into the run (freed by ct_run_free, also
 * when building fails; *pieces is zeroed). A piece whose section the config also has is refused
 * (CT_ERR_CONFIG naming it: one of the two would be silently unused), as is a loss beside
 * training_args.label_smoothing_factor. The model is still the config's, sized from the datasets
 * (the presets' num_classes comes from a C dataset's spec as from a JSON one). C-made metrics go
 * to the Trainer through ct_trainer_setup.make_metrics and callbacks through r->callbacks
 * (ct_callback_list_add) or ct_trainer_add_callback. */
typedef struct ct_run_pieces {
    ct_dataset *train, *test;
    int n_eval;
    ct_dataset *eval[CT_TRAINER_MAX_EVAL_SETS];
    const char *eval_names[CT_TRAINER_MAX_EVAL_SETS];
    ct_loss *loss;
} ct_run_pieces;
/* ct_run_build with pieces (NULL: none, the same as ct_run_build). */
ct_status ct_run_build_with(ct_run *r, ct_run_purpose purpose, ct_comm *comm, ct_run_pieces *pieces);
/* The trainer setup for r: model, loss, datasets, metrics and config (borrowed from r) and the
 * config's callbacks (which ct_trainer_init moves into the trainer). */
ct_trainer_setup ct_run_setup(ct_run *r);
void ct_run_free(ct_run *r);

#endif
