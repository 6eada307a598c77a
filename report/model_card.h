/* The model card: README.md in output_dir, as Hugging Face's Trainer.create_model_card writes it.
 *
 * Sections, in Hugging Face's order and with its wording where it has one: YAML metadata
 * (library_name, tags, datasets, metrics, model-index), the title (output_dir's name), the final
 * evaluation results with their confidence intervals (and the test set's), the model (type,
 * parameter count, its config), the data (each split's dataset spec and size), the training
 * procedure with the training curves (training_curves.png and .svg, drawn by report/plot.h next to
 * the card; a ctrainer built without cairo writes the card without them and says so), the training hyperparameters (Hugging Face's list: learning_rate, train_batch_size,
 * eval_batch_size, seed, optimizer, lr_scheduler_type, num_epochs or training_steps, ...), the
 * "Training results" table (Training Loss | Epoch | Step | Validation Loss | metrics, one row per
 * evaluation, values rounded to 4 decimals) and the framework versions.
 *
 * `ctrainer train` writes the card after its final evaluation and prediction. The Trainer itself
 * does not write one when it saves a model (neither does Hugging Face's, outside push_to_hub): an
 * application calls ct_trainer_create_model_card when its run is done. */
#ifndef CT_MODEL_CARD_H
#define CT_MODEL_CARD_H

#include <jansson.h>

#include "core/status.h"

struct ct_trainer;

/* Writes output_dir/README.md (replacing one that is there) and the curves next to it, on the
 * world's process zero only (a no-op elsewhere). eval_metrics: the final evaluation
 * (eval_results.json's object; NULL: the last evaluation in the log history, as Hugging Face takes
 * it); test_metrics: the test set's (NULL: none). A history with nothing to draw gives a card
 * without the figure. Errors: CT_ERR_IO naming the file that could not be written. */
ct_status ct_trainer_create_model_card(struct ct_trainer *t, const json_t *eval_metrics, const json_t *test_metrics);

#endif
