/* The CPU's process-wide knobs (core/ops/ops.h): the thread count OpenMP and OpenBLAS share, and
 * flushing denormals. Compiled once, at the library's baseline flags: they are no kernels, so the
 * instruction-set levels (isa.c) do not copy them. We link OpenBLAS's OpenMP build where it is
 * installed, so BLAS calls and our own parallel loops use one thread team instead of two pools
 * spinning against each other. */
#include <cblas.h>
#include <omp.h>
#include <unistd.h>
#if defined(__SSE2__)
/* MXCSR's flush-to-zero (SSE) and denormals-are-zero bits; every x86-64 CPU has them, so the
 * baseline build sets them too (the macros only read and write MXCSR). */
#include <pmmintrin.h>
#include <xmmintrin.h>
#endif

#include "core/ops/ops.h"

void ct_set_num_threads(int n) {
    if (n <= 0) return;
    omp_set_num_threads(n);
    openblas_set_num_threads(n);
}

int ct_get_num_threads(void) { return omp_get_max_threads(); }

ct_status ct_num_threads_check(void) {
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    long limit = cpus > 16 ? 16 * cpus : 256;
    int asked = omp_get_max_threads();
    if (asked <= limit) return CT_OK;
    return ct_error(CT_ERR_CONFIG,
                    "OMP_NUM_THREADS asks for %d threads on a machine of %ld CPUs (at most %ld are accepted: more "
                    "threads than CPUs only wait for each other); set it to %ld or fewer",
                    asked, cpus, limit, cpus > 0 ? cpus : 1);
}

bool ct_set_flush_denormal(bool on) {
#if defined(__SSE2__)
    /* MXCSR is per thread: set it in the calling thread and in each member of the OpenMP team,
     * which OpenBLAS's OpenMP build also runs on. */
    _MM_SET_FLUSH_ZERO_MODE(on ? _MM_FLUSH_ZERO_ON : _MM_FLUSH_ZERO_OFF);
    _MM_SET_DENORMALS_ZERO_MODE(on ? _MM_DENORMALS_ZERO_ON : _MM_DENORMALS_ZERO_OFF);
#pragma omp parallel
    {
        _MM_SET_FLUSH_ZERO_MODE(on ? _MM_FLUSH_ZERO_ON : _MM_FLUSH_ZERO_OFF);
        _MM_SET_DENORMALS_ZERO_MODE(on ? _MM_DENORMALS_ZERO_ON : _MM_DENORMALS_ZERO_OFF);
    }
    return true;
#else
    (void)on;
    return false;
#endif
}
