/* `ctrainer search CONFIG --space SPACE.json --n_trials N --direction maximize|minimize [options]`:
 * hyperparameter search over a run config (search/hp_search.h does the sampling, scoring and
 * results; this file runs the trials).
 *
 * Every trial is a `ctrainer train CONFIG --set ... ` subprocess of this same program
 * (/proc/self/exe): the config's own --set assignments, then the trial's values, then
 * training_args.output_dir=OUTPUT/trial-<k>. A process per trial makes every trial a fresh run
 * whatever the previous one did (a crash, a leak, global state), and a trial that fails, even by a
 * signal, is recorded with its exit code and last message while the search goes on. Its output goes
 * to OUTPUT/trial-<k>/train.log; its metrics are read from its all_results.json (train, eval and
 * test metrics together). SIGINT/SIGTERM stop the trial in flight (it saves a checkpoint, as train
 * does) and then the search, which keeps the results so far and exits 128 + the signal. At the end,
 * OUTPUT/best_config.json is the config with the best trial's values (output_dir OUTPUT/best), which
 * `ctrainer train` runs from anywhere.
 *
 * Before any trial runs: the config loads and its arguments resolve, the space reads, and every
 * key of the space is one the config's readers know (ct_hp_check_config_keys). Exit codes: 0 when
 * a trial completed, 1 when none did, 2 for usage and configuration errors. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/output_guard.h"
#include "core/fs.h"
#include "search/hp_search.h"
#include "trainer/run.h"

#define MAX_SETS 256

extern char **environ;

typedef struct search_opts {
    const char *config, *space, *metric, *output;
    const char *sets[MAX_SETS];
    int n_sets;
    int64_t n_trials;
    bool have_n_trials, have_direction, overwrite_output_dir;
    ct_hp_direction direction;
    ct_hp_method method;
    uint64_t seed;
} search_opts;

static void usage(FILE *f) {
    fprintf(f,
            "usage: ctrainer search CONFIG --space SPACE.json --n_trials N --direction maximize|minimize\n"
            "                       [--metric NAME] [--method random|grid] [--seed S] [--output DIR]\n"
            "                       [--overwrite_output_dir true] [--set dotted.key=JSON ...]\n"
            "\n"
            "Runs N trials of CONFIG, each a fresh `ctrainer train` in DIR/trial-<k> with values drawn from\n"
            "SPACE.json, and reports the best. SPACE.json maps config keys (as --set takes them) to\n"
            "distributions, in Optuna's words:\n"
            "  {\"training_args.learning_rate\": {\"type\": \"loguniform\", \"low\": 1e-4, \"high\": 1e-2},\n"
            "   \"training_args.per_device_train_batch_size\": {\"type\": \"int\", \"low\": 16, \"high\": 64, \"step\": 16},\n"
            "   \"model.hidden\": [[64], [128], [256, 128]]}\n"
            "types: uniform, loguniform, float (low, high, step, log), int (low, high, step, log),\n"
            "categorical (values) or a plain list of values.\n"
            "\n"
            "  --n_trials N     trials to run (random: required; grid: at most N points, default all)\n"
            "  --direction D    maximize or minimize the objective (required)\n"
            "  --metric NAME    the objective: a metric of the trials' all_results.json (default:\n"
            "                   eval_<metric_for_best_model> when the config sets it, else eval_loss)\n"
            "  --method M       random (default: seeded draws) or grid (every combination, in order)\n"
            "  --seed S         the random draws' seed (default 42)\n"
            "  --output DIR     where trial-<k>/, search_results.json/.csv and best_config.json go\n"
            "                   (default: the config's training_args.output_dir); a missing or empty\n"
            "                   directory, unless --overwrite_output_dir true lets the search replace\n"
            "                   what is there, as `ctrainer train` does\n"
            "  --set KEY=JSON   change the config for every trial, as `ctrainer train --set`\n"
            "DIR/best_config.json is the best trial's config (output_dir DIR/best): `ctrainer train` it.\n"
            "Exit code: 0 when a trial completed, 1 when none did, 2 for usage or configuration errors.\n");
}

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "ctrainer search: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    return 2;
}

static bool parse_int(const char *text, int64_t min, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno || end == text || *end || v < min) return false;
    *out = v;
    return true;
}

/* -1: go on; otherwise the exit code. */
static int parse(int argc, char **argv, search_opts *o) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        }
        if (strncmp(a, "--", 2) != 0) {
            if (o->config) return usage_error("unexpected argument '%s' (the config is '%s')", a, o->config);
            o->config = a;
            continue;
        }
        char key[64];
        const char *eq = strchr(a, '=');
        snprintf(key, sizeof key, "%.*s", (int)(eq ? eq - a : (long)strlen(a)), a);
        const char *value = eq ? eq + 1 : NULL;
        if (!value) {
            if (i + 1 >= argc) return usage_error("%s needs a value", key);
            value = argv[++i];
        }
        int64_t n;
        if (strcmp(key, "--space") == 0) {
            o->space = value;
        } else if (strcmp(key, "--n_trials") == 0) {
            if (!parse_int(value, 1, &o->n_trials))
                return usage_error("--n_trials expects a positive integer, got '%s'", value);
            o->have_n_trials = true;
        } else if (strcmp(key, "--direction") == 0) {
            if (strcmp(value, "maximize") != 0 && strcmp(value, "minimize") != 0)
                return usage_error("--direction expects maximize or minimize, got '%s'", value);
            o->direction = strcmp(value, "maximize") == 0 ? CT_HP_MAXIMIZE : CT_HP_MINIMIZE;
            o->have_direction = true;
        } else if (strcmp(key, "--metric") == 0) {
            o->metric = value;
        } else if (strcmp(key, "--method") == 0) {
            if (strcmp(value, "random") != 0 && strcmp(value, "grid") != 0)
                return usage_error("--method expects random or grid, got '%s'", value);
            o->method = strcmp(value, "grid") == 0 ? CT_HP_GRID : CT_HP_RANDOM;
        } else if (strcmp(key, "--seed") == 0) {
            if (!parse_int(value, 0, &n)) return usage_error("--seed expects a non-negative integer, got '%s'", value);
            o->seed = (uint64_t)n;
        } else if (strcmp(key, "--output") == 0) {
            o->output = value;
        } else if (strcmp(key, "--overwrite_output_dir") == 0) {
            if (strcmp(value, "true") != 0 && strcmp(value, "false") != 0)
                return usage_error("--overwrite_output_dir expects true or false, got '%s'", value);
            o->overwrite_output_dir = strcmp(value, "true") == 0;
        } else if (strcmp(key, "--set") == 0) {
            if (o->n_sets == MAX_SETS) return usage_error("too many --set");
            o->sets[o->n_sets++] = value;
        } else {
            return usage_error("unknown option '%s' (see ctrainer search --help)", key);
        }
    }
    if (!o->config) {
        usage(stderr);
        return 2;
    }
    if (!o->space) return usage_error("--space SPACE.json is required");
    if (!o->have_direction) return usage_error("--direction maximize|minimize is required");
    if (o->method == CT_HP_RANDOM && !o->have_n_trials)
        return usage_error("--n_trials N is required for random search");
    return -1;
}

/* The config with the command line's --set applied. An unreadable file is the user's to fix: a
 * config error (exit 2), as for train. */
static ct_status load_config(const search_opts *o, ct_run_config *c) {
    ct_status s = ct_run_config_load(o->config, c);
    if (s == CT_ERR_IO) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", ct_last_error());
        return ct_error(CT_ERR_CONFIG, "%s", msg);
    }
    CT_TRY(s);
    for (int i = 0; i < o->n_sets; i++) {
        s = ct_run_config_set(c, o->sets[i]);
        if (s != CT_OK) {
            ct_run_config_free(c);
            return s;
        }
    }
    return CT_OK;
}

/* --- trials as subprocesses ---------------------------------------------------------------------------- */

typedef struct runner {
    const search_opts *o;
    char exe[4096];
} runner;

static volatile sig_atomic_t stop_signal;
static void on_signal(int sig) { stop_signal = sig; }

/* The message a failed trial left: the last "ctrainer train: " line of its log (without that
 * prefix), else its last non-empty line. */
static void last_message(const char *log, char *buf, size_t cap) {
    buf[0] = '\0';
    FILE *f;
    if (ct_fopen_read(log, &f) != CT_OK) return;
    char line[4096];
    bool from_train = false;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = '\0';
        if (!line[0]) continue;
        const char *prefix = "ctrainer train: ";
        if (strncmp(line, prefix, strlen(prefix)) == 0) {
            snprintf(buf, cap, "%s", line + strlen(prefix));
            from_train = true;
        } else if (!from_train) {
            snprintf(buf, cap, "%s", line);
        }
    }
    fclose(f);
}

/* argv of `ctrainer train` for trial t (strings owned by the list, freed by free_argv). */
static char **trial_argv(const runner *r, const ct_hp_trial *t) {
    int n = 3 + 2 * (r->o->n_sets + (int)json_object_size(t->params) + 2) + 1;
    char **argv = calloc((size_t)n, sizeof *argv);
    if (!argv) return NULL;
    int k = 0;
    bool ok = (argv[k++] = strdup(r->exe)) && (argv[k++] = strdup("train")) && (argv[k++] = strdup(r->o->config));
    for (int i = 0; ok && i < r->o->n_sets; i++)
        ok = (argv[k++] = strdup("--set")) && (argv[k++] = strdup(r->o->sets[i]));
    const char *key;
    const json_t *v;
    json_object_foreach(t->params, key, v) {
        if (!ok) break;
        ok = (argv[k++] = strdup("--set")) && (argv[k++] = ct_hp_assignment(key, v));
    }
    json_t *dir = json_string(t->output_dir);
    if (ok) ok = dir && (argv[k++] = strdup("--set")) && (argv[k++] = ct_hp_assignment("training_args.output_dir", dir));
    json_decref(dir);
    /* the trial's directory is the search's, made for it, with the trial's train.log already in it */
    if (ok) ok = (argv[k++] = strdup("--overwrite_output_dir")) && (argv[k++] = strdup("true"));
    if (!ok) {
        for (int i = 0; i < n; i++) free(argv[i]);
        free(argv);
        return NULL;
    }
    return argv;
}

static void free_argv(char **argv) {
    for (int i = 0; argv && argv[i]; i++) free(argv[i]);
    free(argv);
}

/* Starts the trial's process with its output in log; *pid on success. */
static ct_status spawn(char **argv, const char *log, pid_t *pid) {
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    posix_spawn_file_actions_init(&fa);
    posix_spawnattr_init(&at);
    posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, STDOUT_FILENO, STDERR_FILENO);
    /* The trial handles SIGINT and SIGTERM itself (a checkpoint, then exit 128 + the signal). */
    sigset_t dflt;
    sigemptyset(&dflt);
    sigaddset(&dflt, SIGINT);
    sigaddset(&dflt, SIGTERM);
    posix_spawnattr_setsigdefault(&at, &dflt);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGDEF);
    int err = posix_spawn(pid, argv[0], &fa, &at, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    if (err) return ct_error(CT_ERR_IO, "cannot start '%s': %s", argv[0], strerror(err));
    return CT_OK;
}

/* Waits for pid; a signal sent to the search is passed on to the trial. Polling (every 20 ms)
 * rather than a blocking waitpid leaves no window in which a signal arrives after the check and
 * before the wait, unforwarded, while the trial runs on; and a signal delivered to another thread
 * (OpenMP's may exist) is still seen within 20 ms, which a sigsuspend of this one would miss. Not
 * dist/poll.h's loop: that one is for collectives, spinning first and waking every 200 us at most,
 * which a trial that runs for minutes would pay for with its own cores. */
static int wait_for(pid_t pid) {
    int status = 0, forwarded = 0;
    for (;;) {
        if (stop_signal && stop_signal != forwarded) {
            forwarded = stop_signal;
            kill(pid, forwarded);
        }
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid) return status;
        if (w < 0 && errno != EINTR) return -1;
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

/* Earlier results of a directory that is used again must not pass for this trial's. */
static void remove_old_results(const char *dir) {
    static const char *const files[] = {"all_results.json", "train_results.json", "eval_results.json",
                                        "test_results.json"};
    char path[4200];
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        remove(path);
    }
}

static ct_status run_trial(void *ctx, ct_hp_trial *t) {
    const runner *r = ctx;
    if (stop_signal) return ct_error(CT_ERR_INTERRUPTED, "stopped by signal %d before the trial started", (int)stop_signal);
    CT_TRY(ct_make_dirs(t->output_dir));
    remove_old_results(t->output_dir);
    char log[4200], results[4200];
    snprintf(log, sizeof log, "%s/train.log", t->output_dir);
    snprintf(results, sizeof results, "%s/all_results.json", t->output_dir);
    char **argv = trial_argv(r, t);
    if (!argv) return ct_error(CT_ERR_NOMEM, "out of memory");
    pid_t pid;
    ct_status s = spawn(argv, log, &pid);
    free_argv(argv);
    CT_TRY(s);
    int status = wait_for(pid);
    char msg[2048];
    if (status < 0) return ct_error(CT_ERR_IO, "waiting for the trial's process: %s", strerror(errno));
    if (WIFSIGNALED(status)) {
        t->exit_code = 128 + WTERMSIG(status);
        return ct_error(stop_signal ? CT_ERR_INTERRUPTED : CT_ERR_STATE, "killed by signal %d (%s); its output is in %s",
                        WTERMSIG(status), strsignal(WTERMSIG(status)), log);
    }
    t->exit_code = WEXITSTATUS(status);
    if (t->exit_code != 0) {
        last_message(log, msg, sizeof msg);
        return ct_error(stop_signal ? CT_ERR_INTERRUPTED : CT_ERR_STATE, "%s",
                        msg[0] ? msg : "exited without a message");
    }
    json_error_t err;
    FILE *f = NULL;
    t->metrics = ct_fopen_read(results, &f) == CT_OK ? json_loadf(f, 0, &err) : NULL;
    if (f) fclose(f);
    if (!json_is_object(t->metrics)) {
        json_decref(t->metrics);
        t->metrics = NULL;
        return ct_error(CT_ERR_FORMAT, "%s: cannot read the trial's metrics: %s", results, err.text);
    }
    return CT_OK;
}

/* --- the command ---------------------------------------------------------------------------------------- */

/* Everything that can be checked before a trial runs; *metric and *output get their defaults. */
static ct_status prepare(const search_opts *o, ct_run_config *base, ct_hp_space *space, char *metric, size_t mcap,
                         char *output, size_t ocap) {
    CT_TRY(load_config(o, base));
    /* The arguments as every trial starts from them: they must resolve, and they name the default
     * objective and output directory. ct_run_resolve consumes its config, so it gets a second copy. */
    ct_run_config again;
    CT_TRY(load_config(o, &again));
    ct_run r;
    CT_TRY(ct_run_resolve(&r, &again, NULL, 0));
    if (o->metric) snprintf(metric, mcap, "%s", o->metric);
    else ct_hp_default_metric(&r.args, metric, mcap);
    snprintf(output, ocap, "%s", o->output ? o->output : r.args.output_dir);
    ct_run_free(&r);
    /* Trials replace what their directories hold and the results replace an earlier search's. */
    char first[256];
    int64_t entries = o->overwrite_output_dir ? 0 : cli_dir_entries(output, first, sizeof first);
    if (entries)
        return ct_error(CT_ERR_CONFIG, "the search's output directory '%s' already holds %lld entr%s ('%s'%s), which "
                        "its trials and results would replace; replace them with --overwrite_output_dir true, or "
                        "choose another --output", output, (long long)entries, entries == 1 ? "y" : "ies", first,
                        entries > 1 ? ", ..." : "");
    const json_t *data = ct_run_config_section(base, "data");
    if (strncmp(metric, "eval_", 5) == 0 && !json_object_get(data, "eval"))
        return ct_error(CT_ERR_CONFIG, "the objective %s needs an evaluation set, and the config's data has no \"eval\"%s",
                        metric, o->metric ? "" : " (name another metric with --metric)");
    CT_TRY(ct_hp_space_load(o->space, space));
    return ct_hp_check_config_keys(space, o->space, base);
}

static int search(const search_opts *o) {
    ct_run_config base;
    memset(&base, 0, sizeof base);
    ct_hp_space space = {0};
    char metric[256], output[CT_ARGS_PATH_MAX];
    runner r = {.o = o};
    ct_status s = prepare(o, &base, &space, metric, sizeof metric, output, sizeof output);
    if (s == CT_OK) {
        ssize_t n = readlink("/proc/self/exe", r.exe, sizeof r.exe - 1);
        if (n <= 0) s = ct_error(CT_ERR_IO, "cannot find this program (/proc/self/exe): %s", strerror(errno));
        else r.exe[n] = '\0';
    }
    if (s != CT_OK) {
        fprintf(stderr, "ctrainer search: %s\n", ct_last_error());
        ct_hp_space_free(&space);
        ct_run_config_free(&base);
        return s == CT_ERR_CONFIG || s == CT_ERR_INVALID_ARG || s == CT_ERR_IO ? 2 : 1;
    }
    ct_hp_search_opts so = {.method = o->method, .n_trials = o->have_n_trials ? o->n_trials : 0,
                            .direction = o->direction, .seed = o->seed, .metric = metric, .output_dir = output};
    struct sigaction sa = {.sa_handler = on_signal}, old_int, old_term;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    ct_hp_results res;
    s = ct_hp_search_run(&space, &so, run_trial, &r, &res);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    int code = s == CT_OK ? 0 : s == CT_ERR_INTERRUPTED ? 128 + (stop_signal ? (int)stop_signal : SIGINT)
                            : s == CT_ERR_CONFIG || s == CT_ERR_INVALID_ARG ? 2 : 1;
    if (s != CT_OK) fprintf(stderr, "ctrainer search: %s\n", ct_last_error());
    if (res.best >= 0) {
        /* Trained again from best_config.json, the best trial goes to OUTPUT/best, not over the
         * search's own files (OUTPUT is the config's output_dir by default) or over the trial. */
        char file[CT_ARGS_PATH_MAX + 32], best_dir[CT_ARGS_PATH_MAX + 8];
        snprintf(file, sizeof file, "%s/best_config.json", output);
        snprintf(best_dir, sizeof best_dir, "%s/best", output);
        json_t *params = json_deep_copy(res.trials[res.best].params);
        ct_status w = params && json_object_set_new(params, "training_args.output_dir", json_string(best_dir)) == 0
                          ? ct_hp_write_best_config(&base, params, file)
                          : ct_error(CT_ERR_NOMEM, "out of memory");
        json_decref(params);
        if (w != CT_OK) {
            fprintf(stderr, "ctrainer search: best_config.json: %s\n", ct_last_error());
            if (code == 0) code = 1;
        } else {
            printf("best config: %s (ctrainer train %s)\n", file, file);
        }
    } else if (s == CT_OK) {
        code = 1;
    }
    if (res.n_trials > 0) printf("results: %s/search_results.json, %s/search_results.csv\n", output, output);
    fflush(stdout);
    ct_hp_results_free(&res);
    ct_hp_space_free(&space);
    ct_run_config_free(&base);
    return code;
}

int ct_cli_search(int argc, char **argv) {
    search_opts o = {.method = CT_HP_RANDOM, .seed = 42};
    int code = parse(argc, argv, &o);
    return code >= 0 ? code : search(&o);
}
