/* The CUDA runtime as the rest of ctrainer sees it: device memory, pinned host memory, copies,
 * the stream ops run on, and the cuBLAS / cuDNN handles bound to it. Plain C, so C files can
 * include it; compiled (backends/cuda/cuda_rt.cu) only in builds with CUDA (CT_HAVE_CUDA).
 *
 * Streams: every thread has a current stream per device (the device's default compute stream
 * unless ct_cuda_use_stream set another), so an evaluator thread can run on a stream of its own.
 * Ops are enqueued on it and never synchronise the host; copies to the host synchronise the stream
 * they ran on, which is the only place values reach the CPU.
 *
 * Failures of the CUDA runtime inside ops are unrecoverable (a kernel fault poisons the context):
 * CT_CUDA_CHECK aborts with file:line, the device and the runtime's message. Allocation failures are
 * ordinary errors (CT_ERR_NOMEM naming the device and the size). */
#ifndef CT_CUDA_RT_H
#define CT_CUDA_RT_H

#include <stddef.h>

#include "core/device.h"
#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* CUDA devices visible to this process (0 on a machine without a GPU or a driver: backends/cuda/cuda_info.cu). */
int ct_cuda_device_count(void);
/* One line on device `index` for `ctrainer version`: its name, memory and compute capability. */
void ct_cuda_describe(int index, char *buf, size_t cap);
/* The device's dense peak FLOP/s with math mode m (core/device.h's ct_device_peak_flops); 0: unknown. */
double ct_cuda_peak_flops(int index, ct_math_mode m);

/* Makes `index` the calling thread's current device. */
ct_status ct_cuda_set_device(int index);
/* The same before an op on device `index` (the backend table's use_device): a failure aborts. */
void ct_cuda_use_device(int index);
int ct_cuda_current_device(void);

ct_status ct_cuda_malloc(int device, size_t bytes, void **out);
void ct_cuda_free(int device, void *p);
/* Page-locked host memory: copies from it run asynchronously and at full bus speed. */
ct_status ct_cuda_host_alloc(size_t bytes, void **out);
void ct_cuda_host_free(void *p);

/* bytes from src (on sd) to dst (on dd), enqueued on the current stream of the CUDA side; a copy
 * to the host waits for it. Host-to-host is a memcpy. */
ct_status ct_cuda_memcpy(void *dst, ct_device dd, const void *src, ct_device sd, size_t bytes);
/* Like ct_cuda_memcpy to a device, but returns at once: src must be pinned and stay untouched until
 * the current stream passes this point (ct_cuda_stream_synchronize, or an event). */
ct_status ct_cuda_memcpy_async(void *dst, ct_device dd, const void *src, ct_device sd, size_t bytes);
/* Events (cudaEvent_t, without timing) on device `index`: recorded on the calling thread's current
 * stream, waited for by the host. */
ct_status ct_cuda_event_create(int index, void **out);
void ct_cuda_event_destroy(void *event);
ct_status ct_cuda_event_record(void *event);
ct_status ct_cuda_event_wait(void *event);
/* bytes from pinned src to dst on device `index`, on the calling thread's copy stream there (beside
 * its compute stream) once `after` (NULL: at once) has passed; records `done` (required)
 * there, and the calling thread's current stream waits for it (core/ops/backend.h's upload). */
ct_status ct_cuda_upload(int index, void *dst, const void *src, size_t bytes, void *after, void *done);
/* A copy to pinned host memory on the calling thread's stream, recording done (core/ops/backend.h's
 * download). */
ct_status ct_cuda_download(int index, void *dst, const void *src, size_t bytes, void *done);
/* Sets `bytes` at dst to zero on the current stream. */
void ct_cuda_memset_zero(int device, void *dst, size_t bytes);

/* The calling thread's current stream on its current device (a cudaStream_t). */
void *ct_cuda_stream(void);
/* Makes `stream` (a cudaStream_t; NULL: the device's default compute stream) the calling thread's
 * current stream. */
void ct_cuda_use_stream(void *stream);
/* A new non-blocking stream on the current device, and its release. */
ct_status ct_cuda_stream_create(void **out);
void ct_cuda_stream_destroy(void *stream);
/* A stream of the calling thread's own on device `index`, ordered after the device's shared stream
 * and made current, and its end (the backend table's stream_begin / stream_end), which also releases
 * what the thread kept on the device: its copy stream, cuBLAS, cuBLASLt and cuDNN handles, workspace. */
ct_status ct_cuda_thread_stream_begin(int index, void **out);
void ct_cuda_thread_stream_end(int index, void *stream);
/* Waits until everything enqueued on the current stream has run. */
ct_status ct_cuda_stream_synchronize(void);
/* The peak of device memory allocated through ct_cuda_malloc since the start (or the last reset). */
size_t ct_cuda_peak_allocated(int device);
void ct_cuda_reset_peak(int device);

/* Aborts (file:line, device, message) when a CUDA runtime call failed. */
void ct_cuda_check_at(int err, const char *what, const char *file, int line);
#define CT_CUDA_CHECK(call) ct_cuda_check_at((int)(call), #call, __FILE__, __LINE__)

#ifdef __cplusplus
}
#endif

#endif
