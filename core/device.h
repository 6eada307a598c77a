/* Devices: where a tensor's memory lives and where an op runs.
 *
 * A device is a kind (CPU or CUDA) and an index. Its spelling is PyTorch's: "cpu", "cuda", "cuda:1".
 * Each kind is served by a backend (core/ops/backend.h: a const table of device memory and op
 * kernels, backends/cpu/ and backends/cuda/); ops dispatch on the device of their tensors to it. A
 * CUDA device is usable only in a build with CUDA and on a machine that has the GPU, which
 * ct_device_check says with a clear message.
 *
 * Parsing and printing are here (core/device.c). The memory functions below are the backend's
 * business: they are defined next to the backend tables (core/ops/backend.c), which look the kind up
 * and call its table, so this header names no backend and core includes nothing above it. */
#ifndef CT_DEVICE_H
#define CT_DEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ct_device_kind { CT_DEVICE_CPU = 0, CT_DEVICE_CUDA = 1 } ct_device_kind;
#define CT_DEVICE_KINDS 2 /* the number of kinds: the size of the backends' registry */

typedef struct ct_device {
    ct_device_kind kind;
    int index; /* 0 for the CPU */
} ct_device;

#define CT_CPU ((ct_device){CT_DEVICE_CPU, 0})

/* Parses "cpu", "cuda" (index 0) or "cuda:N". */
ct_status ct_device_parse(const char *text, ct_device *out);

/* The device a process uses for a spelling that may leave the GPU open: "auto" is the GPU of the
 * process's local rank (its index among the processes of its node) where a GPU is visible, else
 * the CPU; "cuda" is that GPU, an error where none is; "cpu" and "cuda:N" are taken as written.
 * Every answer is checked (ct_device_check): a GPU this process cannot use is an error, never a
 * silent fall back. Visible GPUs are those CUDA_VISIBLE_DEVICES leaves, as CUDA counts them. */
ct_status ct_device_resolve(const char *spec, int local_rank, ct_device *out);

/* Writes "cpu" or "cuda:N" into buf and returns buf. */
const char *ct_device_str(ct_device d, char *buf, size_t cap);

static inline bool ct_device_eq(ct_device a, ct_device b) {
    return a.kind == b.kind && (a.kind == CT_DEVICE_CPU || a.index == b.index);
}

/* Number of devices of a kind visible to this process (the CPU: 1; CUDA: 0 in builds without it). */
int ct_device_count(ct_device_kind kind);

/* CT_OK when the device can run ops in this build on this machine. */
ct_status ct_device_check(ct_device d);

/* Zeroed memory on a device (64-byte aligned on the host), its release, and copies between any two
 * devices (a copy that ends on the host has finished when this returns). */
ct_status ct_device_alloc(ct_device d, size_t bytes, void **out);
void ct_device_free(ct_device d, void *p);
ct_status ct_device_copy(void *dst, ct_device dd, const void *src, ct_device sd, size_t bytes);
/* Zeroes bytes of memory on a device. */
void ct_device_zero(ct_device d, void *p, size_t bytes);

/* Asynchronous uploads: a batch's copy to a device that runs beside the work enqueued before it.
 * An event is a point in the calling thread's order of work on its device, which the host or a copy
 * can wait for; where the backend has no asynchronous copies (the CPU) its handle is NULL, every
 * event call does nothing, pinned memory is plain host memory and an upload is ct_device_copy. */
typedef struct ct_device_event {
    ct_device device;
    void *handle; /* the backend's (a cudaEvent_t); NULL: none */
} ct_device_event;
ct_status ct_device_event_create(ct_device d, ct_device_event *out);
void ct_device_event_destroy(ct_device_event *e);
/* Marks the point the calling thread's work on e's device has reached. */
ct_status ct_device_event_record(ct_device_event *e);
/* Waits on the host until the work before e's last record has run. */
ct_status ct_device_event_wait(const ct_device_event *e);
/* Host memory that d's asynchronous copies can read (page-locked for CUDA), zeroed, and its release. */
ct_status ct_device_pinned_alloc(ct_device d, size_t bytes, void **out);
void ct_device_pinned_free(ct_device d, void *p);
/* bytes from pinned host memory src to memory dst on d without waiting for them: the copy starts once
 * `after` has passed (NULL: at once) and records `done` (an event of d's) when it has read src; work the
 * calling thread enqueues afterwards runs after the copy. The caller keeps src untouched until done
 * has passed, and dst unused by any work enqueued after `after`. */
ct_status ct_device_upload(ct_device d, void *dst, const void *src, size_t bytes, const ct_device_event *after,
                           ct_device_event *done);
/* bytes from memory src on d to pinned host memory dst (of d's) without waiting for them: the copy
 * runs after the work the calling thread enqueued on d before it and before the work it enqueues
 * afterwards (which may then change src), and records `done` (an event of d's) once dst holds them.
 * The host neither reads nor writes dst until it has waited for done. */
ct_status ct_device_download(ct_device d, void *dst, const void *src, size_t bytes, ct_device_event *done);

/* A stream of the calling thread's own on d, so that its ops run beside those of the device's other
 * threads (an evaluator beside training on one GPU) rather than after them in one order: begin makes it
 * the thread's current one, after everything enqueued on the device so far; end waits for its work,
 * returns the thread to the device's shared stream and releases what the thread kept on the device (a
 * worker thread's last call). *stream is NULL where d has one order (the CPU). */
ct_status ct_device_stream_begin(ct_device d, void **stream);
void ct_device_stream_end(ct_device d, void *stream);

/* Bytes allocated on a device through ct_device_alloc at their peak since the start or the last
 * ct_device_reset_peak, which makes the peak the current count; -1 where the backend does not count
 * (the CPU: its memory is the process's, which trainer/memory.h reads from the kernel). */
int64_t ct_device_peak_allocated(ct_device d);
void ct_device_reset_peak(ct_device d);

/* What float32 matrix multiplies and convolutions may compute with inside (inputs and outputs stay
 * float32): exact float32, TF32 tensor cores ("tf32": true), or bf16 / fp16 tensor cores with
 * float32 accumulation (mixed precision: "bf16": true / "fp16": true). Per thread; CT_MATH_F32 until
 * set. */
typedef enum ct_math_mode { CT_MATH_F32 = 0, CT_MATH_TF32, CT_MATH_BF16, CT_MATH_FP16 } ct_math_mode;
/* "float32", "tf32", "bf16", "fp16". */
const char *ct_math_mode_name(ct_math_mode m);
/* Sets the calling thread's math mode for ops on d's kind of device. CT_ERR_UNSUPPORTED naming the
 * device and the mode when its backend computes in float32 only (the CPU's, the checked device's);
 * CT_MATH_F32 is always accepted. */
ct_status ct_device_set_math_mode(ct_device d, ct_math_mode m);

/* Device d's dense peak in FLOP/s for matrix products with math mode m, as its maker states it (what
 * MFU figures divide by); 0 where not known (the CPU, the checked device). */
double ct_device_peak_flops(ct_device d, ct_math_mode m);

#ifdef __cplusplus
}
#endif

#endif
