/* `ctrainer generate CONFIG --model DIR --prompt TEXT [...]`: continues prompts with a saved language
 * model. The model is the architecture DIR/model.h5 was saved with (the config's "model" section for
 * a file that records none), with DIR/model.h5's weights, built for the
 * window it needs (the longest prompt plus max_new_tokens, at most n_positions); text goes through the
 * byte-level tokenizer (data/tokenizer.h). Generation settings come from the config's "generation"
 * section (Hugging Face's GenerationConfig names) and then the command line. Each prompt yields
 * num_return_sequences continuations; sequence k (prompt-major) is sampled with counter k, so a
 * sequence's text depends on its prompt, k and the seed only. Prints the texts, or writes them as JSON
 * with --output. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/checkpoint_io.h"
#include "cli/cli.h"
#include "cli/output_guard.h"
#include "config/run_config.h"
#include "core/json.h"
#include "data/tokenizer.h"
#include "generate/generate.h"
#include "model/layers.h"
#include "model/model_io.h"

#define MAX_PROMPTS 256
#define MAX_SETS 64

typedef struct gen_opts {
    const char *config, *model_dir, *output;
    const char *prompts[MAX_PROMPTS];
    int n_prompts;
    const char *sets[MAX_SETS];
    int n_sets;
    int64_t num_return;
    /* command-line generation settings, applied over the config's; has_* says which were given */
    ct_generation_config g;
    bool has_max_new, has_sample, has_temperature, has_top_k, has_top_p, has_seed, has_eos;
} gen_opts;

static void usage(FILE *f) {
    fprintf(f,
            "usage: ctrainer generate CONFIG --model DIR --prompt TEXT [--prompt TEXT ...]\n"
            "                         [--max_new_tokens N] [--do_sample | --greedy] [--temperature T]\n"
            "                         [--top_k K] [--top_p P] [--seed S] [--eos_token_id ID]\n"
            "                         [--num_return_sequences N] [--output FILE.json] [--set dotted.key=JSON ...]\n"
            "\n"
            "Continues each prompt with the language model saved in DIR/model.h5 (DIR: an output_dir or a\n"
            "checkpoint; its architecture as saved, or CONFIG's \"model\" section for a file without one).\n"
            "Settings: CONFIG's \"generation\" section, then these options (Hugging Face's GenerationConfig\n"
            "names; greedy unless do_sample). Sampling is seeded: the same seed gives the same text. Texts go\n"
            "to stdout, or to --output as JSON (never over a file the command reads).\n");
}

static bool parse_int(const char *s, int64_t *v) {
    char *end;
    errno = 0;
    long long x = strtoll(s, &end, 10);
    if (errno || end == s || *end) return false;
    *v = x;
    return true;
}

static bool parse_real(const char *s, double *v) {
    char *end;
    errno = 0;
    double x = strtod(s, &end);
    if (errno || end == s || *end) return false;
    *v = x;
    return true;
}

/* -1: go on; otherwise the exit code. */
static int parse(int argc, char **argv, gen_opts *o) {
    o->num_return = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        }
        if (strncmp(a, "--", 2) != 0) {
            if (o->config) return fprintf(stderr, "ctrainer generate: unexpected argument '%s'\n", a), 2;
            o->config = a;
            continue;
        }
        const char *key = a + 2;
        if (strcmp(key, "do_sample") == 0 || strcmp(key, "greedy") == 0) {
            o->g.do_sample = strcmp(key, "do_sample") == 0;
            o->has_sample = true;
            continue;
        }
        if (i + 1 >= argc) return fprintf(stderr, "ctrainer generate: %s needs a value\n", a), 2;
        const char *v = argv[++i];
        bool ok = true;
        if (strcmp(key, "model") == 0) {
            o->model_dir = v;
        } else if (strcmp(key, "output") == 0) {
            o->output = v;
        } else if (strcmp(key, "prompt") == 0) {
            if (o->n_prompts == MAX_PROMPTS) return fprintf(stderr, "ctrainer generate: too many --prompt\n"), 2;
            o->prompts[o->n_prompts++] = v;
        } else if (strcmp(key, "set") == 0) {
            if (o->n_sets == MAX_SETS) return fprintf(stderr, "ctrainer generate: too many --set\n"), 2;
            o->sets[o->n_sets++] = v;
        } else if (strcmp(key, "num_return_sequences") == 0) {
            ok = parse_int(v, &o->num_return) && o->num_return >= 1 && o->num_return <= 4096;
        } else if (strcmp(key, "max_new_tokens") == 0) {
            ok = o->has_max_new = parse_int(v, &o->g.max_new_tokens);
        } else if (strcmp(key, "temperature") == 0) {
            ok = o->has_temperature = parse_real(v, &o->g.temperature);
        } else if (strcmp(key, "top_k") == 0) {
            ok = o->has_top_k = parse_int(v, &o->g.top_k);
        } else if (strcmp(key, "top_p") == 0) {
            ok = o->has_top_p = parse_real(v, &o->g.top_p);
        } else if (strcmp(key, "eos_token_id") == 0) {
            ok = o->has_eos = parse_int(v, &o->g.eos_token_id);
        } else if (strcmp(key, "seed") == 0) {
            int64_t s;
            ok = o->has_seed = parse_int(v, &s) && s >= 0;
            o->g.seed = (uint64_t)s;
        } else {
            fprintf(stderr, "ctrainer generate: unknown option --%s\n", key);
            usage(stderr);
            return 2;
        }
        if (!ok) return fprintf(stderr, "ctrainer generate: --%s: invalid value '%s'\n", key, v), 2;
    }
    if (!o->config || !o->model_dir || o->n_prompts == 0) {
        fprintf(stderr, "ctrainer generate: CONFIG, --model DIR and at least one --prompt are required\n");
        usage(stderr);
        return 2;
    }
    for (int i = 0; i < o->n_prompts; i++)
        if (!o->prompts[i][0]) return fprintf(stderr, "ctrainer generate: --prompt %d is empty\n", i + 1), 2;
    return -1;
}

/* The config's settings with the command line's on top. */
static ct_status settings(const gen_opts *o, const ct_run_config *c, ct_generation_config *g) {
    CT_TRY(ct_run_config_annotate((ct_run_config *)c, ct_generation_config_from_json(
                                                          ct_run_config_section(c, "generation"), "generation", g)));
    if (o->has_max_new) g->max_new_tokens = o->g.max_new_tokens;
    if (o->has_sample) g->do_sample = o->g.do_sample;
    if (o->has_temperature) g->temperature = o->g.temperature;
    if (o->has_top_k) g->top_k = o->g.top_k;
    if (o->has_top_p) g->top_p = o->g.top_p;
    if (o->has_eos) g->eos_token_id = o->g.eos_token_id;
    if (o->has_seed) g->seed = o->g.seed;
    return ct_generation_config_check(g, "generate");
}

/* m built from spec (a gpt; `from` names where the spec came from) for a window of the longest prompt
 * plus max_new tokens. */
static ct_status build_spec(const json_t *spec, const char *from, int64_t longest, int64_t max_new, int64_t rows,
                            ct_model *m) {
    const char *type = json_string_value(json_object_get(spec, "type"));
    if (!type || strcmp(type, "gpt") != 0)
        return ct_error(CT_ERR_CONFIG, "%s: model.type is '%s'; generate needs a language model (\"gpt\")", from,
                        type ? type : "?");
    json_int_t n_positions = 1024; /* the gpt's default (model/gpt.c) */
    if (json_is_integer(json_object_get(spec, "n_positions")))
        n_positions = json_integer_value(json_object_get(spec, "n_positions"));
    int64_t window = longest + max_new < n_positions ? longest + max_new : n_positions;
    if (window < 1) window = 1;
    ct_module *root;
    CT_TRY(ct_module_from_json(spec, "model", &root));
    ct_shape in = {.ndim = 1, .dims = {window}};
    ct_model_options opts = {.dtype = CT_F32, .device = CT_CPU, .max_batch = rows < 64 ? rows : 64};
    return ct_model_build(m, root, &in, &opts);
}

/* The model DIR/model.h5 was saved as (a model trained with other sizes than the config's, through
 * --set model.n_embd, generates as it was trained), else the config's, with DIR/model.h5's weights. */
static ct_status load_model(const gen_opts *o, const ct_run_config *c, int64_t longest, int64_t max_new, int64_t rows,
                            ct_model *m) {
    char file[4200];
    snprintf(file, sizeof file, "%s/model.h5", o->model_dir);
    json_t *saved = NULL;
    ct_shape saved_in;
    ct_dtype saved_dtype;
    if (ct_model_read_h5_architecture(file, &saved, &saved_in, &saved_dtype) != CT_OK) saved = NULL;
    ct_error_clear(); /* none recorded: the config's; a damaged file: the load below says so */
    ct_status s;
    if (saved) {
        s = build_spec(saved, file, longest, max_new, rows, m);
    } else {
        const json_t *spec = ct_run_config_section(c, "model");
        s = spec ? ct_run_config_annotate(c, build_spec(spec, c->file, longest, max_new, rows, m))
                 : ct_error(CT_ERR_CONFIG, "%s: the run config has no \"model\" section", c->file);
    }
    json_decref(saved);
    if (s != CT_OK) return s;
    s = ct_checkpoint_load_model(m, o->model_dir);
    if (s != CT_OK) ct_model_free(m);
    return s;
}

static ct_status print_texts(const gen_opts *o, int64_t rows, int64_t stride, const int64_t *ids, const int64_t *len,
                             const int64_t *prompt_len) {
    unsigned char *text = malloc((size_t)stride + 1);
    char *utf8 = malloc(3 * (size_t)stride + 1);
    json_t *all = o->output ? json_array() : NULL;
    ct_status s = text && utf8 && (!o->output || all) ? CT_OK : ct_error(CT_ERR_NOMEM, "generate: out of memory");
    for (int64_t r = 0; s == CT_OK && r < rows; r++) {
        /* Prompts are bytes (no end-of-text id), so the prompt is the text's first prompt_len bytes. */
        size_t n_text = 0, n_prompt = (size_t)prompt_len[r];
        s = ct_byte_decode(ids + r * stride, (size_t)len[r], text, &n_text);
        if (s != CT_OK) break;
        if (!all) {
            if (rows > 1) printf("--- sequence %lld (prompt %lld) ---\n", (long long)r, (long long)(r / o->num_return));
            fwrite(text, 1, n_text, stdout);
            fputc('\n', stdout);
            continue;
        }
        json_t *tokens = json_array(), *item = json_object();
        for (int64_t j = prompt_len[r]; j < len[r]; j++) json_array_append_new(tokens, json_integer(ids[r * stride + j]));
        /* JSON strings are UTF-8: ill-formed bytes become U+FFFD (generated_ids keep the bytes). */
        size_t n8 = ct_utf8_sanitize(text, n_prompt, utf8);
        json_object_set_new(item, "prompt", json_stringn(utf8, n8));
        n8 = ct_utf8_sanitize(text + n_prompt, n_text - n_prompt, utf8);
        json_object_set_new(item, "generated_text", json_stringn(utf8, n8));
        json_object_set_new(item, "generated_ids", tokens);
        json_array_append_new(all, item);
    }
    if (s == CT_OK && all && json_dump_file(all, o->output, JSON_INDENT(2)) != 0)
        s = ct_error(CT_ERR_IO, "generate: cannot write '%s': %s", o->output, strerror(errno));
    json_decref(all);
    free(text);
    free(utf8);
    return s;
}

static ct_status run(const gen_opts *o) {
    ct_run_config c;
    CT_TRY(ct_run_config_load(o->config, &c));
    ct_status s = CT_OK;
    for (int i = 0; s == CT_OK && i < o->n_sets; i++) s = ct_run_config_set(&c, o->sets[i]);
    char model_file[4200];
    snprintf(model_file, sizeof model_file, "%s/model.h5", o->model_dir);
    const char *inputs[] = {o->config, model_file};
    if (s == CT_OK && o->output) s = cli_check_output("--output", o->output, inputs, 2, &c);
    ct_generation_config g;
    if (s == CT_OK) s = settings(o, &c, &g);
    const int64_t rows = o->n_prompts * o->num_return;
    int64_t longest = 0;
    for (int i = 0; i < o->n_prompts; i++)
        if ((int64_t)strlen(o->prompts[i]) > longest) longest = (int64_t)strlen(o->prompts[i]);
    const int64_t stride = longest + g.max_new_tokens;
    int64_t *ids = malloc((size_t)(rows * stride) * sizeof *ids), *len = malloc((size_t)rows * sizeof *len),
            *prompt_len = malloc((size_t)rows * sizeof *prompt_len);
    if (s == CT_OK && (!ids || !len || !prompt_len)) s = ct_error(CT_ERR_NOMEM, "generate: out of memory");
    ct_model m;
    bool built = false;
    if (s == CT_OK) s = load_model(o, &c, longest, g.max_new_tokens, rows, &m);
    built = s == CT_OK;
    const int64_t vocab = built ? m.out_shape.dims[m.out_shape.ndim - 1] : 0;
    for (int64_t r = 0; s == CT_OK && r < rows; r++) {
        const char *p = o->prompts[r / o->num_return];
        prompt_len[r] = len[r] = (int64_t)strlen(p);
        ct_byte_encode((const unsigned char *)p, (size_t)len[r], ids + r * stride);
        for (int64_t j = 0; j < len[r]; j++)
            if (ids[r * stride + j] >= vocab)
                s = ct_error(CT_ERR_CONFIG, "generate: prompt %lld has byte %lld at %lld, beyond the model's vocab_size %lld",
                             (long long)(r / o->num_return + 1), (long long)ids[r * stride + j], (long long)j,
                             (long long)vocab);
    }
    /* The model sees the last n_positions tokens; a row stops when it reaches the stride. */
    if (s == CT_OK) s = ct_generate(&m, &g, rows, stride, ids, len, 0);
    if (s == CT_OK) s = print_texts(o, rows, stride, ids, len, prompt_len);
    if (built) ct_model_free(&m);
    free(ids);
    free(len);
    free(prompt_len);
    ct_run_config_free(&c);
    return s;
}

int ct_cli_generate(int argc, char **argv) {
    gen_opts o;
    memset(&o, 0, sizeof o);
    o.g = ct_generation_config_default();
    int code = parse(argc, argv, &o);
    if (code >= 0) return code;
    ct_status s = run(&o);
    if (s == CT_OK) return 0;
    fprintf(stderr, "ctrainer generate: %s\n", ct_last_error());
    return s == CT_ERR_CONFIG || s == CT_ERR_INVALID_ARG || s == CT_ERR_IO ? 2 : 1;
}
