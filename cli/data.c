/* `ctrainer data`: tools for data sets. `data convert` turns IDX image/label files or a CSV file into
 * the HDF5 layout that the "hdf5" dataset reads (see data/convert.h), then opens the result as a
 * dataset to check it and say what it holds. Exit codes: 0 done, 1 runtime failure, 2 usage error. */
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "data/convert.h"
#include "data/dataset.h"

static void data_usage(FILE *f) {
    fprintf(f, "usage: ctrainer data <command> [options]\n\n"
               "commands:\n"
               "  convert   write IDX or CSV data as an HDF5 file for training (data convert --help)\n");
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

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "ctrainer data convert: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    convert_usage(stderr);
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

    ct_status s = csv ? ct_convert_csv_to_hdf5(csv, label_column, has_header, out, chunk, level)
                      : ct_convert_idx_to_hdf5(images, labels, out, chunk, level);
    if (s == CT_OK) s = describe(out);
    if (s != CT_OK) {
        fprintf(stderr, "ctrainer data convert: %s\n", ct_last_error());
        return s == CT_ERR_INVALID_ARG || s == CT_ERR_CONFIG ? 2 : 1;
    }
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
    fprintf(stderr, "ctrainer data: unknown data command '%s'\n", argv[1]);
    data_usage(stderr);
    return 2;
}
