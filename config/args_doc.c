/* The reference page of the training arguments (docs/config.md), written from the schema table
 * (config/args.c), the Hugging Face arguments ctrainer refuses (args_refused.c) and the list of
 * the places where ctrainer keeps its own behaviour against transformers. unit.test_args fails when
 * docs/config.md is not this page. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "config/args.h"
#include "config/args_impl.h"

/* Text for a table cell: '|' escaped so it cannot split the cell. */
static void cell(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '|')
            fputs("\\|", f);
        else
            fputc(*s, f);
    }
}

static const char *type_name(const ct_arg_spec *spec, int i) {
    switch (spec->type) {
    case CT_ARG_BOOL: return "bool";
    case CT_ARG_INT: return "int";
    case CT_ARG_REAL: return ct_training_args_count_or_ratio(i) ? "float (count or ratio)" : "float";
    case CT_ARG_STRING: return "string";
    case CT_ARG_ENUM: return "string";
    case CT_ARG_OBJECT: return "object";
    case CT_ARG_LIST: return "string or list";
    }
    return "?";
}

/* Where ctrainer keeps its own behaviour against transformers 4.51.3 (each a defect there), found
 * by tests/oracle/test_trainer_differential.py, which leaves exactly these out by name. */
static const char differences_text[] =
    "\n## Differences from Hugging Face\n\n"
    "ctrainer follows transformers 4.51.3's Trainer rule for rule (tests/oracle/test_trainer_differential.py runs "
    "both on the same arguments and compares every decision), except where 4.51.3 has a defect:\n\n"
    "- **The last gradient-accumulation group of an epoch** (`accumulation_tail`). HF's `_inner_training_loop` "
    "(trainer.py:2480) gives the epoch's last update `num_examples % gradient_accumulation_steps` batches, a count "
    "of samples used as a count of batches: when that is fewer than the batches left, the epoch ends without an "
    "optimizer step, the remaining batches are not trained on and the last gradients are carried into the next "
    "epoch's first step. ctrainer steps on the short last group. The defect came with 4.46 (pull request 34198); "
    "4.52 counts the remainder in batches (pull request 37923) and agrees with ctrainer.\n"
    "- **inverse_sqrt's `timescale`** (`inverse_sqrt_timescale`). HF's `get_scheduler` passes inverse_sqrt only "
    "`num_warmup_steps` (optimization.py:582), so a `timescale` in `lr_scheduler_kwargs` is silently ignored there "
    "(the default, `num_warmup_steps` or 10000, applies). ctrainer honours it.\n"
    "- **`best_model_checkpoint` under save_strategy `best`** (`best_model_checkpoint_under_best`). HF sets it only "
    "for save_strategy `steps` and `epoch` (trainer.py:3202), so under `best` it stays null and "
    "load_best_model_at_end loads nothing. ctrainer names the checkpoint each new best was saved to, protects it "
    "from rotation and loads it at the end. (best_global_step stays null under `best`, as in HF.)\n"
    "- **eval_on_start in a resumed run** (`eval_on_start_on_resume`). HF's `_inner_training_loop` runs the "
    "eval_on_start evaluation at the start of every `train()` call (trainer.py:2471), a resumed one too, so a "
    "resumed run logs an evaluation at the resumed step that the uninterrupted run does not have. ctrainer "
    "evaluates on start only in a fresh run, so that a run killed and resumed logs exactly what the uninterrupted "
    "run logs.\n"
    "- **polynomial with a warmup of every step** (`polynomial_without_decay`). HF's polynomial schedule divides by "
    "`num_training_steps - num_warmup_steps` (optimization.py:236), so when the warmup takes every step the "
    "scheduler's step after the last optimizer step raises ZeroDivisionError and the run fails. ctrainer takes the "
    "limit, `lr_end`.\n\n"
    "Rules where ctrainer matches HF 4.51.3 on purpose, though they may surprise: eval_on_start's evaluation "
    "neither counts toward the best metric nor steps reduce_lr_on_plateau (HF's `_evaluate(skip_scheduler=True)`); "
    "best_global_step is set only under save_strategy `steps` and `epoch`; save_strategy `best` with eval_strategy "
    "`no` is accepted and never saves (a warning says so); a checkpoint's TrainerControl is recorded before on_save "
    "lowers should_save; a resume restores callback states and TrainerControl only with "
    "restore_callback_states_from_checkpoint.\n\n"
    "Rules that differ by choice:\n\n"
    "- **A resumed run's rates.** A resumed run trains with its own `learning_rate`, `weight_decay` and "
    "`adam_epsilon`, and a warning names each that differs from the checkpoint's. HF's resume loads the "
    "optimizer's param_groups and the scheduler's base_lrs from the checkpoint, so there a changed value is "
    "silently ignored. A change the saved optimizer state depends on (adam_beta1, adam_beta2, amsgrad, momentum, "
    "dampening, the optimizer) is refused with both values named.\n"
    "- **train_loss of a resumed run.** ctrainer's checkpoints carry the sum of the losses already logged, so a "
    "resumed run's train_loss is the uninterrupted run's. HF starts that sum at 0 on resume and still divides by "
    "the whole global_step, so its train_loss counts only the steps after the resume.\n"
    "- **dataloader_drop_last in evaluation.** ctrainer drops a short last batch in training only; evaluation "
    "and prediction see every sample once, so their numbers do not depend on the batch size or the number of "
    "processes. HF's get_eval_dataloader drops the short last batch too.\n"
    "- **The loss of a gradient-accumulation step** is the sum of its micro-batches' losses divided by the "
    "step's count (every micro-batch, every process), whatever the model. HF does so only for a model whose "
    "forward takes num_items_in_batch (`model_accepts_loss_kwargs`); for another, it averages the micro-batches' "
    "means, which weighs a short last micro-batch more.\n"
    "- **report_to** defaults to `none`, as transformers 5 does; 4.51's `all` reports to every integration "
    "installed.\n"
    "- **A NaN or infinite loss** stops the run with an error naming the step (`nan_inf_policy` `error`; `skip` "
    "drops the step's update, `stop` saves the last good step). HF trains on, its weights then NaN "
    "(logging_nan_inf_filter only keeps such losses out of the logged average).\n"
    "- **A run of no steps** (`num_train_epochs` 0) is refused at the start; HF runs a training of no steps.\n";

char *ct_training_args_markdown(void) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len); /* the page grows in memory */
    if (!f) return NULL;
    int n_args, n_refused;
    const ct_arg_spec *specs = ct_training_args_schema(&n_args);
    const ct_refused_arg *refused = ct_refused_args(&n_refused);
    fputs("# Configuration reference\n\n"
          "A run config (`ctrainer train run.json`) is one JSON object with the sections `model`, `data`, "
          "`loss`, `metrics`, `training_args` and `callbacks`. This page lists `training_args`: Hugging Face's "
          "TrainingArguments (transformers 4.51), with the same names, defaults and meanings. Any of them can "
          "also be given on the command line (`--learning_rate 3e-4`) or with `--set "
          "training_args.seed=3`. Steps arguments marked \"count or ratio\" take a number of optimizer steps, or "
          "below 1 a fraction of the run's total steps (rounded up). A `null` default means \"not set\"; the "
          "description says what applies then. Errors name the argument and its line in the file.\n\n"
          "This file is generated from the schema in `config/args.c` (`build/tests/test_args --markdown > "
          "docs/config.md`); the unit test `test_args` fails when the two differ.\n\n",
          f);
    fputs("| Argument | Type | Default | Allowed | Description |\n|---|---|---|---|---|\n", f);
    for (int i = 0; i < n_args; i++) {
        fprintf(f, "| `%s` | %s | `", specs[i].name, type_name(&specs[i], i));
        cell(f, specs[i].default_text);
        fputs("` | ", f);
        if (specs[i].allowed)
            for (int k = 0; specs[i].allowed[k]; k++) fprintf(f, "%s`%s`", k ? ", " : "", specs[i].allowed[k]);
        fputs(" | ", f);
        cell(f, specs[i].doc);
        fputs(" |\n", f);
    }
    fputs("\n## Hugging Face arguments that do not apply\n\n"
          "Every other field of TrainingArguments (and Seq2SeqTrainingArguments) 4.51.3. A config may name one at "
          "a value that asks for nothing (Hugging Face's default, null, false, \"\", [] or {}), so configs "
          "written for Hugging Face run; any other value is refused (exit 2) with the reason below.\n\n"
          "| Argument | Accepted value | Why ctrainer has no use for it |\n|---|---|---|\n",
          f);
    for (int i = 0; i < n_refused; i++) {
        fprintf(f, "| `%s` | `", refused[i].name);
        cell(f, refused[i].hf_default);
        fputs("` | ", f);
        cell(f, refused[i].why);
        fputs(" |\n", f);
    }
    fputs(differences_text, f);
    bool ok = !ferror(f);
    if (fclose(f) != 0 || !ok) {
        free(text);
        return NULL;
    }
    return text;
}
