/* A fault-injection shim for the kill tests (LD_PRELOAD): it SIGKILLs the process at an exact point
 * of a checkpoint's life, which no timer outside the process can hit reliably (rotation renames and
 * deletes a small checkpoint in well under a millisecond).
 *
 * CT_KILL_AFTER=WHAT:TEXT:N: after the N-th successful call (from 1) that matches, the process kills
 * itself with SIGKILL, as an OOM killer or a pre-emption would:
 *   rename_to:TEXT    rename() whose new name ends with TEXT (".deleting": rotation set a victim aside)
 *   rename_from:TEXT  rename() whose old name ends with TEXT (".tmp": a save's commit)
 *   remove_in:TEXT    remove() of a path that contains TEXT (".deleting/": a victim half deleted)
 *   gemm_off_main:    a float GEMM of a library engine (cblas_sgemm() under CT_CPU_GEMM=openblas,
 *                     dnnl_sgemm() under onednn; the built-in engine has no point to interpose)
 *                     called by a thread other than the process's first and not by an
 *                     OpenMP worker, before it runs (TEXT empty): in a run of linear layers only,
 *                     the forwards of the asynchronous evaluator (eval_async), one call per layer and
 *                     batch, as training's run on the main thread (a GEMM the CPU backend splits
 *                     over the thread team runs its other blocks on the team's workers)
 * Without CT_KILL_AFTER, or with a value it cannot read, the calls just pass through. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static char what[32], text[256];
static long target = -1;
static atomic_long seen;

__attribute__((constructor)) static void read_spec(void) {
    const char *spec = getenv("CT_KILL_AFTER");
    if (!spec) return;
    const char *a = strchr(spec, ':'), *b = a ? strrchr(spec, ':') : NULL;
    if (!a || b == a || (size_t)(a - spec) >= sizeof what || (size_t)(b - a - 1) >= sizeof text) return;
    snprintf(what, sizeof what, "%.*s", (int)(a - spec), spec);
    snprintf(text, sizeof text, "%.*s", (int)(b - a - 1), a + 1);
    target = strtol(b + 1, NULL, 10);
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static void count(bool match) {
    if (match && target > 0 && atomic_fetch_add(&seen, 1) + 1 == target) raise(SIGKILL);
}

int rename(const char *from, const char *to) {
    static int (*real)(const char *, const char *);
    if (!real) real = (int (*)(const char *, const char *))dlsym(RTLD_NEXT, "rename");
    int rc = real(from, to);
    if (rc == 0)
        count((strcmp(what, "rename_to") == 0 && ends_with(to, text)) ||
              (strcmp(what, "rename_from") == 0 && ends_with(from, text)));
    return rc;
}

/* The calling thread's number in its OpenMP team (0 outside one), from the process's libgomp: the
 * shim links no OpenMP runtime of its own. */
static int omp_thread_num(void) {
    static int (*fn)(void);
    if (!fn) fn = (int (*)(void))dlsym(RTLD_DEFAULT, "omp_get_thread_num");
    return fn ? fn() : 0;
}

/* OpenBLAS's prototype, its enums as the ints they are passed as. */
typedef void (*sgemm_fn)(int, int, int, int, int, int, float, const float *, int, const float *, int, float, float *,
                         int);

static void count_gemm(void) {
    if (strcmp(what, "gemm_off_main") == 0) count(syscall(SYS_gettid) != getpid() && omp_thread_num() == 0);
}

void cblas_sgemm(int order, int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda, const float *b,
                 int ldb, float beta, float *c, int ldc) {
    static sgemm_fn real;
    if (!real) real = (sgemm_fn)dlsym(RTLD_NEXT, "cblas_sgemm");
    count_gemm();
    real(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

/* oneDNN's prototype: its status enum as the int it is returned as, dnnl_dim_t as int64_t. */
typedef int (*dnnl_sgemm_fn)(char, char, int64_t, int64_t, int64_t, float, const float *, int64_t, const float *,
                             int64_t, float, float *, int64_t);

int dnnl_sgemm(char ta, char tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
               const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
    static dnnl_sgemm_fn real;
    if (!real) real = (dnnl_sgemm_fn)dlsym(RTLD_NEXT, "dnnl_sgemm");
    count_gemm();
    return real(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

int remove(const char *path) {
    static int (*real)(const char *);
    if (!real) real = (int (*)(const char *))dlsym(RTLD_NEXT, "remove");
    int rc = real(path);
    if (rc == 0) count(strcmp(what, "remove_in") == 0 && strstr(path, text));
    return rc;
}
