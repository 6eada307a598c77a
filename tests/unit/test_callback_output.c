/* The callbacks that write what a run logs: Python's float repr (which the printer and JSON lines
 * share with Hugging Face's output), the printer (HF's PrinterCallback: one dict line per log, on
 * each node's local process zero), the JSON-lines logger (a file per run, appended on resume,
 * relative output_dir) and the progress bar (nothing unless on a terminal; on a pseudo-terminal,
 * tqdm's lines). The other callbacks are test_callbacks.c's. */
#define _GNU_SOURCE /* posix_openpt and friends for the progress bar on a pseudo-terminal */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "callbacks/callback.h"
#include "callbacks/pyrepr.h"
#include "callbacks/state.h"
#include "config/args.h"
#include "core/rng.h"
#include "core/util.h"
#include "testlib.h"

static ct_rng rng;

static void test_py_float_repr(void) {
    /* Python's repr() of each value. */
    static const struct {
        double x;
        const char *repr;
    } cases[] = {
        {1.0, "1.0"},
        {0.1, "0.1"},
        {5e-05, "5e-05"},
        {0.0001, "0.0001"},
        {1e16, "1e+16"},
        {1e15, "1000000000000000.0"},
        {123.456, "123.456"},
        {-2.5e-7, "-2.5e-07"},
        {1.0 / 3.0, "0.3333333333333333"},
        {2.0 / 3.0, "0.6666666666666666"},
        {1e-100, "1e-100"},
        {1.7976931348623157e308, "1.7976931348623157e+308"},
        {5e-324, "5e-324"},
        {12345678901234567890.0, "1.2345678901234567e+19"},
        {-0.0, "-0.0"},
        {0.0, "0.0"},
        {100.0, "100.0"},
        {0.3412, "0.3412"},
        {1.5e300, "1.5e+300"},
        {9999999999999998.0, "9999999999999998.0"},
        {0.00012345, "0.00012345"},
        {INFINITY, "inf"},
        {-INFINITY, "-inf"},
        {NAN, "nan"},
    };
    char buf[48];
    for (size_t i = 0; i < CT_ARRAY_LEN(cases); i++) {
        ct_py_float_repr(cases[i].x, buf, sizeof buf);
        CHECK(strcmp(buf, cases[i].repr) == 0, "repr(%.17g) = %s, want %s", cases[i].x, buf, cases[i].repr);
    }
    /* Random doubles of every magnitude read back exactly. */
    for (int i = 0; i < 2000; i++) {
        uint64_t bits = ct_rng_u64(&rng);
        double x;
        memcpy(&x, &bits, sizeof x);
        if (!isfinite(x)) continue;
        ct_py_float_repr(x, buf, sizeof buf);
        CHECK(strtod(buf, NULL) == x, "repr %s does not read back as %.17g", buf, x);
    }
}

static char *read_all(FILE *f) {
    fflush(f);
    long n = ftell(f);
    rewind(f);
    char *s = calloc((size_t)n + 1, 1);
    if (fread(s, 1, (size_t)n, f) != (size_t)n) s[0] = 0;
    return s;
}

static void test_printer(void) {
    ct_training_args args;
    ct_training_args_default(&args);
    ct_trainer_state st;
    CHECK_OK(ct_trainer_state_init(&st));
    ct_trainer_control c = {0};
    FILE *f = tmpfile();
    ct_callback *p;
    CHECK_OK(ct_printer_callback_create(f, &p));
    ct_callback_list l = {0};
    CHECK_OK(ct_callback_list_add(&l, p));
    json_t *logs = json_loads("{\"loss\": 0.3412, \"grad_norm\": 1.25, \"learning_rate\": 5e-05, "
                              "\"total_flos\": 1e12, \"epoch\": 0.3333333333333333, \"note\": \"it's\", "
                              "\"n\": 3, \"ok\": true, \"x\": null}",
                              0, NULL);
    ct_callback_args a = {.args = &args, .state = &st, .control = &c, .logs = logs};
    CHECK_OK(ct_callbacks_fire(&l, CT_ON_LOG, &a));
    st.is_world_process_zero = st.is_local_process_zero = false;
    CHECK_OK(ct_callbacks_fire(&l, CT_ON_LOG, &a)); /* the node's other processes print nothing */
    char *out = read_all(f);
    const char *want = "{'loss': 0.3412, 'grad_norm': 1.25, 'learning_rate': 5e-05, 'epoch': 0.3333333333333333, "
                       "'note': \"it's\", 'n': 3, 'ok': True, 'x': None}\n";
    CHECK(strcmp(out, want) == 0, "printer:\n got  %s want %s", out, want);
    free(out);
    /* Another node's first process prints too, as HF's PrinterCallback (is_local_process_zero). */
    st.is_local_process_zero = true;
    fseek(f, 0, SEEK_END); /* from reading back to writing */
    CHECK_OK(ct_callbacks_fire(&l, CT_ON_LOG, &a));
    out = read_all(f); /* the whole file: the first line, then this one */
    CHECK(strncmp(out, want, strlen(want)) == 0 && strcmp(out + strlen(want), want) == 0,
          "printer on a node's local process zero:\n got  %s want %s twice", out, want);
    free(out);
    fclose(f);
    json_decref(logs);
    ct_callback_list_free(&l);
    ct_trainer_state_free(&st);
}

static void test_jsonl(void) {
    char dir[] = "/tmp/ct_test_callbacks_XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp: %s", strerror(errno));
    char path[256];
    snprintf(path, sizeof path, "%s/log.jsonl", dir);
    ct_training_args args;
    ct_training_args_default(&args);
    ct_trainer_state st;
    CHECK_OK(ct_trainer_state_init(&st));
    ct_trainer_control c = {0};
    ct_callback_list l = {0};
    ct_callback *j;
    CHECK_OK(ct_jsonl_callback_create(path, &j));
    CHECK_OK(ct_callback_list_add(&l, j));
    ct_callback_args a = {.args = &args, .state = &st, .control = &c};
    /* Another rank: no file at all. */
    st.is_world_process_zero = false;
    CHECK_OK(ct_callbacks_fire(&l, CT_ON_TRAIN_BEGIN, &a));
    json_t *l1 = json_pack("{s:f,s:f,s:f}", "loss", 0.1, "learning_rate", 3e-4, "epoch", 0.5);
    a.logs = l1;
    CHECK_OK(ct_callbacks_fire(&l, CT_ON_LOG, &a));
    struct stat sb;
    CHECK(stat(path, &sb) != 0, "no file written off process zero");
    st.is_world_process_zero = true;
    CHECK_OK(ct_callbacks_fire(&l, CT_ON_TRAIN_BEGIN, &a));
    CHECK(stat(path, &sb) == 0, "file created at train begin");
    st.global_step = 7;
    CHECK_OK(ct_callbacks_fire(&l, CT_ON_LOG, &a));
    /* Flushed at once: readable before train end. */
    FILE *r = fopen(path, "r");
    char line[512] = "";
    CHECK(r && fgets(line, sizeof line, r), "first line readable before train end");
    CHECK(strcmp(line, "{\"loss\": 0.1, \"learning_rate\": 0.0003, \"epoch\": 0.5, \"step\": 7}\n") == 0,
          "first line: %s", line);
    if (r) fclose(r);
    json_t *l2 = json_pack("{s:f,s:I}", "eval_accuracy", 0.875, "step", (json_int_t)9);
    a.logs = l2;
    CHECK_OK(ct_callbacks_fire(&l, CT_ON_LOG, &a));
    CHECK_OK(ct_callbacks_fire(&l, CT_ON_TRAIN_END, &a));
    /* A second run appends. */
    CHECK_OK(ct_callbacks_fire(&l, CT_ON_TRAIN_BEGIN, &a));
    CHECK_OK(ct_callbacks_fire(&l, CT_ON_LOG, &a));
    ct_callback_list_free(&l); /* closes the file */
    r = fopen(path, "r");
    int n = 0;
    while (r && fgets(line, sizeof line, r)) {
        json_error_t err;
        json_t *v = json_loads(line, 0, &err);
        CHECK(v != NULL, "line %d is JSON: %s", n, err.text);
        if (n == 0) {
            json_t *w = json_deep_copy(l1);
            json_object_set_new(w, "step", json_integer(7));
            CHECK(json_equal(v, w), "line 0 content");
            json_decref(w);
        } else {
            CHECK(json_equal(v, l2), "line %d: eval metrics as logged (step kept)", n);
        }
        json_decref(v);
        n++;
    }
    if (r) fclose(r);
    CHECK(n == 3, "3 lines, got %d", n);
    remove(path);
    rmdir(dir);
    json_decref(l1);
    json_decref(l2);

    /* A path that cannot be opened: the error names callback, event and path. */
    CHECK_OK(ct_jsonl_callback_create("/nonexistent/dir/log.jsonl", &j));
    CHECK_OK(ct_callback_list_add(&l, j));
    CHECK_ERR(ct_callbacks_fire(&l, CT_ON_TRAIN_BEGIN, &a), CT_ERR_IO,
              "callback 'JsonlCallback' on_train_begin: /nonexistent/dir/log.jsonl: cannot open");
    ct_callback_list_free(&l);
    CHECK_ERR(ct_jsonl_callback_create("", &j), CT_ERR_INVALID_ARG, "path");

    /* A relative path under a relative output_dir, opened again after train end (the evaluation
     * after training logs outside it): always <output_dir>/log.jsonl, never <output_dir>/<output_dir>/. */
    char cwd[1024], rel_dir[] = "/tmp/ct_test_jsonl_rel_XXXXXX";
    CHECK(getcwd(cwd, sizeof cwd) && mkdtemp(rel_dir) && chdir(rel_dir) == 0, "chdir to a temporary directory");
    snprintf(args.output_dir, sizeof args.output_dir, "out");
    CHECK_OK(ct_jsonl_callback_create("log.jsonl", &j));
    CHECK_OK(ct_callback_list_add(&l, j));
    a.logs = NULL;
    CHECK_OK(ct_callbacks_fire(&l, CT_ON_TRAIN_BEGIN, &a));
    json_t *l3 = json_pack("{s:f}", "loss", 0.5);
    a.logs = l3;
    CHECK_OK(ct_callbacks_fire(&l, CT_ON_LOG, &a));
    CHECK_OK(ct_callbacks_fire(&l, CT_ON_TRAIN_END, &a));
    CHECK_OK(ct_callbacks_fire(&l, CT_ON_LOG, &a));
    ct_callback_list_free(&l);
    r = fopen("out/log.jsonl", "r");
    n = 0;
    while (r && fgets(line, sizeof line, r)) n++;
    if (r) fclose(r);
    CHECK(n == 2, "relative output_dir: 2 lines in out/log.jsonl, got %d", n);
    CHECK(stat("out/out", &sb) != 0, "relative output_dir: no out/out directory");

    /* An existing file is appended to only when it holds events already (its first line a JSON
     * object) or nothing: a config, data or model named by mistake is refused and left as it was. */
    static const struct {
        const char *name, *text;
        size_t binary_len; /* 0: strlen(text) */
        bool refused;
    } files[] = {{"config.json", "{\n  \"model\": {}\n}\n", 0, true},
                 {"data.h5", "\x89HDF\r\n\x1a\n\x00\x00\x01", 11, true},
                 {"notes.txt", "step 1: fine\n", 0, true},
                 {"array.jsonl", "[1, 2]\n", 0, true},
                 {"empty.jsonl", "", 0, false},
                 {"events.jsonl", "{\"loss\": 1.0, \"step\": 1}\n", 0, false}};
    for (size_t i = 0; i < CT_ARRAY_LEN(files); i++) {
        char file[64];
        snprintf(file, sizeof file, "out/%s", files[i].name);
        FILE *w = fopen(file, "wb");
        size_t len = files[i].binary_len ? files[i].binary_len : strlen(files[i].text);
        CHECK(w && fwrite(files[i].text, 1, len, w) == len && fclose(w) == 0, "write %s", file);
        CHECK_OK(ct_jsonl_callback_create(files[i].name, &j));
        CHECK_OK(ct_callback_list_add(&l, j));
        a.logs = l3;
        ct_status fs = ct_callbacks_fire(&l, CT_ON_TRAIN_BEGIN, &a);
        if (fs == CT_OK) fs = ct_callbacks_fire(&l, CT_ON_LOG, &a);
        ct_callback_list_free(&l);
        if (files[i].refused) {
            CHECK(fs == CT_ERR_CONFIG && strstr(ct_last_error(), file) &&
                      strstr(ct_last_error(), "is not a JSON-lines file"),
                  "%s: %s: %s", file, ct_status_str(fs), ct_last_error());
            CHECK(stat(file, &sb) == 0 && (size_t)sb.st_size == len, "%s: changed (%lld bytes)", file,
                  (long long)sb.st_size);
        } else {
            CHECK(fs == CT_OK, "%s: %s", file, ct_last_error());
            CHECK(stat(file, &sb) == 0 && (size_t)sb.st_size > len, "%s: nothing appended", file);
        }
        remove(file);
    }
    remove("out/log.jsonl");
    rmdir("out");
    CHECK(chdir(cwd) == 0, "chdir back");
    rmdir(rel_dir);
    json_decref(l3);
    ct_trainer_state_free(&st);
}

/* Everything the pty's master side has to read now. */
static char *drain(int fd) {
    size_t cap = 1 << 16, n = 0;
    char *s = calloc(cap, 1);
    struct pollfd p = {.fd = fd, .events = POLLIN};
    while (n + 1 < cap && poll(&p, 1, 100) > 0) {
        ssize_t k = read(fd, s + n, cap - 1 - n);
        if (k <= 0) break;
        n += (size_t)k;
    }
    return s;
}

static void drive_progress(ct_callback_list *l, ct_callback_args *a, int64_t steps) {
    a->state->global_step = 0;
    a->state->max_steps = steps;
    CHECK_OK(ct_callbacks_fire(l, CT_ON_TRAIN_BEGIN, a));
    for (int64_t i = 1; i <= steps; i++) {
        a->state->global_step = i;
        CHECK_OK(ct_callbacks_fire(l, CT_ON_STEP_END, a));
        if (i == 4) {
            json_t *logs = json_pack("{s:f,s:f,s:f}", "loss", 0.5, "epoch", 0.4, "total_flos", 12.0);
            a->logs = logs;
            CHECK_OK(ct_callbacks_fire(l, CT_ON_LOG, a));
            a->logs = NULL;
            json_decref(logs);
        }
    }
    CHECK_OK(ct_callbacks_fire(l, CT_ON_TRAIN_END, a));
}

static void test_progress(void) {
    ct_training_args args;
    ct_training_args_default(&args);
    ct_trainer_state st;
    CHECK_OK(ct_trainer_state_init(&st));
    ct_trainer_control c = {0};
    ct_callback_args a = {.args = &args, .state = &st, .control = &c};

    /* Not a terminal: nothing at all. */
    FILE *f = tmpfile();
    ct_callback *p;
    CHECK_OK(ct_progress_callback_create(f, &p));
    ct_callback_list l = {0};
    CHECK_OK(ct_callback_list_add(&l, p));
    drive_progress(&l, &a, 10);
    fflush(f);
    CHECK(ftell(f) == 0, "progress on a file wrote %ld bytes", ftell(f));
    ct_callback_list_free(&l);
    fclose(f);

    /* A terminal (a pseudo-terminal here). */
    int master = posix_openpt(O_RDWR | O_NOCTTY);
    if (master < 0 || grantpt(master) != 0 || unlockpt(master) != 0) {
        printf("no pseudo-terminal (%s): progress bar on a terminal not checked\n", strerror(errno));
        if (master >= 0) close(master);
        ct_trainer_state_free(&st);
        return;
    }
    int slave = open(ptsname(master), O_RDWR | O_NOCTTY);
    FILE *tty = fdopen(slave, "w");
    CHECK(tty != NULL, "fdopen pty");
    CHECK_OK(ct_progress_callback_create(tty, &p));
    CHECK_OK(ct_callback_list_add(&l, p));
    drive_progress(&l, &a, 10);
    char *out = drain(master);
    CHECK(strstr(out, "  0%|") && strstr(out, "0/10 ["), "initial bar: %s", out);
    CHECK(strstr(out, "100%|") && strstr(out, "| 10/10 ["), "final bar: %s", out);
    CHECK(strstr(out, "{'loss': 0.5, 'epoch': 0.4}"), "log line above the bar (no total_flos): %s", out);
    CHECK(strstr(out, "loss=0.5]"), "last loss in the bar: %s", out);
    CHECK(strstr(out, "it/s") || strstr(out, "s/it"), "rate shown: %s", out);
    CHECK(strchr(out, '\r') != NULL, "redrawn with \\r");
    free(out);

    /* disable_tqdm, or another rank: nothing on the terminal either. */
    args.disable_tqdm = true;
    drive_progress(&l, &a, 5);
    args.disable_tqdm = false;
    st.is_world_process_zero = false;
    drive_progress(&l, &a, 5);
    out = drain(master);
    CHECK(out[0] == 0, "disabled bar wrote: %s", out);
    free(out);
    ct_callback_list_free(&l);
    fclose(tty);
    close(master);
    ct_trainer_state_free(&st);
}

int main(void) {
    ct_test_begin("test_callback_output");
    ct_rng_init(&rng, ct_test_seed, 0, 0);
    test_py_float_repr();
    test_printer();
    test_jsonl();
    test_progress();
    return ct_test_finish();
}
