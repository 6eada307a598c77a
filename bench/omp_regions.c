/* Counts the OpenMP parallel regions a program opens: a library to preload (LD_PRELOAD) in front of
 * libgomp, which wraps GOMP_parallel, the entry gcc compiles every `#pragma omp parallel` into (our
 * kernels' and OpenBLAS's OpenMP build's alike), and at exit appends one line to the file named by
 * CT_OMP_REGIONS_LOG (stderr without it): the program's name, the regions opened with more than one
 * thread asked for, and those run by one thread (an `if` clause that was false). bench/contention.py
 * divides the difference of two runs by their difference in steps: regions per training step, each a
 * point where every thread of the team waits for the slowest one. With CT_OMP_REGIONS_TOP=N it also
 * writes the N region bodies opened most often, as the object file and offset of each (addr2line -f
 * -e FILE OFFSET names it: the outlined bodies of static functions have no dynamic symbol).
 *
 * Not part of the library; built in bench/ as a module only. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

typedef void (*gomp_parallel_fn)(void (*fn)(void *), void *data, unsigned num_threads, unsigned flags);

static atomic_llong team_regions, serial_regions;

/* Team regions by body, in an open-addressed table; a body that finds it full goes uncounted here
 * (the totals above still count it). */
enum { SLOTS = 1024 };
static struct {
    _Atomic(void *) fn;
    atomic_llong n;
} by_fn[SLOTS];

static void count_fn(void *fn) {
    for (size_t i = ((uintptr_t)fn >> 4) % SLOTS, k = 0; k < SLOTS; k++, i = (i + 1) % SLOTS) {
        void *seen = NULL;
        if (atomic_compare_exchange_strong(&by_fn[i].fn, &seen, fn) || seen == fn) {
            atomic_fetch_add(&by_fn[i].n, 1);
            return;
        }
    }
}

static int by_count(const void *x, const void *y) {
    long long a = atomic_load(&((const __typeof__(by_fn[0]) *)x)->n);
    long long b = atomic_load(&((const __typeof__(by_fn[0]) *)y)->n);
    return (a < b) - (a > b);
}

void GOMP_parallel(void (*fn)(void *), void *data, unsigned num_threads, unsigned flags) {
    static gomp_parallel_fn real;
    if (!real) real = (gomp_parallel_fn)dlsym(RTLD_NEXT, "GOMP_parallel");
    /* gcc passes 1 when the region's if clause is false, 0 (the default team) or a num_threads value. */
    atomic_fetch_add(num_threads == 1 ? &serial_regions : &team_regions, 1);
    if (num_threads != 1) count_fn((void *)fn);
    real(fn, data, num_threads, flags);
}

__attribute__((destructor)) static void report(void) {
    const char *path = getenv("CT_OMP_REGIONS_LOG");
    FILE *f = path ? fopen(path, "a") : stderr;
    if (!f) return;
    extern char *program_invocation_short_name;
    fprintf(f, "%s team_regions=%lld serial_regions=%lld\n", program_invocation_short_name,
            (long long)atomic_load(&team_regions), (long long)atomic_load(&serial_regions));
    const char *top = getenv("CT_OMP_REGIONS_TOP");
    int n = top ? atoi(top) : 0;
    if (n > 0) {
        qsort(by_fn, SLOTS, sizeof by_fn[0], by_count);
        for (int i = 0; i < n && i < SLOTS && atomic_load(&by_fn[i].n) > 0; i++) {
            Dl_info info;
            void *fn = atomic_load(&by_fn[i].fn);
            if (dladdr(fn, &info) && info.dli_fname)
                fprintf(f, "  %lld %s 0x%lx\n", (long long)atomic_load(&by_fn[i].n), info.dli_fname,
                        (unsigned long)((char *)fn - (char *)info.dli_fbase));
        }
    }
    if (f != stderr) fclose(f);
}
