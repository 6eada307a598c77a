/* The CUDA tests' helpers (see cuda_testlib.h). */
#include "cuda_testlib.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/device.h"
#include "core/ops/backend.h"

static const ct_device GPU = {CT_DEVICE_CUDA, 0};

void ct_cuda_test_begin(const char *name) {
    if (!ct_backend_for_kind(CT_DEVICE_CUDA)) {
        /* a module that is there (the emulated one, or a build's on a GPU machine) must load: a
         * broken one would otherwise pass every CUDA test as skipped */
        if (ct_backend_module_failed(CT_DEVICE_CUDA)) {
            printf("%s: FAIL: %s\n", name, ct_backend_load_error(CT_DEVICE_CUDA));
            exit(1);
        }
        /* not compiled in, or no GPU to load its module for */
        printf("%s: skipped (%s)\n", name, ct_backend_load_error(CT_DEVICE_CUDA));
        exit(77);
    }
    if (ct_device_count(CT_DEVICE_CUDA) == 0) {
        printf("%s: skipped (no CUDA device is visible)\n", name);
        exit(77);
    }
    ct_test_begin(name);
}

static void must(ct_status s, const char *what) {
    if (s == CT_OK) return;
    fprintf(stderr, "%s: %s\n", what, ct_last_error());
    abort();
}

ct_tensor ct_ct_zeros(ct_dtype dt, int ndim, const int64_t *shape) {
    ct_tensor t;
    must(ct_tensor_alloc(&t, dt, CT_CPU, ndim, shape), "alloc");
    return t;
}

ct_tensor ct_ct_rand(ct_rng *rng, ct_dtype dt, int ndim, const int64_t *shape, double lo, double hi) {
    ct_tensor t = ct_ct_zeros(dt, ndim, shape);
    int64_t n = ct_tensor_numel(&t);
    for (int64_t i = 0; i < n; i++) {
        double u = lo + (hi - lo) * ct_rng_uniform(rng);
        switch (dt) {
        case CT_F32: ((float *)t.data)[i] = (float)u; break;
        case CT_F64: ((double *)t.data)[i] = u; break;
        case CT_I32: ((int32_t *)t.data)[i] = (int32_t)floor(u); break;
        case CT_I64: ((int64_t *)t.data)[i] = (int64_t)floor(u); break;
        case CT_U8: ((uint8_t *)t.data)[i] = (uint8_t)floor(u); break;
        default: abort();
        }
    }
    return t;
}

ct_tensor ct_ct_to_gpu(const ct_tensor *cpu) {
    ct_tensor g;
    must(ct_tensor_alloc(&g, cpu->dtype, GPU, cpu->ndim, cpu->shape), "alloc on cuda:0");
    must(ct_tensor_copy_to(&g, cpu), "copy to cuda:0");
    return g;
}

ct_tensor ct_ct_to_cpu(const ct_tensor *gpu) {
    ct_tensor c = ct_ct_zeros(gpu->dtype, gpu->ndim, gpu->shape);
    must(ct_tensor_copy_to(&c, gpu), "copy from cuda:0");
    return c;
}

static double value(const ct_tensor *t, int64_t i) {
    switch (t->dtype) {
    case CT_F32: return ((const float *)t->data)[i];
    case CT_F64: return ((const double *)t->data)[i];
    case CT_I32: return ((const int32_t *)t->data)[i];
    case CT_I64: return (double)((const int64_t *)t->data)[i];
    case CT_U8: return ((const uint8_t *)t->data)[i];
    default: abort();
    }
}

void ct_ct_check_scaled(const char *what, const ct_tensor *gpu, const ct_tensor *cpu, const ct_tensor *scale,
                        double tol) {
    ct_tensor back = ct_ct_to_cpu(gpu);
    double worst = 0;
    int64_t at = 0;
    for (int64_t i = 0; i < ct_tensor_numel(cpu); i++) {
        const double g = ct_tensor_get(&back, i), c = ct_tensor_get(cpu, i);
        const double err = g == c ? 0 : fabs(g - c) / fmax(ct_tensor_get(scale, i), 1e-30);
        if (!(err <= worst)) { /* NaN counts as the worst */
            worst = err;
            at = i;
        }
    }
    CHECK(worst <= tol, "%s: error %.3g > %.3g of the terms' scale at element %lld (gpu %.9g, cpu %.9g)", what, worst,
          tol, (long long)at, ct_tensor_get(&back, at), ct_tensor_get(cpu, at));
    ct_tensor_free(&back);
}

ct_tensor ct_ct_abs(const ct_tensor *t) {
    ct_tensor a = ct_ct_zeros(t->dtype, t->ndim, t->shape);
    for (int64_t i = 0; i < ct_tensor_numel(t); i++) ct_tensor_set(&a, i, fabs(ct_tensor_get(t, i)));
    return a;
}

double ct_ct_rms(const ct_tensor *t) {
    double s = 0;
    int64_t n = ct_tensor_numel(t), k = 0;
    for (int64_t i = 0; i < n; i++) {
        double v = value(t, i);
        if (isfinite(v)) {
            s += v * v;
            k++;
        }
    }
    return k ? sqrt(s / (double)k) : 0.0;
}

double ct_ct_check_rms_close(const char *what, const ct_tensor *gpu, const ct_tensor *cpu, double rel_tol) {
    ct_tensor back = ct_ct_to_cpu(gpu);
    int64_t n = ct_tensor_numel(cpu), nan_mismatch = 0;
    double diff = 0, ref = 0;
    CHECK(ct_tensor_numel(&back) == n && back.dtype == cpu->dtype, "%s: shape or dtype differs", what);
    for (int64_t i = 0; i < n && ct_tensor_numel(&back) == n; i++) {
        double a = value(&back, i), b = value(cpu, i);
        if (isnan(a) || isnan(b)) {
            nan_mismatch += isnan(a) != isnan(b);
            continue;
        }
        diff += (a - b) * (a - b);
        ref += b * b;
    }
    double err = ref > 0 ? sqrt(diff / ref) : sqrt(diff);
    CHECK(nan_mismatch == 0 && err <= rel_tol, "%s: relative RMS error %.3g > %.3g (%lld NaNs on one side only)", what,
          err, rel_tol, (long long)nan_mismatch);
    ct_tensor_free(&back);
    return err;
}

double ct_ct_check_close(const char *what, const ct_tensor *gpu, const ct_tensor *cpu, double rel_tol, double floor) {
    ct_tensor back = ct_ct_to_cpu(gpu);
    int64_t n = ct_tensor_numel(cpu), worst = -1;
    double max_err = 0;
    CHECK(ct_tensor_numel(&back) == n && back.dtype == cpu->dtype, "%s: shape or dtype differs", what);
    for (int64_t i = 0; i < n && ct_tensor_numel(&back) == n; i++) {
        double a = value(&back, i), b = value(cpu, i);
        double err = isnan(a) != isnan(b) ? INFINITY : isnan(a) ? 0 : fabs(a - b) / fmax(fabs(b), floor);
        if (!(err <= max_err)) {
            max_err = err;
            worst = i;
        }
    }
    CHECK(max_err <= rel_tol, "%s: relative error %.3g > %.3g at element %lld (gpu %.9g, cpu %.9g)", what, max_err,
          rel_tol, (long long)worst, worst >= 0 ? value(&back, worst) : 0.0, worst >= 0 ? value(cpu, worst) : 0.0);
    ct_tensor_free(&back);
    return max_err;
}

void ct_ct_check_equal(const char *what, const ct_tensor *gpu, const ct_tensor *cpu) {
    ct_tensor back = ct_ct_to_cpu(gpu);
    bool same = ct_tensor_nbytes(&back) == ct_tensor_nbytes(cpu) &&
                memcmp(back.data, cpu->data, ct_tensor_nbytes(cpu)) == 0;
    CHECK(same, "%s: GPU and CPU results differ", what);
    ct_tensor_free(&back);
}
