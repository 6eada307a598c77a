/* The `ctrainer` program: dispatches to a subcommand. */
#include <stdio.h>
#include <string.h>

#include "callbacks/tensorboard.h"
#include "cli/cli.h"
#include "core/device.h"
#include "core/ops/backend.h"
#include "core/ops/ops.h"
#include "report/plot.h"

/* The backends (`ctrainer version`): the CPU's description, then each other kind compiled in with
 * a line per device it sees, or why it is not there (not compiled in, or no device on this machine,
 * in which case its module is not loaded). */
static void print_backends(void) {
    static const char *const kinds[CT_DEVICE_KINDS] = {[CT_DEVICE_CPU] = "CPU", [CT_DEVICE_CUDA] = "CUDA"};
    char what[256], name[32];
    for (int k = 0; k < CT_DEVICE_KINDS; k++) {
        const ct_backend_ops *b = ct_backend_for_kind((ct_device_kind)k);
        if (!b) { /* not compiled in, or its module not loaded: the sentence says which */
            printf("%s: %s\n", kinds[k], ct_backend_load_error((ct_device_kind)k));
            continue;
        }
        if (k == CT_DEVICE_CPU) {
            what[0] = '\0';
            if (b->describe) b->describe(0, what, sizeof what);
            printf("CPU: %s\n", what);
            continue;
        }
        int n = ct_device_count((ct_device_kind)k);
        printf("%s: compiled in, %d device(s) visible\n", kinds[k], n);
        for (int i = 0; i < n; i++) {
            what[0] = '\0';
            if (b->describe) b->describe(i, what, sizeof what);
            printf("  %s: %s\n", ct_device_str((ct_device){(ct_device_kind)k, i}, name, sizeof name), what);
        }
    }
}

static void usage(FILE *f) {
    fprintf(f, "usage: ctrainer <command> [options]\n\n"
               "commands:\n"
               "  train     train from a JSON run config (train --help)\n"
               "  evaluate  evaluate a saved model on a config's evaluation data (evaluate --help)\n"
               "  predict   write a saved model's predictions to HDF5 (predict --help)\n"
               "  generate  continue a prompt with a saved language model (generate --help)\n"
               "  export    write a saved model as safetensors for PyTorch (export --help)\n"
               "  plot      draw loss, learning-rate and metric curves of a run (plot --help)\n"
               "  search    hyperparameter search: one fresh run per trial (search --help)\n"
               "  config    the training arguments' defaults and reference (config --help)\n"
               "  demo      train a model on Fashion-MNIST with ctrainer's layers (demo --help)\n"
               "  data      convert IDX or CSV data to HDF5, tokenize text for language models (data --help)\n"
               "  version   print the version\n");
}

int main(int argc, char **argv) {
    /* CT_CPU_ISA names the kernels' level for every command (core/ops/ops.h); a wrong one is an
     * error before anything runs, not a silent run on another path */
    if (ct_cpu_isa_check() != CT_OK || ct_num_threads_check() != CT_OK) {
        fprintf(stderr, "ctrainer: %s\n", ct_last_error());
        return 2;
    }
    if (argc < 2 || strcmp(argv[1], "help") == 0 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "train") == 0 || strcmp(argv[1], "evaluate") == 0 || strcmp(argv[1], "predict") == 0)
        return ct_cli_run(argc - 1, argv + 1);
    if (strcmp(argv[1], "config") == 0) return ct_cli_config(argc - 1, argv + 1);
    if (strcmp(argv[1], "generate") == 0) return ct_cli_generate(argc - 1, argv + 1);
    if (strcmp(argv[1], "export") == 0) return ct_cli_export(argc - 1, argv + 1);
    if (strcmp(argv[1], "plot") == 0) return ct_cli_plot(argc - 1, argv + 1);
    if (strcmp(argv[1], "search") == 0) return ct_cli_search(argc - 1, argv + 1);
    if (strcmp(argv[1], "demo") == 0) return ct_cli_demo(argc - 1, argv + 1);
    if (strcmp(argv[1], "data") == 0) return ct_cli_data(argc - 1, argv + 1);
    if (strcmp(argv[1], "version") == 0 || strcmp(argv[1], "--version") == 0) {
        if (argc > 2 && (strcmp(argv[2], "--help") == 0 || strcmp(argv[2], "-h") == 0)) {
            printf("usage: ctrainer version\n"
                   "Prints ctrainer's version, its backends (the CPU's threads, the instruction-set level its kernels run\n"
                   "at (CT_CPU_ISA=v1..v4 forces a lower one) and BLAS; whether CUDA is compiled in\n"
                   "and the GPUs it sees), and whether the optional parts are: TensorBoard event files (protobuf-c)\n"
                   "and training curves (cairo).\n");
            return 0;
        }
        printf("ctrainer %s\n", CT_VERSION);
        print_backends();
        const char *pb = ct_tb_protobuf_c_version(), *cairo = ct_plot_cairo_version();
        if (pb) printf("TensorBoard: yes (protobuf-c %s)\n", pb);
        else printf("TensorBoard: no (configure with -DCTRAINER_TENSORBOARD=ON)\n");
        if (cairo) printf("plots: yes (cairo %s)\n", cairo);
        else printf("plots: no (configure with -DCTRAINER_PLOT=ON)\n");
        return 0;
    }
    fprintf(stderr, "ctrainer: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
