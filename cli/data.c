/* `ctrainer data`: tools for data sets. `data convert` turns IDX image/label files or a CSV file into
 * the HDF5 layout that the "hdf5" dataset reads (see data/convert.h), then opens the result as a
 * dataset to check it and say what it holds. `data tokenize` turns text files into the token files
 * the "tokens" dataset reads, with the byte-level tokenizer (data/tokenizer.h). Exit codes: 0 done,
 * 1 runtime failure, 2 usage error. */
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/output_guard.h"
#include "data/convert.h"
#include "data/dataset.h"
#include "data/tokenizer.h"

static void data_usage(FILE *f) {
    fprintf(f, "usage: ctrainer data <command> [options]\n\n"
               "commands:\n"
               "  convert   write IDX or CSV data as an HDF5 file for training (data convert --help)\n"
               "  tokenize  turn text files into token files for language models (data tokenize --help)\n");
}

static void convert_usage(FILE *f) {
    fprintf(f,
            "usage: ctrainer data convert --images FILE --labels FILE -o OUT.h5 [--chunk N] [--compression L]\n"
            "       ctrainer data convert --csv FILE [--label-column NAME|INDEX] [--header|--no-header]\n"
            "                             -o OUT.h5 [--chunk N] [--compression L]\n\n"
            "Writes the datasets \"features\" and \"labels\" of OUT.h5, chunked by rows and deflate-compressed.\n"
            "  --images, --labels   IDX files (raw or .gz, e.g. Fashion-MNIST); u8 pixels stay u8 and\n"
            "                       [N, H, W] images become [N, 1, H, W]\n"
            "  --csv                numbers, one sample per line; features become float32 [N, D]\n"
            "  --label-column       the label's column: a header name or a 0-based index, negative from\n"
            "                       the end (default: the last column)\n"
            "  --header, --no-header  whether the first line names the columns (default: detected)\n"
            "  --chunk N            rows per chunk (default %d)\n"
            "  --compression L      deflate level 0 (none) to 9 (default %d)\n"
            "Labels are int64 class ids (with a num_classes attribute) when all are non-negative integers,\n"
            "float32 targets otherwise.\n",
            CT_CONVERT_DEFAULT_CHUNK_ROWS, CT_CONVERT_DEFAULT_COMPRESSION);
}

static void tokenize_usage(FILE *f) {
    fprintf(f,
            "usage: ctrainer data tokenize --input FILE... --output TRAIN.bin [--val-output VAL.bin]\n"
            "                              [--val-fraction F] [--bytes-per-token 2|4] [--eot]\n\n"
            "Writes the byte-level tokens of the input files, in order, as a flat little-endian array of\n"
            "uint16 (or uint32) ids: the file the \"tokens\" dataset reads. Every byte is one token (ids\n"
            "0-255); --eot ends each input with the end-of-text id 256, and the model then needs\n"
            "vocab_size 257 (else 256).\n"
            "  --input FILE...      text files (several after one --input, or --input repeated)\n"
            "  --output FILE        the training tokens (directories are created)\n"
            "  --val-output FILE    also write validation tokens: the last --val-fraction of every input,\n"
            "                       cut at the start of a line\n"
            "  --val-fraction F     in (0, 1), default 0.1 with --val-output\n"
            "  --bytes-per-token N  2 (uint16, the default) or 4 (uint32)\n"
            "  --eot                end every input's part with the end-of-text token 256\n");
}

/* The usage message of the command being run: convert's or tokenize's. */
static void (*current_usage)(FILE *) = convert_usage;
static const char *current_name = "convert";

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "ctrainer data %s: ", current_name);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    current_usage(stderr);
    return 2;
}

/* Opens the written file as a dataset: proves it reads back and says what it holds. */
static ct_status describe(const char *path) {
    ct_hdf5_dataset_config cfg = {.path = path};
    ct_dataset *ds;
    CT_TRY(ct_hdf5_dataset_create(&cfg, &ds));
    char f[128], l[128];
    const ct_sample_spec *sp = &ds->spec;
    printf("wrote %s: %lld samples, features %s %s, labels %s %s", path, (long long)ct_dataset_length(ds),
           ct_sample_shape_str(&sp->feature_shape, f, sizeof f), ct_dtype_name(sp->feature_dtype),
           ct_sample_shape_str(&sp->label_shape, l, sizeof l), ct_dtype_name(sp->label_dtype));
    if (sp->num_classes) printf(", %lld classes", (long long)sp->num_classes);
    printf("\n");
    ct_dataset_free(ds);
    return CT_OK;
}

static int convert(int argc, char **argv) {
    const char *images = NULL, *labels = NULL, *csv = NULL, *label_column = NULL, *out = NULL;
    int has_header = -1, level = CT_CONVERT_DEFAULT_COMPRESSION;
    int64_t chunk = CT_CONVERT_DEFAULT_CHUNK_ROWS;
    static const struct option longopts[] = {
        {"images", required_argument, 0, 'i'},       {"labels", required_argument, 0, 'l'},
        {"csv", required_argument, 0, 'c'},          {"label-column", required_argument, 0, 'L'},
        {"header", no_argument, 0, 'H'},             {"no-header", no_argument, 0, 'N'},
        {"output", required_argument, 0, 'o'},       {"chunk", required_argument, 0, 'k'},
        {"compression", required_argument, 0, 'z'},  {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    int c;
    char *end;
    optind = 1;
    opterr = 0; /* our own message below names the option */
    while ((c = getopt_long(argc, argv, ":o:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'i': images = optarg; break;
        case 'l': labels = optarg; break;
        case 'c': csv = optarg; break;
        case 'L': label_column = optarg; break;
        case 'H': has_header = 1; break;
        case 'N': has_header = 0; break;
        case 'o': out = optarg; break;
        case 'k': {
            long long v = strtoll(optarg, &end, 10);
            if (!*optarg || *end || v <= 0) return usage_error("--chunk expects a positive integer, got '%s'", optarg);
            chunk = v;
            break;
        }
        case 'z': {
            long v = strtol(optarg, &end, 10);
            if (!*optarg || *end || v < 0 || v > 9)
                return usage_error("--compression expects an integer from 0 to 9, got '%s'", optarg);
            level = (int)v;
            break;
        }
        case 'h': convert_usage(stdout); return 0;
        case ':': return usage_error("%s needs a value", argv[optind - 1]);
        default: return usage_error("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc) return usage_error("unexpected argument '%s'", argv[optind]);
    if (csv && (images || labels)) return usage_error("give either --csv or --images and --labels, not both");
    if (!csv && !images && !labels) return usage_error("nothing to convert: give --images and --labels, or --csv");
    if (!csv && !images) return usage_error("--labels needs --images");
    if (!csv && !labels) return usage_error("--images needs --labels");
    if (!csv && (label_column || has_header >= 0))
        return usage_error("--label-column, --header and --no-header apply to --csv only");
    if (!out) return usage_error("-o OUT.h5 is required");

    const char *inputs[] = {csv, images, labels};
    ct_status s = cli_check_output("-o", out, inputs, 3, NULL);
    if (s == CT_OK)
        s = csv ? ct_convert_csv_to_hdf5(csv, label_column, has_header, out, chunk, level)
                : ct_convert_idx_to_hdf5(images, labels, out, chunk, level);
    if (s == CT_OK) s = describe(out);
    if (s != CT_OK) {
        fprintf(stderr, "ctrainer data convert: %s\n", ct_last_error());
        return s == CT_ERR_INVALID_ARG || s == CT_ERR_CONFIG ? 2 : 1;
    }
    return 0;
}

static int tokenize(int argc, char **argv) {
    const char **inputs = calloc((size_t)argc, sizeof *inputs);
    if (!inputs) {
        fprintf(stderr, "ctrainer data tokenize: out of memory\n");
        return 1;
    }
    ct_tokenize_opts o = {.inputs = inputs, .bytes_per_token = 2};
    bool fraction_given = false;
    static const struct option longopts[] = {
        {"input", required_argument, 0, 'i'},      {"output", required_argument, 0, 'o'},
        {"val-output", required_argument, 0, 'v'}, {"val-fraction", required_argument, 0, 'f'},
        {"bytes-per-token", required_argument, 0, 'b'}, {"eot", no_argument, 0, 'e'},
        {"help", no_argument, 0, 'h'},             {0, 0, 0, 0}};
    int c, rc = -1;
    char *end;
    optind = 1;
    opterr = 0;
    /* "+": options end at the first stray word, which the loop below then reports */
    while (rc < 0 && (c = getopt_long(argc, argv, "+:o:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'i':
            /* --input a b c: the files up to the next option */
            inputs[o.n_inputs++] = optarg;
            while (optind < argc && argv[optind][0] != '-') inputs[o.n_inputs++] = argv[optind++];
            break;
        case 'o': o.output = optarg; break;
        case 'v': o.val_output = optarg; break;
        case 'f':
            o.val_fraction = strtod(optarg, &end);
            if (!*optarg || *end || !(o.val_fraction > 0 && o.val_fraction < 1))
                rc = usage_error("--val-fraction expects a number between 0 and 1 (exclusive), got '%s'", optarg);
            fraction_given = true;
            break;
        case 'b':
            if (strcmp(optarg, "2") != 0 && strcmp(optarg, "4") != 0)
                rc = usage_error("--bytes-per-token expects 2 or 4, got '%s'", optarg);
            o.bytes_per_token = optarg[0] - '0';
            break;
        case 'e': o.eot = true; break;
        case 'h': tokenize_usage(stdout); rc = 0; break;
        case ':': rc = usage_error("%s needs a value", argv[optind - 1]); break;
        default: rc = usage_error("unknown option '%s'", argv[optind - 1]); break;
        }
    }
    if (rc < 0 && optind < argc) rc = usage_error("unexpected argument '%s'", argv[optind]);
    if (rc < 0 && o.n_inputs == 0) rc = usage_error("nothing to tokenize: give --input FILE...");
    if (rc < 0 && !o.output) rc = usage_error("--output TRAIN.bin is required");
    if (rc < 0 && fraction_given && !o.val_output) rc = usage_error("--val-fraction needs --val-output");
    if (rc >= 0) {
        free(inputs);
        return rc;
    }
    if (o.val_output && !fraction_given) o.val_fraction = 0.1;
    ct_tokenize_result r;
    ct_status s = cli_check_output("--output", o.output, o.inputs, o.n_inputs, NULL);
    if (s == CT_OK && o.val_output) s = cli_check_output("--val-output", o.val_output, o.inputs, o.n_inputs, NULL);
    if (s == CT_OK) s = ct_tokenize_files(&o, &r);
    free(inputs);
    if (s != CT_OK) {
        /* The library's messages name the function; here the command already does. */
        const char *msg = ct_last_error();
        if (strncmp(msg, "tokenize: ", 10) == 0) msg += 10;
        fprintf(stderr, "ctrainer data tokenize: %s\n", msg);
        return s == CT_ERR_CONFIG ? 2 : 1;
    }
    const char *width = o.bytes_per_token == 4 ? "uint32" : "uint16";
    printf("wrote %s: %lld tokens (%s)\n", o.output, (long long)r.train_tokens, width);
    if (o.val_output) printf("wrote %s: %lld tokens (%s)\n", o.val_output, (long long)r.val_tokens, width);
    printf("vocabulary: %lld (%s); use \"vocab_size\": %lld in the model and the dataset\n", (long long)r.vocab_size,
           o.eot ? "bytes 0-255 and end-of-text 256" : "bytes 0-255", (long long)r.vocab_size);
    return 0;
}

int ct_cli_data(int argc, char **argv) {
    if (argc < 2) {
        data_usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "help") == 0) {
        data_usage(stdout);
        return 0;
    }
    if (strcmp(argv[1], "convert") == 0) return convert(argc - 1, argv + 1);
    if (strcmp(argv[1], "tokenize") == 0) {
        current_usage = tokenize_usage;
        current_name = "tokenize";
        return tokenize(argc - 1, argv + 1);
    }
    fprintf(stderr, "ctrainer data: unknown data command '%s'\n", argv[1]);
    data_usage(stderr);
    return 2;
}
