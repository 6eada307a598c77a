/* The training loop of llm.c's CPU trainer (train_gpt2.c, github.com/karpathy/llm.c) with its
 * batch, context, step count, files and AdamW settings from the command line, for bench/gpt.py.
 *
 * train_gpt2.c's own main() fixes B = 4, T = 64, 41 steps and its data paths, and between steps
 * it evaluates on validation batches and samples text. This file compiles train_gpt2.c without its
 * main() (TESTING, the way llm.c's test_gpt2.c includes it) and runs, per step, the same five calls
 * main() times: next batch, forward, zero_grad, backward, AdamW update; each step's line is flushed
 * at once, so the benchmark can time the lines' arrival as it does ctrainer's. bench/gpt.py
 * compiles it against the checkout given with --llmc (LLMC_TRAIN_GPT2 is that train_gpt2.c's
 * path); the project's build never does, and no llm.c code is part of this repository.
 *
 * Usage: llmc_train MODEL.bin TOKENS.bin B T STEPS LR BETA1 BETA2 EPS WEIGHT_DECAY */
#ifndef LLMC_TRAIN_GPT2
#error "compile with -DLLMC_TRAIN_GPT2='\"PATH/train_gpt2.c\"' (bench/gpt.py --llmc does)"
#endif
#define TESTING
#include LLMC_TRAIN_GPT2

/* A positive int from argv, or exit 2 naming the argument. */
static int positive_arg(const char *name, const char *text) {
    char *end;
    long v = strtol(text, &end, 10);
    if (*text == '\0' || *end != '\0' || v <= 0 || v > 1000000000) {
        fprintf(stderr, "llmc_train: %s must be a positive integer, got '%s'\n", name, text);
        exit(2);
    }
    return (int)v;
}

static float float_arg(const char *name, const char *text) {
    char *end;
    float v = strtof(text, &end);
    if (*text == '\0' || *end != '\0' || !isfinite(v)) {
        fprintf(stderr, "llmc_train: %s must be a number, got '%s'\n", name, text);
        exit(2);
    }
    return v;
}

int main(int argc, char **argv) {
    if (argc != 11) {
        fprintf(stderr, "usage: llmc_train MODEL.bin TOKENS.bin B T STEPS LR BETA1 BETA2 EPS WEIGHT_DECAY\n");
        return 2;
    }
    int B = positive_arg("B", argv[3]), T = positive_arg("T", argv[4]), steps = positive_arg("STEPS", argv[5]);
    float lr = float_arg("LR", argv[6]), beta1 = float_arg("BETA1", argv[7]), beta2 = float_arg("BETA2", argv[8]);
    float eps = float_arg("EPS", argv[9]), weight_decay = float_arg("WEIGHT_DECAY", argv[10]);

    GPT2 model;
    gpt2_build_from_checkpoint(&model, argv[1]);
    /* llm.c reads position embeddings up to T without checking it against the model's. */
    if (T > model.config.max_seq_len) {
        fprintf(stderr, "llmc_train: T %d exceeds the model's max_seq_len %d\n", T, model.config.max_seq_len);
        return 2;
    }
    DataLoader loader;
    dataloader_init(&loader, argv[2], B, T, 0, 1, 1);

    struct timespec start, end;
    for (int step = 0; step < steps; step++) {
        clock_gettime(CLOCK_MONOTONIC, &start);
        dataloader_next_batch(&loader);
        gpt2_forward(&model, loader.inputs, loader.targets, B, T);
        gpt2_zero_grad(&model);
        gpt2_backward(&model);
        gpt2_update(&model, lr, beta1, beta2, eps, weight_decay, step + 1);
        clock_gettime(CLOCK_MONOTONIC, &end);
        double ms = (end.tv_sec - start.tv_sec) * 1e3 + (end.tv_nsec - start.tv_nsec) / 1e6;
        printf("step %d: train loss %f (took %f ms)\n", step, model.mean_loss, ms);
        fflush(stdout);
    }
    dataloader_free(&loader);
    gpt2_free(&model);
    return 0;
}
