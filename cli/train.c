/* `ctrainer train | evaluate | predict CONFIG [options]`: a run config driven through the Trainer.
 *
 *   train     trains, saves the final model and trainer_state.json in output_dir, then evaluates
 *             the eval sets and predicts the test set when the config has them (Hugging Face's
 *             run_*.py scripts with do_train, do_eval and do_predict), and writes the model card
 *             (README.md and training_curves.png, report/model_card.h).
 *   evaluate  loads --model DIR's weights and evaluates the eval sets (or the test set).
 *   predict   loads --model DIR's weights and writes the test set's logits, predicted classes and
 *             labels to --output FILE.h5, in dataset order.
 * train --resume_from_checkpoint [latest|DIR] continues a run exactly; SIGTERM/SIGINT stop training at
 * the next step with a checkpoint and exit 128 + the signal. A fresh run starts only in a missing or
 * empty output_dir unless overwrite_output_dir is true; predict never writes over a file it reads.
 * Options shared by all three: --<training_argument> VALUE (any name of `ctrainer config --defaults`)
 * and --set dotted.key=JSON, applied after the config's own values.
 * As in HF's example scripts, the process that logs (should_log) shows info lines on stderr (the
 * "***** Running training *****" block, "Resuming from ..."), the others warnings only; log_level and
 * log_level_replica change that. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoint/checkpoint_io.h"
#include "checkpoint/checkpoint.h"
#include "cli/cli.h"
#include "cli/output_guard.h"
#include "core/dir_lock.h"
#include "core/log.h"
#include "core/ops/ops.h"
#include "model/model_io.h"
#include "report/model_card.h"
#include "report/plot.h"
#include "trainer/run.h"

#define MAX_OPTIONS 256

typedef struct cli_opts {
    const char *command, *config, *model_dir, *output, *resume;
    const char *sets[MAX_OPTIONS];
    int n_sets;
    ct_arg_override args[MAX_OPTIONS];
    int n_args;
} cli_opts;

static void usage(FILE *f, const char *command) {
    if (strcmp(command, "train") == 0)
        fprintf(f, "usage: ctrainer train CONFIG [--resume_from_checkpoint [latest|DIR]] [--<training_arg> VALUE ...]\n"
                   "                             [--set dotted.key=JSON ...]\n");
    else if (strcmp(command, "evaluate") == 0)
        fprintf(f, "usage: ctrainer evaluate CONFIG --model DIR [--<training_arg> VALUE ...] [--set dotted.key=JSON ...]\n");
    else
        fprintf(f, "usage: ctrainer predict CONFIG --model DIR --output FILE.h5 [--<training_arg> VALUE ...]\n"
                   "                               [--set dotted.key=JSON ...]\n");
    if (strcmp(command, "train") != 0)
        fprintf(f, "\n--model DIR loads DIR/model.h5 (a run's output_dir or a checkpoint); without it the weights come\n"
                   "from the config's \"init_from\": \"FILE.safetensors\" (e.g. from PyTorch or `ctrainer export`).\n");
    fprintf(f, "\nCONFIG is a JSON run config with the sections model, data, loss, metrics, training_args and\n"
               "callbacks (see docs/config.md). --<training_arg> VALUE overrides one training argument (names as\n"
               "Hugging Face's TrainingArguments; list them with `ctrainer config --defaults`); --set changes any\n"
               "value of the config, e.g. --set model.hidden=[512,256]. OMP_NUM_THREADS sets the CPU threads.\n");
}

/* Exit code of a failed status: 2 for what the user wrote wrong, 1 for what went wrong at run time. */
static int fail(const char *command, ct_status s) {
    fprintf(stderr, "ctrainer %s: %s\n", command, ct_last_error());
    fflush(stderr);
    /* Stopped by SIGTERM/SIGINT after saving a checkpoint: the shell's code for that signal. */
    if (s == CT_ERR_INTERRUPTED) return 128 + ct_trainer_stop_signal();
    return s == CT_ERR_CONFIG || s == CT_ERR_INVALID_ARG ? 2 : 1;
}

static int parse(int argc, char **argv, cli_opts *o) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout, o->command);
            return 0;
        }
        bool is_train = strcmp(o->command, "train") == 0;
        if (strncmp(a, "--", 2) != 0) {
            if (o->config) {
                fprintf(stderr, "ctrainer %s: unexpected argument '%s' (the config is '%s')\n", o->command, a, o->config);
                return 2;
            }
            o->config = a;
            continue;
        }
        const char *name = a + 2;
        const char *eq = strchr(name, '=');
        char key[128];
        snprintf(key, sizeof key, "%.*s", (int)(eq ? eq - name : (long)strlen(name)), name);
        const char *value = eq ? eq + 1 : NULL;
        if (is_train && strcmp(key, "resume_from_checkpoint") == 0) {
            /* A bare flag means the newest checkpoint, as "latest". */
            if (!value && i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0 && o->config) value = argv[++i];
            o->resume = value ? value : "latest";
            continue;
        }
        if (!value) {
            if (i + 1 >= argc) {
                fprintf(stderr, "ctrainer %s: --%s needs a value\n", o->command, key);
                return 2;
            }
            value = argv[++i];
        }
        if (strcmp(key, "set") == 0) {
            if (o->n_sets == MAX_OPTIONS) return fprintf(stderr, "ctrainer %s: too many --set\n", o->command), 2;
            o->sets[o->n_sets++] = value;
        } else if (!is_train && strcmp(key, "model") == 0) {
            o->model_dir = value;
        } else if (strcmp(o->command, "predict") == 0 && strcmp(key, "output") == 0) {
            o->output = value;
        } else {
            if (o->n_args == MAX_OPTIONS) return fprintf(stderr, "ctrainer %s: too many options\n", o->command), 2;
            if (!ct_training_args_find(key)) {
                /* Let the schema say "did you mean". */
                ct_training_args scratch;
                ct_training_args_default(&scratch);
                ct_status s = ct_training_args_set(&scratch, key, value);
                ct_training_args_free(&scratch);
                fprintf(stderr, "ctrainer %s: --%s: %s\n", o->command, key,
                        s != CT_OK ? ct_last_error() : "unknown option");
                return 2;
            }
            o->args[o->n_args++] = (ct_arg_override){strdup(key), value};
        }
    }
    if (!o->config) {
        usage(stderr, o->command);
        return 2;
    }
    if (strcmp(o->command, "predict") == 0 && !o->output) {
        fprintf(stderr, "ctrainer predict: --output FILE.h5 is required\n");
        return 2;
    }
    return -1;
}

/* The config, loaded and with its arguments resolved; ct_run_build makes the rest once the
 * communicator exists. */
static ct_status load_run(const cli_opts *o, ct_run *r) {
    ct_run_config c;
    ct_status s = ct_run_config_load(o->config, &c);
    /* A config file that cannot be read is the user's to fix, like a malformed one: exit 2. */
    if (s == CT_ERR_IO) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", ct_last_error()); /* ct_error overwrites the thread's message */
        return ct_error(CT_ERR_CONFIG, "%s", msg);
    }
    CT_TRY(s);
    for (int i = 0; i < o->n_sets; i++) {
        s = ct_run_config_set(&c, o->sets[i]);
        if (s != CT_OK) {
            ct_run_config_free(&c);
            return s;
        }
    }
    return ct_run_resolve(r, &c, o->args, o->n_args);
}

/* A fresh training run (no resume) writes its files into output_dir, replacing any of the same names
 * (model.h5, README.md, ...): as Hugging Face's run_*.py scripts, it starts only in a directory that
 * is missing or empty (but for a run's lock and a killed run's leftovers), unless overwrite_output_dir
 * says to write into it anyway. */
static ct_status fresh_output_dir(const ct_training_args *a) {
    char first[256];
    int64_t entries = cli_dir_entries(a->output_dir, first, sizeof first);
    if (!entries) return CT_OK; /* missing (made later), or not a directory: the Trainer says what is wrong */
    return ct_error(CT_ERR_CONFIG, "training_args.output_dir: '%s' already holds %lld entr%s ('%s'%s), which this "
                    "run's files would replace; continue its run with --resume_from_checkpoint latest, write into "
                    "it anyway with --overwrite_output_dir true, or choose another output_dir", a->output_dir,
                    (long long)entries, entries == 1 ? "y" : "ies", first, entries > 1 ? ", ..." : "");
}

/* predict's --output may not be a file the command reads: the config, --model's model.h5, a data
 * file the config names, or the weights of its "init_from" (predictions written over them would
 * destroy them); nor a file of a saved model. An earlier predictions file is replaced, as asked. */
static ct_status output_not_an_input(const cli_opts *o, const ct_run_config *c) {
    char model_file[4200];
    if (o->model_dir) snprintf(model_file, sizeof model_file, "%s/model.h5", o->model_dir);
    const char *inputs[] = {o->config, o->model_dir ? model_file : NULL};
    return cli_check_output("--output", o->output, inputs, 2, c);
}

static ct_status report(ct_trainer *t, const char *split, json_t *metrics) {
    ct_trainer_log_metrics(t, split, metrics);
    ct_status s = ct_trainer_save_metrics(t, split, metrics);
    json_decref(metrics);
    return s;
}

/* The final evaluation and prediction; *eval_m and *test_m keep their metrics for the model card. */
static ct_status evaluate_and_predict(ct_run *r, ct_trainer *t, json_t **eval_m, json_t **test_m) {
    json_t *m;
    if (r->n_eval > 0) {
        CT_TRY(ct_trainer_evaluate(t, NULL, "eval", &m));
        json_object_set_new(m, "epoch", json_real(t->state.epoch));
        *eval_m = json_incref(m);
        CT_TRY(report(t, "eval", m));
    }
    if (r->test) {
        ct_prediction_output p;
        CT_TRY(ct_trainer_predict(t, r->test, "test", &p));
        m = p.metrics;
        p.metrics = NULL;
        ct_prediction_output_free(&p);
        *test_m = json_incref(m);
        CT_TRY(report(t, "test", m));
    }
    return CT_OK;
}

static ct_status train(const cli_opts *o, ct_run *r, ct_trainer *t) {
    ct_train_output out;
    CT_TRY(ct_trainer_train(t, o->resume, &out));
    CT_TRY(ct_trainer_save_model(t, NULL));
    json_t *m = out.metrics;
    out.metrics = NULL;
    CT_TRY(report(t, "train", m));
    CT_TRY(ct_trainer_save_state(t));
    json_t *eval_m = NULL, *test_m = NULL;
    ct_status s = evaluate_and_predict(r, t, &eval_m, &test_m);
    /* output_dir/README.md with the curves, as Hugging Face's create_model_card (report/model_card.h) */
    if (s == CT_OK) s = ct_trainer_create_model_card(t, eval_m, test_m);
    ct_plot_release_fonts(); /* nothing draws after the card */
    json_decref(eval_m);
    json_decref(test_m);
    return s;
}

/* evaluate and predict build the model from the config given, then load --model's weights: a config
 * whose model differs from the one they were saved with (another activation, say) would load them
 * into another network without a word when the shapes agree. A warning names both specs (a
 * num_classes only one of them states is the data's, and not compared). */
static void warn_other_model(const char *model_dir, const ct_run_config *c) {
    char file[4200];
    snprintf(file, sizeof file, "%s/model.h5", model_dir);
    json_t *saved = NULL, *given = json_deep_copy(ct_run_config_section(c, "model"));
    ct_shape in;
    ct_dtype dt;
    if (given && ct_model_read_h5_architecture(file, &saved, &in, &dt) == CT_OK && saved) {
        if (!json_object_get(saved, "num_classes") || !json_object_get(given, "num_classes")) {
            json_object_del(saved, "num_classes");
            json_object_del(given, "num_classes");
        }
        if (!json_equal(saved, given)) {
            char *a = json_dumps(given, JSON_COMPACT | JSON_SORT_KEYS);
            char *b = json_dumps(saved, JSON_COMPACT | JSON_SORT_KEYS);
            ct_log_warning("the config's model %.300s is not the one %s was saved with, %.300s: its weights are loaded "
                           "into the config's; evaluate with the config it was trained with (its run_config.json)",
                           a ? a : "?", file, b ? b : "?");
            free(a);
            free(b);
        }
    }
    ct_error_clear(); /* a file without the architecture: the load below says what is wrong */
    json_decref(saved);
    json_decref(given);
}

static ct_status run_command(const cli_opts *o, ct_run *r, ct_comm *comm, ct_trainer *t) {
    bool is_train = strcmp(o->command, "train") == 0;
    ct_trainer_setup setup = ct_run_setup(r);
    setup.comm = comm;
    CT_TRY(ct_trainer_init(t, NULL, &r->args, &setup));
    if (is_train) return train(o, r, t);
    /* its results go to output_dir: not while another run writes there */
    CT_TRY(ct_trainer_claim_output_dir(t));
    /* the weights: --model's, else the config's init_from, loaded when the model was built */
    if (o->model_dir) {
        warn_other_model(o->model_dir, &r->config);
        CT_TRY(ct_checkpoint_load_model(&r->model, o->model_dir));
    }
    if (strcmp(o->command, "evaluate") == 0) {
        json_t *m;
        CT_TRY(ct_trainer_evaluate(t, NULL, "eval", &m));
        return report(t, "eval", m);
    }
    ct_prediction_output p;
    CT_TRY(ct_trainer_predict(t, r->test, "test", &p));
    ct_status s = ct_trainer_is_world_process_zero(t) ? ct_prediction_output_save_h5(&p, o->output) : CT_OK;
    json_t *m = p.metrics;
    p.metrics = NULL;
    ct_prediction_output_free(&p);
    if (s != CT_OK) {
        json_decref(m);
        return s;
    }
    return report(t, "test", m);
}

int ct_cli_run(int argc, char **argv) {
    cli_opts o = {.command = argv[0]};
    int code = parse(argc, argv, &o);
    if (code < 0) {
        ct_run_purpose purpose = strcmp(o.command, "train") == 0      ? CT_RUN_TRAIN
                                 : strcmp(o.command, "evaluate") == 0 ? CT_RUN_EVALUATE
                                                                      : CT_RUN_PREDICT;
        ct_run r;
        memset(&r, 0, sizeof r); /* ct_run_free of it is harmless until load_run fills it */
        ct_status s = load_run(&o, &r);
        if (s == CT_OK && purpose == CT_RUN_TRAIN && !o.resume && !r.args.overwrite_output_dir)
            s = fresh_output_dir(&r.args);
        if (s == CT_OK && purpose == CT_RUN_PREDICT) s = output_not_an_input(&o, &r.config);
        if (s != CT_OK) {
            code = fail(o.command, s);
            ct_run_free(&r);
        } else if (purpose != CT_RUN_TRAIN && !o.model_dir && !ct_run_config_section(&r.config, "init_from")) {
            /* The weights come from --model's model.h5, or from the config's "init_from". */
            fprintf(stderr, "ctrainer %s: --model DIR is required (a directory with model.h5), unless the config "
                    "has \"init_from\"\n", o.command);
            ct_run_free(&r);
            code = 2;
        } else {
            /* The program owns the communicator, so that it can still print a failing process's
             * message and end the other processes after the trainer is gone. It exists before the
             * datasets (it needs the resolved ddp_timeout), so they are built with
             * main_process_first: one process per node builds a dataset cache, the others open it. */
            ct_comm *comm = NULL;
            ct_trainer t;
            memset(&t, 0, sizeof t);
            s = ct_comm_create_default((double)r.args.ddp_timeout, &comm);
            if (s == CT_OK) {
                /* HF's run_*.py: the process that logs shows info lines, and the Trainer then applies
                 * log_level (passive keeps this info) and log_level_replica (warning by default). */
                ct_log_set_rank(comm->rank, comm->world_size);
                if (ct_log_should_log(comm->rank, comm->local_rank, r.args.log_on_each_node))
                    ct_log_set_level(CT_LOG_LEVEL_INFO);
                s = ct_run_build(&r, purpose, comm);
            }
            /* A GPU job of several processes moves its gradients with NCCL where the build has it. */
            ct_comm *device_comm = NULL;
            if (s == CT_OK) s = ct_comm_for_device(comm, r.device, &device_comm);
            if (s == CT_OK) s = run_command(&o, &r, device_comm ? device_comm : comm, &t);
            bool several = comm && comm->world_size > 1;
            if (s != CT_OK && several) ct_error_prefix(s, "rank %d/%d: ", comm->rank, comm->world_size);
            code = s == CT_OK ? 0 : fail(o.command, s);
            /* One failing process must not leave the others waiting in a collective. */
            if (s != CT_OK && s != CT_ERR_INTERRUPTED && several) ct_comm_abort(comm, code);
            ct_trainer_free(&t);
            ct_comm_free(device_comm);
            ct_comm_free(comm);
            ct_run_free(&r);
        }
    }
    for (int i = 0; i < o.n_args; i++) free((char *)o.args[i].name);
    return code;
}
