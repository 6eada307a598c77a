/* Thread settings: the thread count reaches OpenMP, and flushing denormals applies in the calling
 * thread and in every OpenMP worker, and can be switched off again. */
#include <float.h>
#include <omp.h>

#include "core/ops/ops.h"
#include "testlib.h"

/* Multiplies a denormal by one in every thread of the team; counts the threads that kept it. */
static int threads_keeping_denormals(void) {
    int kept = 0;
#pragma omp parallel reduction(+ : kept)
    {
        volatile float tiny = FLT_MIN / 8.0f; /* below FLT_MIN: a denormal */
        volatile float one = 1.0f;
        kept += tiny * one != 0.0f;
    }
    return kept;
}

int main(void) {
    ct_test_begin("test_threads");
    ct_set_num_threads(2);
    CHECK(ct_get_num_threads() == 2, "thread count %d after setting 2", ct_get_num_threads());
    int team = 0;
#pragma omp parallel
#pragma omp atomic
    team++;
    CHECK(team == 2, "an OpenMP team has %d threads", team);
    CHECK(threads_keeping_denormals() == 2, "denormals are kept by default");
    if (ct_set_flush_denormal(true)) {
        CHECK(threads_keeping_denormals() == 0, "a thread still keeps denormals after flushing was enabled");
        volatile float tiny = FLT_MIN / 8.0f, one = 1.0f;
        CHECK(tiny * one == 0.0f, "the calling thread keeps denormals");
        CHECK(ct_set_flush_denormal(false), "switching off");
        CHECK(threads_keeping_denormals() == 2, "denormals are still flushed after switching off");
    } else {
        printf("this CPU has no flush-to-zero mode\n");
    }
    return ct_test_finish();
}
