/* The op profile (core/ops/op_profile.h): each op call counted once under its name and backend while
 * it is on, nothing while it is off, times that add up to the shares printed; and, with
 * CTRAINER_OP_PROFILE=1 in the environment, the table printed at exit (a child process of this test). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ops/op_profile.h"
#include "core/ops/ops.h"
#include "core/tensor.h"
#include "testlib.h"

/* The calls column of op `name` in a report, or -1 when it has no row. */
static long long calls_of(const char *report, const char *name) {
    char key[64];
    snprintf(key, sizeof key, "\n  %s ", name);
    const char *row = strstr(report, key);
    if (!row) return -1;
    char op[64], backend[16];
    long long calls;
    return sscanf(row, " %63s %15s %lld", op, backend, &calls) == 3 ? calls : -1;
}

static char *report_now(void) {
    char *text = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&text, &size);
    ct_op_profile_report(f);
    fclose(f);
    return text;
}

/* A few ops: fill three times, gemm twice, scale once. */
static void run_ops(void) {
    const int64_t s[2] = {8, 8};
    ct_tensor a, b, c;
    CHECK_OK(ct_tensor_alloc(&a, CT_F32, CT_CPU, 2, s));
    CHECK_OK(ct_tensor_alloc(&b, CT_F32, CT_CPU, 2, s));
    CHECK_OK(ct_tensor_alloc(&c, CT_F32, CT_CPU, 2, s));
    ct_op_fill(&a, 1.0);
    ct_op_fill(&b, 2.0);
    ct_op_fill(&c, 0.0);
    ct_op_gemm(false, false, 1.0, &a, &b, 0.0, &c);
    ct_op_gemm(false, true, 1.0, &a, &b, 1.0, &c);
    ct_op_scale(&c, 0.5);
    CHECK(((float *)c.data)[0] == 16.0f, "the ops computed (c[0] = %g, want 16)", ((float *)c.data)[0]);
    ct_tensor_free(&a);
    ct_tensor_free(&b);
    ct_tensor_free(&c);
}

static void test_counts(void) {
    ct_op_profile_reset();
    ct_op_profile_enable(false);
    run_ops();
    char *off = report_now();
    CHECK(calls_of(off, "fill") == -1 && calls_of(off, "gemm") == -1, "nothing counted while off:\n%s", off);
    free(off);
    ct_op_profile_enable(true);
    run_ops();
    run_ops();
    ct_op_profile_enable(false);
    run_ops();
    char *on = report_now();
    CHECK(calls_of(on, "fill") == 6 && calls_of(on, "gemm") == 4 && calls_of(on, "scale") == 2,
          "fill 6, gemm 4, scale 2 calls while on, got %lld, %lld, %lld:\n%s", calls_of(on, "fill"),
          calls_of(on, "gemm"), calls_of(on, "scale"), on);
    CHECK(strstr(on, "12 op calls") != NULL, "the header counts 12 calls:\n%s", on);
    double share = 0;
    for (const char *p = strchr(on, '%'); p; p = strchr(p + 1, '%')) {
        const char *q = p;
        while (q > on && q[-1] != ' ') q--;
        share += atof(q);
    }
    CHECK(share > 99.0 && share < 101.0, "the shares add up to 100%% (%g):\n%s", share, on);
    free(on);
    ct_op_profile_reset();
    char *empty = report_now();
    CHECK(strstr(empty, "0 op calls") != NULL, "reset empties the table:\n%s", empty);
    free(empty);
}

/* This program again, as a child with CTRAINER_OP_PROFILE=1: its report at exit names its ops. */
static void test_environment(const char *self) {
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "CTRAINER_OP_PROFILE=1 '%s' --child 2>&1", self);
    FILE *p = popen(cmd, "r");
    CHECK(p != NULL, "popen %s", cmd);
    if (!p) return;
    char out[8192];
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = 0;
    int status = pclose(p);
    CHECK(status == 0, "the child exits 0 (%d):\n%s", status, out);
    CHECK(strstr(out, "op profile (CTRAINER_OP_PROFILE)") != NULL && calls_of(out, "gemm") == 2 &&
              calls_of(out, "fill") == 3,
          "the child's report at exit counts its ops:\n%s", out);
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--child") == 0) {
        run_ops();
        return 0;
    }
    ct_test_begin("test_op_profile");
    test_counts();
    test_environment(argv[0]);
    return ct_test_finish();
}
