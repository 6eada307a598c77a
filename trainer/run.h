/* A run: everything a run config describes, built and ready to hand to a Trainer.
 *
 * ct_run_prepare turns a loaded run config (trainer/run_config.h) into training arguments (defaults,
 * then the config's "training_args", then command-line overrides), datasets, a model built for the
 * largest batch, a loss and the callbacks the config lists; every config error on the way points at
 * its file:line:column. ct_run_setup then gives the ct_trainer_setup for ct_trainer_init. The CLI is
 * a thin layer over these two calls, and a C application that subclasses the Trainer can use them
 * to keep its models and data in JSON too. */
#ifndef CT_RUN_H
#define CT_RUN_H

#include "trainer/run_config.h"
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
 * cross_entropy) and the callbacks. On failure everything built so far is released. */
ct_status ct_run_prepare(ct_run *r, ct_run_config *config, const ct_arg_override *overrides, int n,
                         ct_run_purpose purpose);
/* The trainer setup for r: model, loss, datasets, metrics and config (borrowed from r) and the
 * config's callbacks (which ct_trainer_init moves into the trainer). */
ct_trainer_setup ct_run_setup(ct_run *r);
void ct_run_free(ct_run *r);

#endif
