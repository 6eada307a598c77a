/* The backends' registry and the device functions of core/device.h that go through it.
 *
 * One table per device kind, indexed by the kind: the CPU's always, CUDA's in builds with CUDA. This
 * is the one file outside backends/cuda/ that knows whether CUDA is compiled in; a reference to the
 * table (rather than a constructor that registers it) also pulls the backend's objects out of the
 * static library, so registration cannot be lost at link time. */
#include "core/ops/backend.h"

#include <stdlib.h>
#include <string.h>

#ifdef CT_HAVE_CUDA
extern const ct_backend_ops ct_backend_cuda;
#define CT_BACKEND_CUDA_OR_NULL (&ct_backend_cuda)
#else
#define CT_BACKEND_CUDA_OR_NULL NULL
#endif

const ct_backend_ops *ct_backends[CT_DEVICE_KINDS] = {
    [CT_DEVICE_CPU] = &ct_backend_cpu,
    [CT_DEVICE_CUDA] = CT_BACKEND_CUDA_OR_NULL,
};

/* When the library loads, before any device memory can exist (so that every lookup of a kind meets
 * one table): the CPU's table of the instruction-set level to run (backends/cpu/isa.c; the baseline
 * one above is what a lookup before this meets), and with CTRAINER_CHECKED_DEVICE the checked device
 * (backends/checked/) in CUDA's place, built on that CPU table. */
__attribute__((constructor)) static void settle_registry(void) {
    ct_backends[CT_DEVICE_CPU] = ct_backend_cpu_select();
    const char *checked = getenv("CTRAINER_CHECKED_DEVICE");
    if (checked && *checked && strcmp(checked, "0") != 0) ct_backends[CT_DEVICE_CUDA] = ct_backend_checked();
}

/* Kinds named in messages where no table (and so no table's name) is there. */
static const char *const kind_names[CT_DEVICE_KINDS] = {[CT_DEVICE_CPU] = "CPU", [CT_DEVICE_CUDA] = "CUDA"};

/* A table's member, or NULL when the table predates it (a shorter size) or leaves it out. */
#define MEMBER(b, m) ((b) && (b)->size >= offsetof(ct_backend_ops, m) + sizeof((b)->m) ? (b)->m : NULL)

int ct_device_count(ct_device_kind kind) {
    const ct_backend_ops *b = ct_backend_for_kind(kind);
    return MEMBER(b, device_count) ? b->device_count() : 0;
}

ct_status ct_device_check(ct_device d) {
    if (d.kind == CT_DEVICE_CPU) return CT_OK;
    char name[32];
    ct_device_str(d, name, sizeof name);
    if (!ct_backend_for(d))
        return ct_error(CT_ERR_DEVICE, "device %s: this build has no %s backend (configure with -DCTRAINER_%s=ON)",
                        name, kind_names[d.kind], kind_names[d.kind]);
    int n = ct_device_count(d.kind);
    if (d.index < 0 || d.index >= n)
        return ct_error(CT_ERR_DEVICE, "device %s: %d %s device(s) visible%s", name, n, kind_names[d.kind],
                        d.kind == CT_DEVICE_CUDA && getenv("CUDA_VISIBLE_DEVICES") ? " (CUDA_VISIBLE_DEVICES is set)"
                                                                                     : "");
    return CT_OK;
}

ct_status ct_device_alloc(ct_device d, size_t bytes, void **out) {
    *out = NULL;
    CT_TRY(ct_device_check(d));
    const ct_backend_ops *b = ct_backend_for(d);
    if (!MEMBER(b, alloc)) return ct_error(CT_ERR_DEVICE, "%s backend: no device memory", b->name);
    return b->alloc(d.index, bytes, out);
}

void ct_device_free(ct_device d, void *p) {
    const ct_backend_ops *b = ct_backend_for(d);
    if (p && MEMBER(b, free)) b->free(d.index, p);
}

ct_status ct_device_copy(void *dst, ct_device dd, const void *src, ct_device sd, size_t bytes) {
    /* The device side's backend copies (it knows the host too); host to host is the CPU's. A device
     * this build or machine lacks is an error here, not an abort inside its runtime. */
    ct_device side = dd.kind != CT_DEVICE_CPU ? dd : sd;
    if (side.kind != CT_DEVICE_CPU && ct_backend_for(side)) {
        ct_status usable = ct_device_check(side);
        if (usable != CT_OK) return ct_error_prefix(usable, "copy: ");
    }
    const ct_backend_ops *b = ct_backend_for(side);
    if (!MEMBER(b, copy_bytes)) {
        char name[32];
        return ct_error(CT_ERR_DEVICE, "copy: this build has no %s backend (%s)",
                        kind_names[(unsigned)side.kind < CT_DEVICE_KINDS ? side.kind : CT_DEVICE_CPU],
                        ct_device_str(side, name, sizeof name));
    }
    return b->copy_bytes(dst, dd, src, sd, bytes);
}

void ct_device_zero(ct_device d, void *p, size_t bytes) {
    const ct_backend_ops *b = ct_backend_for(d);
    if (bytes == 0) return;
    if (!MEMBER(b, memset_zero)) {
        char name[32];
        ct_abort_at(__FILE__, __LINE__, "zero: no backend for device %s", ct_device_str(d, name, sizeof name));
    }
    b->memset_zero(d.index, p, bytes);
}

int64_t ct_device_peak_allocated(ct_device d) {
    const ct_backend_ops *b = ct_backend_for(d);
    return MEMBER(b, peak_allocated) ? (int64_t)b->peak_allocated(d.index) : -1;
}

void ct_device_reset_peak(ct_device d) {
    const ct_backend_ops *b = ct_backend_for(d);
    if (MEMBER(b, reset_peak)) b->reset_peak(d.index);
}

const char *ct_math_mode_name(ct_math_mode m) {
    static const char *const names[] = {"float32", "tf32", "bf16", "fp16"};
    return m >= CT_MATH_F32 && m <= CT_MATH_FP16 ? names[m] : "unknown";
}

ct_status ct_device_set_math_mode(ct_device d, ct_math_mode m) {
    CT_ASSERT(m >= CT_MATH_F32 && m <= CT_MATH_FP16);
    const ct_backend_ops *b = ct_backend_for(d);
    if (MEMBER(b, set_math_mode)) {
        b->set_math_mode(m);
        return CT_OK;
    }
    if (m == CT_MATH_F32) return CT_OK;
    char name[32];
    return ct_error(CT_ERR_UNSUPPORTED, "%s matrix multiplies need a device whose backend has them (CUDA's tensor "
                    "cores); %s computes in float32 only", ct_math_mode_name(m), ct_device_str(d, name, sizeof name));
}
