/* Memory reports (trainer/memory.h): Hugging Face's TrainerMemoryTracker, measured through /proc.
 *
 * RSS: the second field of /proc/self/statm (resident pages), what psutil's memory_info().rss reads,
 * from a descriptor kept open (one pread per reading).
 *
 * The CPU peak: HF runs a thread that reads the RSS in a busy loop for the whole stage. In C that loop
 * would take a core away from training (two of them on a two-core machine with OpenMP), and a sleeping
 * sampler misses allocations that live shorter than its period. The kernel keeps the exact answer
 * instead: VmHWM in /proc/self/status is the process's highest RSS, updated when pages are unmapped,
 * and writing "5" to /proc/self/clear_refs (Linux >= 4.0) resets it to the current RSS. So a stage
 * resets it at its start and reads it at its end: a few system calls per stage, nothing while it
 * runs, and no peak missed. Both readings are process-wide, like HF's (every thread's memory
 * counts), and so is the reset: another tool resetting VmHWM during a stage spoils that stage's
 * peak, as a torch.cuda.reset_peak_memory_stats does HF's GPU peak. Where the reset is refused or has no
 * effect (old kernels, some sandboxes: checked at every stage start, VmHWM must drop to about the
 * current RSS), the tracker falls back to HF's sampler thread, with a 1 ms sleep between readings
 * (each a few microseconds: well under 1% of a core) rather than HF's busy loop.
 *
 * HF calls gc.collect() at both ends of a stage so that garbage does not count as allocated. The C
 * counterpart is malloc_trim(0): glibc keeps freed heap pages resident for reuse, and returning them
 * makes alloc_delta what the stage kept rather than what the allocator cached.
 *
 * The GPU: its backend (core/ops/backend.h, through ct_device_peak_allocated) counts the bytes allocated
 * through it and their peak.
 * Resetting the peak makes it the current count, which is how the current count is read: at the
 * start (HF's reset_peak_memory_stats, then memory_allocated) and after reading the peak at the end. */
#define _GNU_SOURCE
#include "trainer/memory.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "core/device.h"
#include "core/log.h"

/* VmHWM after a reset may exceed the RSS read next to it by what other threads fault in meanwhile
 * and by the kernel's per-CPU counter slack; an ignored reset leaves the old peak, usually far above. */
#define HWM_RESET_SLACK (8 << 20)

typedef struct stage_record {
    bool done;
    int64_t cpu_begin, cpu_end, cpu_peak;
    int64_t gpu_begin, gpu_end, gpu_peak;
} stage_record;

struct ct_memory_tracker {
    ct_mem_peak_method method; /* HWM or SAMPLER */
    struct timespec interval;  /* the sampler's sleep */
    bool gpu;                  /* GPU metrics: the device's backend counts its allocations */
    ct_device device;          /* the device they are of */
    int statm_fd;
    int64_t page_size;
    ct_mem_stage cur; /* the stage running (CT_MEM_NONE: none) */
    int depth;        /* starts of cur not yet stopped (the same stage nested in itself) */
    ct_mem_peak_method stage_method; /* how cur's peak is taken: HWM, SAMPLER, or AUTO for none */
    bool init_reported;
    stage_record rec[CT_MEM_STAGES];
    stage_record now; /* cur's readings so far */
    /* the sampler of cur */
    bool sampling;
    pthread_t sampler;
    atomic_bool stop_sampling;
    int64_t sampled_peak; /* written by the sampler, read after joining it */
};

static const char *const stage_names[CT_MEM_STAGES] = {"", "init", "train", "eval", "test"};

const char *ct_mem_stage_name(ct_mem_stage stage) {
    return stage > CT_MEM_NONE && stage < CT_MEM_STAGES ? stage_names[stage] : "";
}

/* --- readings ------------------------------------------------------------------------------------- */

static int64_t statm_rss(int fd, int64_t page_size) {
    char buf[160];
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    if (n <= 0) return -1;
    buf[n] = 0;
    long long size, resident;
    if (sscanf(buf, "%lld %lld", &size, &resident) != 2) return -1;
    return (int64_t)resident * page_size;
}

int64_t ct_mem_rss_bytes(void) {
    int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    int64_t r = statm_rss(fd, (int64_t)sysconf(_SC_PAGESIZE));
    close(fd);
    return r;
}

/* VmHWM in bytes; -1 when the kernel does not say. */
static int64_t vm_hwm(void) {
    FILE *f = fopen("/proc/self/status", "re");
    if (!f) return -1;
    char line[256];
    int64_t v = -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "VmHWM:", 6) == 0) {
            v = (int64_t)strtoll(line + 6, NULL, 10) * 1024;
            break;
        }
    fclose(f);
    return v;
}

static bool reset_hwm(void) {
    int fd = open("/proc/self/clear_refs", O_WRONLY | O_CLOEXEC);
    if (fd < 0) return false;
    bool ok = write(fd, "5", 1) == 1;
    close(fd);
    return ok;
}

/* Resets VmHWM and says whether it took: the peak is then within slack of the current RSS. */
static bool reset_hwm_checked(const ct_memory_tracker *m) {
    if (!reset_hwm()) return false;
    int64_t hwm = vm_hwm(), rss = statm_rss(m->statm_fd, m->page_size);
    return hwm >= 0 && rss >= 0 && hwm <= rss + HWM_RESET_SLACK;
}

static void trim_heap(void) {
#ifdef __GLIBC__
    malloc_trim(0);
#endif
}

/* Bytes allocated on the device now (the peak, once reset, is the current count). */
static int64_t gpu_allocated(ct_device device) {
    ct_device_reset_peak(device);
    return ct_device_peak_allocated(device);
}

/* --- the sampler (fallback) ----------------------------------------------------------------------- */

static void *sample_loop(void *arg) {
    ct_memory_tracker *m = arg;
    int64_t peak = -1;
    for (;;) {
        int64_t r = statm_rss(m->statm_fd, m->page_size);
        if (r > peak) peak = r;
        if (atomic_load_explicit(&m->stop_sampling, memory_order_acquire)) break;
        nanosleep(&m->interval, NULL);
    }
    m->sampled_peak = peak;
    return NULL;
}

static void start_sampler(ct_memory_tracker *m) {
    atomic_store_explicit(&m->stop_sampling, false, memory_order_release);
    m->sampled_peak = -1;
    int e = pthread_create(&m->sampler, NULL, sample_loop, m);
    m->sampling = e == 0;
    if (e != 0) {
        /* The stage still gets its alloc delta; its peak is then only the end's. */
        ct_log_warning("memory metrics: cannot start the peak sampler thread (%s); %s_mem_cpu_peaked_delta "
                       "will be 0", strerror(e), ct_mem_stage_name(m->cur));
        m->stage_method = CT_MEM_PEAK_AUTO;
    }
}

/* The sampler's peak (-1 when none ran). */
static int64_t stop_sampler(ct_memory_tracker *m) {
    if (!m->sampling) return -1;
    atomic_store_explicit(&m->stop_sampling, true, memory_order_release);
    pthread_join(m->sampler, NULL);
    m->sampling = false;
    return m->sampled_peak;
}

/* --- the tracker ---------------------------------------------------------------------------------- */

ct_status ct_memory_tracker_create(const ct_memory_tracker_opts *o, ct_memory_tracker **out) {
    *out = NULL;
    ct_memory_tracker_opts d = {0};
    if (!o) o = &d;
    if (!(o->sample_interval_s >= 0) || o->sample_interval_s > 10)
        return ct_error(CT_ERR_INVALID_ARG, "memory tracker: sample_interval_s %g (expected 0 to 10 seconds)",
                        o->sample_interval_s);
    ct_memory_tracker *m = calloc(1, sizeof *m);
    if (!m) return ct_error(CT_ERR_NOMEM, "out of memory");
    m->statm_fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    if (m->statm_fd < 0) {
        int e = errno;
        free(m);
        return ct_error(CT_ERR_UNSUPPORTED, "memory metrics (skip_memory_metrics false): cannot read "
                        "/proc/self/statm: %s", strerror(e));
    }
    m->page_size = (int64_t)sysconf(_SC_PAGESIZE);
    double s = o->sample_interval_s > 0 ? o->sample_interval_s : 1e-3;
    m->interval.tv_sec = (time_t)s;
    m->interval.tv_nsec = (long)((s - (double)m->interval.tv_sec) * 1e9);
    m->device = o->device;
    m->gpu = o->device.kind != CT_DEVICE_CPU && ct_device_peak_allocated(o->device) >= 0;
    m->method = o->peak;
    if (m->method == CT_MEM_PEAK_AUTO) m->method = reset_hwm() ? CT_MEM_PEAK_HWM : CT_MEM_PEAK_SAMPLER;
    *out = m;
    return CT_OK;
}

void ct_memory_tracker_free(ct_memory_tracker *m) {
    if (!m) return;
    stop_sampler(m);
    close(m->statm_fd);
    free(m);
}

ct_mem_peak_method ct_memory_tracker_peak_method(const ct_memory_tracker *m) {
    return m ? m->method : CT_MEM_PEAK_AUTO;
}

void ct_memory_tracker_start(ct_memory_tracker *m, ct_mem_stage stage) {
    if (!m || stage <= CT_MEM_NONE || stage >= CT_MEM_STAGES) return;
    /* Nested stages (an evaluation during training) are the outer stage's: HF ignores them. */
    if (m->cur != CT_MEM_NONE) {
        if (m->cur == stage) m->depth++;
        return;
    }
    m->cur = stage;
    m->depth = 1;
    m->now = (stage_record){0};
    trim_heap();
    if (m->gpu) m->now.gpu_begin = gpu_allocated(m->device);
    m->now.cpu_begin = statm_rss(m->statm_fd, m->page_size);
    m->stage_method = m->method;
    if (m->stage_method == CT_MEM_PEAK_HWM && !reset_hwm_checked(m)) {
        ct_log_debug("memory metrics: VmHWM cannot be reset here; sampling the RSS instead");
        m->method = m->stage_method = CT_MEM_PEAK_SAMPLER;
    }
    if (m->stage_method == CT_MEM_PEAK_SAMPLER) start_sampler(m);
}

static ct_status put(json_t *metrics, const char *key, int64_t v) {
    return json_object_set_new(metrics, key, json_integer((json_int_t)v)) == 0 ? CT_OK
                                                                              : ct_error(CT_ERR_NOMEM, "out of memory");
}

/* HF's update_metrics: the stage's deltas, preceded by init's (and before_init_mem_*) the first time. */
static ct_status update_metrics(ct_memory_tracker *m, ct_mem_stage stage, json_t *metrics) {
    ct_mem_stage stages[2];
    int n = 0;
    if (!m->init_reported) {
        stages[n++] = CT_MEM_INIT;
        m->init_reported = true;
    }
    if (stage != CT_MEM_INIT) stages[n++] = stage;
    char key[64];
    for (int i = 0; i < n; i++) {
        const stage_record *r = &m->rec[stages[i]];
        if (!r->done) continue;
        const char *name = ct_mem_stage_name(stages[i]);
        int64_t cpu[2] = {r->cpu_end - r->cpu_begin, r->cpu_peak > r->cpu_end ? r->cpu_peak - r->cpu_end : 0};
        int64_t gpu[2] = {r->gpu_end - r->gpu_begin, r->gpu_peak > r->gpu_end ? r->gpu_peak - r->gpu_end : 0};
        const char *what[2] = {"alloc", "peaked"};
        for (int k = 0; k < 2; k++) {
            snprintf(key, sizeof key, "%s_mem_cpu_%s_delta", name, what[k]);
            CT_TRY(put(metrics, key, cpu[k]));
            if (!m->gpu) continue;
            snprintf(key, sizeof key, "%s_mem_gpu_%s_delta", name, what[k]);
            CT_TRY(put(metrics, key, gpu[k]));
        }
    }
    /* Memory in use before the Trainer existed, which no stage accounts for. */
    if (stages[0] == CT_MEM_INIT && m->rec[CT_MEM_INIT].done) {
        CT_TRY(put(metrics, "before_init_mem_cpu", m->rec[CT_MEM_INIT].cpu_begin));
        if (m->gpu) CT_TRY(put(metrics, "before_init_mem_gpu", m->rec[CT_MEM_INIT].gpu_begin));
    }
    return CT_OK;
}

ct_status ct_memory_tracker_stop(ct_memory_tracker *m, ct_mem_stage stage, ct_status s, json_t *metrics) {
    if (!m || m->cur == CT_MEM_NONE || m->cur != stage) return s;
    if (--m->depth > 0) return s;
    int64_t sampled = stop_sampler(m);
    m->cur = CT_MEM_NONE;
    if (s != CT_OK) return s; /* a failed stage reports nothing */
    stage_record r = m->now;
    trim_heap();
    if (m->gpu) {
        r.gpu_peak = ct_device_peak_allocated(m->device);
        r.gpu_end = gpu_allocated(m->device);
    }
    r.cpu_end = statm_rss(m->statm_fd, m->page_size);
    r.cpu_peak = m->stage_method == CT_MEM_PEAK_HWM ? vm_hwm() : sampled;
    /* VmHWM and the samples may lag the RSS read last by a few pages: the end is a reading too. */
    if (r.cpu_peak < r.cpu_end) r.cpu_peak = r.cpu_end;
    r.done = true;
    m->rec[stage] = r;
    return metrics ? update_metrics(m, stage, metrics) : CT_OK;
}
