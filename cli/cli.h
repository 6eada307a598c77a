/* Subcommands of the ctrainer program. Each returns the process exit code: 0 success, 1 runtime
 * failure, 2 usage or configuration error. */
#ifndef CT_CLI_H
#define CT_CLI_H

int ct_cli_demo(int argc, char **argv);
int ct_cli_data(int argc, char **argv);
/* train, evaluate and predict (argv[0] is the command's name). */
int ct_cli_run(int argc, char **argv);
int ct_cli_config(int argc, char **argv);
/* generate text from a saved language model (cli/generate.c) */
int ct_cli_generate(int argc, char **argv);
/* export a saved model to safetensors (cli/export.c) */
int ct_cli_export(int argc, char **argv);
/* draw a run's curves from trainer_state.json (cli/plot.c) */
int ct_cli_plot(int argc, char **argv);
/* hyperparameter search over a run config (cli/search.c) */
int ct_cli_search(int argc, char **argv);

#endif
