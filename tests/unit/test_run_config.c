/* Run configs: line:column of syntax errors (the token's first character, UTF-8 counted as one
 * column), unknown sections, ct_run_config_locate on nested objects, arrays, strings with escaped
 * quotes and \u escapes in keys, ct_run_config_annotate (the value, its nearest enclosing value, no
 * position, and messages it must leave alone), --set assignments and their errors, loading files,
 * and a robustness loop: random mutations of a valid config through parse, the training arguments
 * reader, validation, locate and annotate must give OK or a message, never a crash (run it under
 * the sanitizer build too). Expected positions are computed independently of the scanner: from
 * the byte offset of a marker in the text, counting lines and UTF-8 characters. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config/args.h"
#include "config/run_config.h"
#include "core/rng.h"
#include "testlib.h"

static ct_rng rng;

#define CHECK_MSG(expr, want)                                                                                          \
    do {                                                                                                               \
        ct_status s2_ = (expr);                                                                                        \
        CHECK(s2_ == CT_ERR_CONFIG, "%s -> %s, wanted a config error", #expr, ct_status_str(s2_));                     \
        CHECK(strcmp(ct_last_error(), (want)) == 0, "%s:\n   got: %s\n  want: %s", #expr, ct_last_error(), (want));    \
    } while (0)

/* Line and column (1-based, UTF-8 characters) of byte offset `off` of text. */
static void pos_at(const char *text, size_t off, int *line, int *col) {
    *line = 1;
    *col = 1;
    for (size_t i = 0; i < off; i++) {
        if (text[i] == '\n') {
            (*line)++;
            *col = 1;
        } else if (((unsigned char)text[i] & 0xC0) != 0x80) {
            (*col)++;
        }
    }
}

/* The position of the n-th (0-based) occurrence of marker in text. */
static void pos_of(const char *text, const char *marker, int nth, int *line, int *col) {
    const char *p = strstr(text, marker);
    for (int k = 0; k < nth && p; k++) p = strstr(p + 1, marker);
    if (!p) {
        printf("marker '%s' not in the text\n", marker);
        abort();
    }
    pos_at(text, (size_t)(p - text), line, col);
}

/* Parsing `text` fails with "cfg.json:L:C: <jansson message>" where L:C is marker's position. */
static void expect_syntax(const char *text, const char *marker, int nth, const char *jansson_msg) {
    ct_run_config c;
    int line, col;
    if (marker)
        pos_of(text, marker, nth, &line, &col);
    else
        pos_at(text, strlen(text), &line, &col);
    char want[512];
    snprintf(want, sizeof want, "cfg.json:%d:%d: %s", line, col, jansson_msg);
    CHECK_MSG(ct_run_config_parse(text, "cfg.json", &c), want);
    CHECK(c.root == NULL && c.text == NULL, "nothing kept after a failed parse");
}

static void test_syntax_errors(void) {
    expect_syntax("{\n  \"training_args\": {\n    \"seed\": tru\n  }\n}", "tru", 0, "invalid token near 'tru'");
    expect_syntax("{\"model\": {\"a\": 1 \"b\": 2}}", "\"b\"", 0, "'}' expected near '\"b\"'");
    expect_syntax("{\"metrics\": [1,\n    2,\n  ]}", "]", 0, "unexpected token near ']'");
    expect_syntax("{\"model\": {", NULL, 0, "string or '}' expected near end of file");
    expect_syntax("{\"model\": {},\n \"model\": {}}", "\"model\"", 1, "duplicate object key near '\"model\"'");
    /* columns count characters: é is two bytes, one column */
    expect_syntax("{\"data\": \"ééé\", \"loss\": x}", "x}", 0, "invalid token near 'x'");
    expect_syntax("{\"data\": \"a\\qb\"}", "\"a\\q", 0, "invalid escape near '\"a\\q'");
    expect_syntax("", NULL, 0, "'[' or '{' expected near end of file");
    expect_syntax("{} extra", "extra", 0, "end of file expected near 'extra'");
    expect_syntax("\n\n   {\"loss\": 1e999}", "1e999", 0, "real number overflow near '1e999'");

    ct_run_config c;
    CHECK_MSG(ct_run_config_parse("\n\n  [1, 2]", "cfg.json", &c),
              "cfg.json:3:3: a run config must be a JSON object (with sections model, data, ...), got a list");
    CHECK_MSG(ct_run_config_parse("{\n  \"model\": {},\n  \"modle\": {\"type\": \"mlp\"}\n}", "cfg.json", &c),
              "cfg.json:3:12: unknown section 'modle', did you mean 'model'?");
    CHECK_MSG(
        ct_run_config_parse("{\"optimizer\": 1}", "cfg.json", &c),
        "cfg.json:1:15: unknown section 'optimizer' (sections: model, data, loss, metrics, training_args, callbacks)");
    CHECK_OK(ct_run_config_parse("{}", NULL, &c));
    CHECK(strcmp(c.file, "<memory>") == 0 && strcmp(c.base_dir, ".") == 0 && !c.modified, "in-memory names");
    CHECK(ct_run_config_section(&c, "model") == NULL, "absent section");
    ct_run_config_free(&c);
    ct_run_config_free(&c); /* freeing twice is harmless: free zeroes */
}

static const char *nested =
    "{\n"
    "  \"model\": {\n"
    "    \"type\": \"sequential\",\n"
    "    \"layers\": [\n"
    "      {\"type\": \"linear\", \"out_features\": 128},\n"
    "      {\"type\": \"relu\", \"typo\": true},\n"
    "      {\"type\": \"linear\",\n"
    "       \"out_features\": 10}\n"
    "    ]\n"
    "  },\n"
    "  \"data\": {\"train\": {\"path\": \"a \\\"quoted\\\" \\\\\\\" [path]\", \"limit\": 100},\n"
    "           \"eval\": {\"name\\u00e9\": \"é\", \"\\ud83d\\ude00\": [1, [2, 3e5]], \"k\\\"q\": null}},\n"
    "  \"training_args\": {\"learning_rate\": -0.001, \"lr_scheduler_kwargs\": {},\n"
    "                    \"load_best_model_at_end\": true, \"eval_strategy\": \"epoch\"},\n"
    "  \"metrics\": [\"accuracy\", {\"type\": \"f1\", \"average\": \"macro\"}]\n"
    "}\n";

static void expect_at(const ct_run_config *c, const char *path, const char *marker, int nth) {
    int want_line, want_col, line = -1, col = -1;
    pos_of(c->text, marker, nth, &want_line, &want_col);
    bool found = ct_run_config_locate(c, path, &line, &col);
    CHECK(found && line == want_line && col == want_col, "locate(%s) = %s %d:%d, want %d:%d", path,
          found ? "found" : "not found", line, col, want_line, want_col);
}

static void test_locate(void) {
    ct_run_config c;
    CHECK_OK(ct_run_config_parse(nested, "cfg.json", &c));
    if (!c.root) return;
    expect_at(&c, "", "{", 0);
    expect_at(&c, "model", "{\n    \"type\"", 0);
    expect_at(&c, "model.type", "\"sequential\"", 0);
    expect_at(&c, "model.layers", "[\n", 0);
    expect_at(&c, "model.layers[0]", "{\"type\": \"linear\"", 0);
    expect_at(&c, "model.layers[0].out_features", "128", 0);
    expect_at(&c, "model.layers[1].type", "\"relu\"", 0);
    expect_at(&c, "model.layers[1].typo", "true", 0);
    expect_at(&c, "model.layers[2].out_features", "10}", 0);
    /* after a string full of escaped quotes, backslashes and brackets */
    expect_at(&c, "data.train.limit", "100", 0);
    /* keys written with \u escapes match their UTF-8 spelling, surrogate pairs included */
    expect_at(&c, "data.eval.nameé", "\"é\"", 0);
    expect_at(&c, "data.eval.\xF0\x9F\x98\x80", "[1, [2", 0);
    expect_at(&c, "data.eval.\xF0\x9F\x98\x80[1]", "[2, 3e5]", 0);
    expect_at(&c, "data.eval.\xF0\x9F\x98\x80[1][1]", "3e5", 0);
    expect_at(&c, "data.eval.k\"q", "null", 0);
    expect_at(&c, "training_args.lr_scheduler_kwargs", "{},", 0);
    expect_at(&c, "metrics[1].average", "\"macro\"", 0);
    expect_at(&c, "metrics[0]", "\"accuracy\"", 0);

    const char *absent[] = {"model.layers[3]",
                            "model.nothing",
                            "data.train.path.x",
                            "model.layers.x",
                            "model.layers[0][0]",
                            "model..x",
                            "model.layers[",
                            "model.layers[x]",
                            "data.eval.name\\u00e9",
                            "metrics[1].type.x",
                            "loss",
                            "model.layers[1]x",
                            ".model",
                            "model."};
    for (size_t i = 0; i < sizeof absent / sizeof *absent; i++) {
        int line = 0, col = 0;
        CHECK(!ct_run_config_locate(&c, absent[i], &line, &col), "locate(%s) should fail", absent[i]);
    }
    ct_run_config none = {0};
    CHECK(!ct_run_config_locate(&none, "model", NULL, NULL), "no text, no position");
    ct_run_config_free(&c);
}

/* annotate(ct_error(CT_ERR_CONFIG, msg)) leaves exactly want. */
static void expect_annotated(const ct_run_config *c, const char *msg, const char *want) {
    ct_status s = ct_run_config_annotate(c, ct_error(CT_ERR_CONFIG, "%s", msg));
    CHECK(s == CT_ERR_CONFIG, "annotate keeps the status");
    CHECK(strcmp(ct_last_error(), want) == 0, "annotate(%s):\n   got: %s\n  want: %s", msg, ct_last_error(), want);
}

static void test_annotate(void) {
    ct_run_config c;
    CHECK_OK(ct_run_config_parse(nested, "cfg.json", &c));
    if (!c.root) return;
    char want[1024];
    int l, col;

    pos_of(nested, "-0.001", 0, &l, &col);
    snprintf(want, sizeof want, "cfg.json:%d:%d: training_args.learning_rate: must be >= 0", l, col);
    expect_annotated(&c, "training_args.learning_rate: must be >= 0", want);
    /* not in the file: the nearest enclosing value that is */
    pos_of(nested, "{\"learning_rate\"", 0, &l, &col);
    snprintf(want, sizeof want, "cfg.json:%d:%d: training_args.seed: must be >= 0, got -1", l, col);
    expect_annotated(&c, "training_args.seed: must be >= 0, got -1", want);
    pos_of(nested, "{\"type\": \"relu\"", 0, &l, &col);
    snprintf(want, sizeof want, "cfg.json:%d:%d: model.layers[1].in_features: must be > 0", l, col);
    expect_annotated(&c, "model.layers[1].in_features: must be > 0", want);
    /* core/json.h's "path: unknown key 'k'" points at the key's value */
    pos_of(nested, "true}", 0, &l, &col);
    snprintf(want, sizeof want, "cfg.json:%d:%d: model.layers[1]: unknown key 'typo', did you mean 'type'?", l, col);
    expect_annotated(&c, "model.layers[1]: unknown key 'typo', did you mean 'type'?", want);
    /* a section that is not in the file: the file alone */
    expect_annotated(&c, "callbacks[0].patience: must be >= 0", "cfg.json: callbacks[0].patience: must be >= 0");
    /* messages that do not start with a path of this config pass through */
    expect_annotated(&c, "optimizer 'adamw': invalid learning_rate", "optimizer 'adamw': invalid learning_rate");
    expect_annotated(&c, "learning_rate: must be >= 0", "learning_rate: must be >= 0");
    expect_annotated(&c, "no colon here", "no colon here");
    expect_annotated(&c, "cfg.json:3:4: already placed", "cfg.json:3:4: already placed");
    ct_error(CT_ERR_IO, "model.type: cannot read");
    CHECK(ct_run_config_annotate(&c, CT_ERR_IO) == CT_ERR_IO && strcmp(ct_last_error(), "model.type: cannot read") == 0,
          "other statuses untouched");
    CHECK(ct_run_config_annotate(&c, CT_OK) == CT_OK, "OK passes");

    /* The real flow: the arguments reader and validation name paths, annotate places them. */
    ct_training_args a;
    ct_training_args_default(&a);
    CHECK_OK(ct_training_args_from_json(&a, ct_run_config_section(&c, "training_args"), "training_args"));
    ct_status s = ct_run_config_annotate(&c, ct_training_args_validate_at(&a, "training_args"));
    pos_of(nested, "-0.001", 0, &l, &col);
    snprintf(want, sizeof want,
             "cfg.json:%d:%d: training_args.learning_rate: optimizer 'adamw': invalid learning_rate = -0.001 (must be "
             "finite and >= 0)",
             l, col);
    CHECK(s == CT_ERR_CONFIG && strcmp(ct_last_error(), want) == 0, "validate + annotate:\n   got: %s\n  want: %s",
          ct_last_error(), want);
    a.learning_rate = 0.001;
    s = ct_run_config_annotate(&c, ct_training_args_validate_at(&a, "training_args"));
    pos_of(nested, "true, \"eval_strategy\"", 0, &l, &col);
    snprintf(want, sizeof want,
             "cfg.json:%d:%d: training_args.load_best_model_at_end: requires the save and evaluation strategies to "
             "match, but save_strategy is 'steps' and eval_strategy is 'epoch'",
             l, col);
    CHECK(s == CT_ERR_CONFIG && strcmp(ct_last_error(), want) == 0,
          "cross-argument rule placed:\n   got: %s\n  want: %s", ct_last_error(), want);
    ct_training_args_free(&a);
    ct_run_config_free(&c);

    /* an unknown training argument in a file */
    const char *text = "{\n  \"training_args\": {\n    \"seed\": 1,\n    \"learnin_rate\": 0.1\n  }\n}\n";
    CHECK_OK(ct_run_config_parse(text, "run.json", &c));
    ct_training_args_default(&a);
    s = ct_run_config_annotate(
        &c, ct_training_args_from_json(&a, ct_run_config_section(&c, "training_args"), "training_args"));
    CHECK_MSG(s,
              "run.json:4:21: training_args.learnin_rate: unknown key 'learnin_rate', did you mean 'learning_rate'?");
    ct_training_args_free(&a);
    ct_run_config_free(&c);
}

static void test_set(void) {
    ct_run_config c;
    CHECK_OK(ct_run_config_parse(nested, "cfg.json", &c));
    if (!c.root) return;
    CHECK(!c.modified, "not modified yet");
    CHECK_OK(ct_run_config_set(&c, "training_args.seed=3"));
    CHECK(c.modified, "modified");
    json_t *ta = ct_run_config_section(&c, "training_args");
    CHECK(json_integer_value(json_object_get(ta, "seed")) == 3, "seed set");
    CHECK_OK(ct_run_config_set(&c, "training_args.optim=sgd"));
    CHECK(strcmp(json_string_value(json_object_get(ta, "optim")), "sgd") == 0, "a bare word is a string");
    CHECK_OK(ct_run_config_set(&c, "training_args.output_dir=\"out=dir\""));
    CHECK(strcmp(json_string_value(json_object_get(ta, "output_dir")), "out=dir") == 0, "JSON string with '='");
    CHECK_OK(ct_run_config_set(&c, "data.train.path=a=b"));
    CHECK(
        strcmp(json_string_value(json_object_get(json_object_get(ct_run_config_section(&c, "data"), "train"), "path")),
               "a=b") == 0,
        "split at the first '='");
    CHECK_OK(ct_run_config_set(&c, "model.hidden=[256, 128]"));
    json_t *h = json_object_get(ct_run_config_section(&c, "model"), "hidden");
    CHECK(json_is_array(h) && json_array_size(h) == 2 && json_integer_value(json_array_get(h, 1)) == 128, "a list");
    CHECK_OK(ct_run_config_set(&c, "model.layers[2].out_features=64"));
    json_t *layers = json_object_get(ct_run_config_section(&c, "model"), "layers");
    CHECK(json_integer_value(json_object_get(json_array_get(layers, 2), "out_features")) == 64, "indexed set");
    CHECK_OK(ct_run_config_set(&c, "model.layers[1]={\"type\": \"gelu\"}"));
    CHECK(strcmp(json_string_value(json_object_get(json_array_get(layers, 1), "type")), "gelu") == 0,
          "replace element");
    CHECK_OK(ct_run_config_set(&c, "data.eval.\xF0\x9F\x98\x80[1][0]=7"));
    CHECK_OK(ct_run_config_set(&c, "callbacks=[]"));
    CHECK(json_is_array(ct_run_config_section(&c, "callbacks")), "a new section");
    CHECK_OK(ct_run_config_set(&c, "loss.deep.er.key=true"));
    CHECK(json_is_true(json_object_get(
              json_object_get(json_object_get(ct_run_config_section(&c, "loss"), "deep"), "er"), "key")),
          "intermediate objects are created");
    CHECK_OK(ct_run_config_set(&c, "training_args.metric_for_best_model=null"));
    CHECK(json_is_null(json_object_get(ta, "metric_for_best_model")), "null");

    CHECK_MSG(ct_run_config_set(&c, "training_args.seed"),
              "--set 'training_args.seed': expected KEY=VALUE (e.g. training_args.seed=3)");
    CHECK_MSG(ct_run_config_set(&c, "=3"), "--set '=3': missing the key before '='");
    CHECK_MSG(ct_run_config_set(&c, "model.x="), "--set 'model.x=': missing the value after '='");
    CHECK_MSG(ct_run_config_set(&c, "modle.x=1"), "--set 'modle.x=1': unknown section 'modle', did you mean 'model'?");
    CHECK_MSG(ct_run_config_set(&c, "model..x=1"), "--set 'model..x=1': bad key 'model..x': empty key");
    CHECK_MSG(ct_run_config_set(&c, "model.layers[a]=1"),
              "--set 'model.layers[a]=1': bad key 'model.layers[a]': expected [index] with a non-negative integer");
    CHECK_MSG(ct_run_config_set(&c, "model.layers[5].x=1"),
              "--set 'model.layers[5].x=1': index 5 is out of range: 'model.layers' has 3 elements");
    CHECK_MSG(ct_run_config_set(&c, "model.type.x=1"),
              "--set 'model.type.x=1': 'model.type' is a string, not an object");
    CHECK_MSG(ct_run_config_set(&c, "model.layers.x=1"),
              "--set 'model.layers.x=1': 'model.layers' is a list, not an object");
    CHECK_MSG(ct_run_config_set(&c, "model[0]=1"), "--set 'model[0]=1': 'model' is an object, not a list");
    CHECK_MSG(ct_run_config_set(&c, "model.missing[0]=1"),
              "--set 'model.missing[0]=1': 'model.missing' does not exist, so it has no element [0]");
    CHECK_ERR(ct_run_config_set(&c, "model.hidden=[1, 2"), CT_ERR_CONFIG,
              "--set 'model.hidden=[1, 2': the value is not valid JSON: ");
    CHECK_ERR(ct_run_config_set(&c, "model.x={\"a\": 1, \"a\": 2}"), CT_ERR_CONFIG,
              "the value is not valid JSON: duplicate");
    CHECK(json_integer_value(json_object_get(json_array_get(layers, 2), "out_features")) == 64,
          "failed sets change nothing");
    ct_run_config_free(&c);

    /* On an empty config built in memory. */
    ct_run_config m = {0};
    CHECK_OK(ct_run_config_set(&m, "training_args.learning_rate=0.5"));
    CHECK(json_real_value(json_object_get(ct_run_config_section(&m, "training_args"), "learning_rate")) == 0.5,
          "memory");
    ct_run_config_free(&m);
}

static void test_load(void) {
    char dir[] = "/tmp/ct_run_config_XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    char path[256];
    snprintf(path, sizeof path, "%s/run.json", dir);
    FILE *f = fopen(path, "wb");
    /* a file larger than the first read buffer */
    fprintf(f, "{\n  \"model\": {\"type\": \"mlp\", \"pad\": \"");
    for (int i = 0; i < 70000; i++) fputc('a' + i % 26, f);
    fprintf(f, "\"},\n  \"training_args\": {\"seed\": \"x\"}\n}\n");
    fclose(f);
    ct_run_config c;
    CHECK_OK(ct_run_config_load(path, &c));
    CHECK(c.file && strcmp(c.file, path) == 0 && c.base_dir && strcmp(c.base_dir, dir) == 0, "file and base_dir");
    CHECK(c.text && strlen(c.text) > 70000, "the text is kept");
    ct_training_args a;
    ct_training_args_default(&a);
    ct_status s = ct_run_config_annotate(
        &c, ct_training_args_from_json(&a, ct_run_config_section(&c, "training_args"), "training_args"));
    char want[600];
    snprintf(want, sizeof want, "%s:3:29: training_args.seed: expected an integer, got \"x\"", path);
    CHECK_MSG(s, want);
    ct_training_args_free(&a);
    ct_run_config_free(&c);

    f = fopen(path, "wb");
    fprintf(f, "{\n  \"loss\": \"cross_entropy\",\n  \"metrics\": [\"accuracy\",]\n}\n");
    fclose(f);
    snprintf(want, sizeof want, "%s:3:26: unexpected token near ']'", path);
    CHECK_MSG(ct_run_config_load(path, &c), want);

    f = fopen(path, "wb");
    fwrite("{\"loss\": \"a\0b\"}", 1, 15, f);
    fclose(f);
    snprintf(want, sizeof want, "%s:1:12: NUL byte in the file (a run config is JSON text)", path);
    CHECK_MSG(ct_run_config_load(path, &c), want);
    unlink(path);

    CHECK_ERR(ct_run_config_load(path, &c), CT_ERR_IO, path, ": cannot open: No such file or directory");
    CHECK_ERR(ct_run_config_load(dir, &c), CT_ERR_IO, dir, ": cannot read: Is a directory");
    rmdir(dir);

    /* a bare file name lives in "." */
    CHECK_ERR(ct_run_config_load("no-such-run.json", &c), CT_ERR_IO, "no-such-run.json: cannot open");
}

/* Random damage to a valid config never crashes anything downstream. */
static void test_mutations(void) {
    const char *base = "{\n"
                       "  \"model\": {\"type\": \"mlp\", \"hidden\": [256, 128], \"name\": \"m\\u00e9\\\"x\\\\\"},\n"
                       "  \"data\": {\"train\": {\"path\": \"train.h5\"}, \"eval\": {\"path\": \"é.h5\"}},\n"
                       "  \"training_args\": {\n"
                       "    \"learning_rate\": 3e-4, \"num_train_epochs\": 2, \"optim\": \"adamw\",\n"
                       "    \"eval_strategy\": \"steps\", \"eval_steps\": 0.25, \"save_steps\": 0.5,\n"
                       "    \"load_best_model_at_end\": true, \"metric_for_best_model\": \"accuracy\",\n"
                       "    \"lr_scheduler_type\": \"cosine\", \"lr_scheduler_kwargs\": {\"num_cycles\": 0.5},\n"
                       "    \"report_to\": [\"jsonl\"], \"greater_is_better\": null, \"data_seed\": 7\n"
                       "  },\n"
                       "  \"metrics\": [\"accuracy\"], \"callbacks\": []\n"
                       "}\n";
    const char *paths[] = {"training_args",   "training_args.learning_rate",
                           "model.hidden[1]", "model.name",
                           "data.eval.path",  "training_args.lr_scheduler_kwargs.num_cycles",
                           "metrics[0]",      "callbacks[0]"};
    const char structural[] = "{}[]\",:\\ \n0123456789.-eE+tfnul\xc3\xa9\x80\xff";
    size_t base_len = strlen(base);
    char *buf = malloc(base_len * 2 + 64);
    int parsed = 0, args_ok = 0;
    for (int trial = 0; trial < 2000; trial++) {
        memcpy(buf, base, base_len + 1);
        size_t len = base_len;
        int edits = 1 + (int)ct_rng_below(&rng, 3);
        for (int e = 0; e < edits; e++) {
            size_t at = len ? (size_t)ct_rng_below(&rng, len) : 0;
            char ch = ct_rng_below(&rng, 2) ? structural[ct_rng_below(&rng, sizeof structural - 1)]
                                            : (char)(1 + ct_rng_below(&rng, 255));
            switch (ct_rng_below(&rng, 4)) {
            case 0: len = at; break;     /* truncate */
            case 1: buf[at] = ch; break; /* flip */
            case 2:                      /* insert */
                memmove(buf + at + 1, buf + at, len - at);
                buf[at] = ch;
                len++;
                break;
            default: /* delete */
                if (len) {
                    memmove(buf + at, buf + at + 1, len - at - 1);
                    len--;
                }
            }
            buf[len] = '\0';
        }
        ct_run_config c;
        ct_status s = ct_run_config_parse(buf, "m.json", &c);
        CHECK(s == CT_OK || (ct_last_error()[0] && strncmp(ct_last_error(), "m.json:", 7) == 0),
              "parse: status %d with message '%s'", s, ct_last_error());
        if (s != CT_OK) continue;
        parsed++;
        for (size_t k = 0; k < sizeof paths / sizeof *paths; k++) {
            int line = 0, col = 0;
            if (ct_run_config_locate(&c, paths[k], &line, &col))
                CHECK(line >= 1 && col >= 1 && line <= 20, "locate(%s) = %d:%d", paths[k], line, col);
        }
        ct_training_args a;
        ct_training_args_default(&a);
        s = ct_training_args_from_json(&a, ct_run_config_section(&c, "training_args"), "training_args");
        if (s == CT_OK) s = ct_training_args_validate_at(&a, "training_args");
        if (s == CT_OK) {
            json_t *j = NULL;
            s = ct_training_args_to_json(&a, &j);
            json_decref(j);
        }
        if (s == CT_OK) {
            args_ok++;
        } else {
            CHECK(ct_last_error()[0] != '\0', "empty message for status %d", s);
            s = ct_run_config_annotate(&c, s);
            CHECK(ct_last_error()[0] != '\0', "empty message after annotate");
        }
        /* --set with damaged text too */
        char assign[128];
        snprintf(assign, sizeof assign, "%s=%.40s", paths[ct_rng_below(&rng, sizeof paths / sizeof *paths)],
                 buf + ct_rng_below(&rng, len + 1));
        s = ct_run_config_set(&c, assign);
        CHECK(s == CT_OK || ct_last_error()[0], "--set %s: empty message", assign);
        ct_training_args_free(&a);
        ct_run_config_free(&c);
    }
    printf("mutations: %d of 2000 parsed, %d of those gave valid training arguments\n", parsed, args_ok);
    CHECK(parsed > 100 && parsed < 2000, "the mutations should both break and keep the text parseable (%d)", parsed);
    free(buf);
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    ct_test_begin("test_run_config");
    ct_rng_init(&rng, ct_test_seed, 0, 0);
    test_syntax_errors();
    test_locate();
    test_annotate();
    test_set();
    test_load();
    test_mutations();
    return ct_test_finish();
}
