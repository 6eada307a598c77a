/* The checked device: a stand-in GPU for machines without one, on which every host access to device
 * memory outside an op faults.
 *
 * With CTRAINER_CHECKED_DEVICE=1 in the environment, the "cuda" devices of the process are served by
 * this backend instead of CUDA (core/ops/backend.c swaps it in before the first device is used). Its
 * memory is host memory from mmap, kept PROT_NONE except while an op or a device copy runs: the
 * dispatch (core/ops/dispatch.c) brackets every kernel with op_begin/op_end, which open every
 * allocation for the kernel and close them again. The kernels are the CPU's, so a run on the checked
 * device computes exactly what the same run on the CPU computes, and any code that reads or writes
 * a device tensor's data directly, as it could not on a GPU, dies with SIGSEGV at that line. It is
 * how the Trainer's device path is tested where no GPU is (and a way to check a custom layer for
 * the same mistake): slow (two mprotect calls per allocation per op), never for real training.
 *
 * CTRAINER_CHECKED_DEVICE=N makes N devices ("cuda:0" .. "cuda:N-1"); all share one pool.
 * CTRAINER_CHECKED_DEVICE_REPORT=1 prints at exit the bytes copied back to the host and the peak
 * device memory. */
#include "core/ops/backend.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef struct region {
    void *p;
    size_t len; /* the mapping's length: the request rounded up to whole pages */
    size_t bytes;
} region;

/* Every live allocation, and how many ops (over all threads) are running: memory is open while at
 * least one runs, so one thread's op never closes memory under another's. */
static struct {
    pthread_mutex_t lock;
    region *items;
    int count, cap;
    int active;
    size_t allocated, peak;
} pool = {.lock = PTHREAD_MUTEX_INITIALIZER};

static int n_devices = 1;

/* Opens or closes every allocation; the pool's lock is held. */
static void protect_all(int prot) {
    for (int i = 0; i < pool.count; i++)
        if (mprotect(pool.items[i].p, pool.items[i].len, prot) != 0) {
            perror("checked device: mprotect");
            abort();
        }
}

static void checked_op_begin(void) {
    pthread_mutex_lock(&pool.lock);
    if (pool.active++ == 0) protect_all(PROT_READ | PROT_WRITE);
    pthread_mutex_unlock(&pool.lock);
}

static void checked_op_end(void) {
    pthread_mutex_lock(&pool.lock);
    if (--pool.active == 0) protect_all(PROT_NONE);
    pthread_mutex_unlock(&pool.lock);
}

static int checked_device_count(void) { return n_devices; }

static ct_status checked_alloc(int index, size_t bytes, void **out) {
    (void)index;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t len = (bytes + page - 1) / page * page;
    if (len == 0) len = page;
    pthread_mutex_lock(&pool.lock);
    ct_status s = CT_OK;
    if (pool.count == pool.cap) {
        int cap = pool.cap ? 2 * pool.cap : 64;
        region *grown = realloc(pool.items, (size_t)cap * sizeof *grown);
        if (!grown) {
            s = ct_error(CT_ERR_NOMEM, "checked device: out of memory for the allocation table");
            goto done;
        }
        pool.items = grown;
        pool.cap = cap;
    }
    /* Anonymous mappings start zeroed, as device memory from ct_device_alloc must. */
    void *p = mmap(NULL, len, pool.active ? PROT_READ | PROT_WRITE : PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        s = ct_error(CT_ERR_NOMEM, "checked device cuda:%d: cannot map %zu bytes", index, bytes);
        goto done;
    }
    pool.items[pool.count++] = (region){p, len, bytes};
    pool.allocated += bytes;
    if (pool.allocated > pool.peak) pool.peak = pool.allocated;
    *out = p;
done:
    pthread_mutex_unlock(&pool.lock);
    return s;
}

static void checked_free(int index, void *p) {
    (void)index;
    pthread_mutex_lock(&pool.lock);
    for (int i = 0; i < pool.count; i++)
        if (pool.items[i].p == p) {
            munmap(p, pool.items[i].len);
            pool.allocated -= pool.items[i].bytes;
            pool.items[i] = pool.items[--pool.count];
            break;
        }
    pthread_mutex_unlock(&pool.lock);
}

/* What came back to the host by copies (not by ops' small results), for the report at exit. */
static struct {
    _Atomic unsigned long long bytes, copies;
} to_host;

static ct_status checked_copy_bytes(void *dst, ct_device dd, const void *src, ct_device sd, size_t bytes) {
    if (bytes == 0) return CT_OK;
    if (dd.kind == CT_DEVICE_CPU && sd.kind != CT_DEVICE_CPU) {
        to_host.bytes += bytes;
        to_host.copies++;
    }
    checked_op_begin();
    memmove(dst, src, bytes);
    checked_op_end();
    return CT_OK;
}

static void checked_memset_zero(int index, void *dst, size_t bytes) {
    (void)index;
    checked_op_begin();
    memset(dst, 0, bytes);
    checked_op_end();
}

static size_t checked_peak_allocated(int index) {
    (void)index;
    pthread_mutex_lock(&pool.lock);
    size_t peak = pool.peak;
    pthread_mutex_unlock(&pool.lock);
    return peak;
}

static void checked_reset_peak(int index) {
    (void)index;
    pthread_mutex_lock(&pool.lock);
    pool.peak = pool.allocated;
    pthread_mutex_unlock(&pool.lock);
}

static void checked_describe(int index, char *buf, size_t cap) {
    snprintf(buf, cap, "cuda:%d: checked device (host memory closed outside ops, CPU kernels; "
                       "CTRAINER_CHECKED_DEVICE is set)", index);
}

/* --- asynchronous copies ------------------------------------------------------------------------- *
 * The copies themselves are done at once (the kernels are synchronous), but the host is held to the
 * contract a GPU's streams set: an upload's pinned source stays untouched, and a download's pinned
 * destination unread and unwritten, until an event recorded after the copy has been waited for.
 * Each upload in flight keeps a hash of its source. A download keeps the bytes it read and fills its
 * destination with 0xff (NaN in every float) until a wait delivers them, so a host that reads early
 * reads NaNs, and one that writes early is caught by the wait. A new copy from or into, or the
 * release of, memory that a copy in flight still uses aborts at once.
 *
 * A GPU's two streams are kept apart: uploads run on the copy stream, downloads on the compute
 * stream. An event covers what its stream had enqueued at its record and what that stream had been
 * made to wait for: the compute stream waits for every upload enqueued before its next work, an
 * upload for its `after`. So waiting for an upload does not deliver a download that its `after` does
 * not cover, as on a GPU, and a thread that reads a download it never waited for reads NaNs. */
#define POISON 0xff

typedef struct in_flight {
    unsigned char *p; /* the pinned memory: an upload's source, a download's destination */
    size_t bytes;
    unsigned char *held; /* a download's bytes, delivered at the wait (NULL: an upload) */
    uint64_t hash, seq;
} in_flight;

static struct {
    pthread_mutex_t lock;
    in_flight *items;
    int count, cap;
    uint64_t seq; /* copies so far */
} copies = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* An event: the copies it covers, by stream: downloads numbered up to compute, uploads up to copy. */
typedef struct checked_event {
    uint64_t compute, copy;
} checked_event;

static uint64_t fnv1a(const unsigned char *p, size_t n) {
    uint64_t h = 14695981039346656037ull;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static _Noreturn void contract_broken(const char *what, const void *p, size_t bytes) {
    fprintf(stderr, "checked device: %s (pinned memory %p, %zu bytes): the pinned memory of an asynchronous copy "
                    "is the host's again only once an event recorded after the copy has been waited for\n", what, p,
            bytes);
    abort();
}

static bool all_poison(const unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != POISON) return false;
    return true;
}

/* Ends the copies e covers: checks each upload's source, delivers each download; the lock is held. */
static void end_copies(checked_event e) {
    for (int i = 0; i < copies.count;) {
        in_flight *c = &copies.items[i];
        if (c->seq > (c->held ? e.compute : e.copy)) {
            i++;
            continue;
        }
        if (!c->held && fnv1a(c->p, c->bytes) != c->hash)
            contract_broken("the host changed an upload's source", c->p, c->bytes);
        if (c->held) {
            if (!all_poison(c->p, c->bytes))
                contract_broken("the host wrote into a download's destination", c->p, c->bytes);
            memcpy(c->p, c->held, c->bytes);
            free(c->held);
        }
        *c = copies.items[--copies.count];
    }
}

/* Aborts when [p, p + n) overlaps the pinned memory of a copy in flight; the lock is held. */
static void check_not_in_flight(const void *p, size_t n, const char *what) {
    const unsigned char *a = p;
    for (int i = 0; i < copies.count; i++) {
        const in_flight *c = &copies.items[i];
        if (a < c->p + c->bytes && c->p < a + n) contract_broken(what, c->p, c->bytes);
    }
}

/* Registers a copy in flight and returns its number (0: out of memory); the lock is held. */
static uint64_t add_in_flight(in_flight c) {
    if (copies.count == copies.cap) {
        int cap = copies.cap ? 2 * copies.cap : 16;
        in_flight *grown = realloc(copies.items, (size_t)cap * sizeof *grown);
        if (!grown) return 0;
        copies.items = grown;
        copies.cap = cap;
    }
    c.seq = ++copies.seq;
    copies.items[copies.count++] = c;
    return c.seq;
}

static ct_status checked_event_create(int index, void **out) {
    (void)index;
    *out = calloc(1, sizeof(checked_event));
    return *out ? CT_OK : ct_error(CT_ERR_NOMEM, "checked device: out of memory for an event");
}

static void checked_event_destroy(void *event) { free(event); }

/* On the compute stream, which has waited for every upload enqueued so far. */
static ct_status checked_event_record(void *event) {
    pthread_mutex_lock(&copies.lock);
    *(checked_event *)event = (checked_event){copies.seq, copies.seq};
    pthread_mutex_unlock(&copies.lock);
    return CT_OK;
}

static ct_status checked_event_wait(void *event) {
    pthread_mutex_lock(&copies.lock);
    end_copies(*(checked_event *)event);
    pthread_mutex_unlock(&copies.lock);
    return CT_OK;
}

/* Pinned memory is host memory whose size sits one alignment step before it, for the release's check. */
#define PINNED_HEADER 64

static ct_status checked_pinned_alloc(size_t bytes, void **out) {
    unsigned char *p = bytes <= SIZE_MAX - PINNED_HEADER ? ct_host_alloc(bytes + PINNED_HEADER) : NULL;
    *out = p ? p + PINNED_HEADER : NULL;
    if (!p) return ct_error(CT_ERR_NOMEM, "checked device: cannot allocate %zu bytes of pinned memory", bytes);
    memcpy(p, &bytes, sizeof bytes);
    return CT_OK;
}

static void checked_pinned_free(void *p) {
    if (!p) return;
    unsigned char *base = (unsigned char *)p - PINNED_HEADER;
    size_t bytes;
    memcpy(&bytes, base, sizeof bytes);
    pthread_mutex_lock(&copies.lock);
    check_not_in_flight(p, bytes ? bytes : 1, "pinned memory released while a copy still uses it");
    pthread_mutex_unlock(&copies.lock);
    ct_host_free(base);
}

/* On the copy stream: done covers the uploads so far and what `after` covers of the compute stream. */
static ct_status checked_upload(int index, void *dst, const void *src, size_t bytes, void *after, void *done) {
    pthread_mutex_lock(&copies.lock);
    check_not_in_flight(src, bytes, "a new upload from memory a copy in flight still uses");
    uint64_t seq = add_in_flight((in_flight){(unsigned char *)src, bytes, NULL, fnv1a(src, bytes), 0});
    if (seq) *(checked_event *)done = (checked_event){after ? ((checked_event *)after)->compute : 0, seq};
    pthread_mutex_unlock(&copies.lock);
    if (!seq) return ct_error(CT_ERR_NOMEM, "checked device: out of memory for the copies in flight");
    return checked_copy_bytes(dst, (ct_device){CT_DEVICE_CUDA, index}, src, CT_CPU, bytes);
}

static ct_status checked_download(int index, void *dst, const void *src, size_t bytes, void *done) {
    unsigned char *held = malloc(bytes ? bytes : 1);
    if (!held) return ct_error(CT_ERR_NOMEM, "checked device: out of memory for a download of %zu bytes", bytes);
    CT_TRY(checked_copy_bytes(held, CT_CPU, src, (ct_device){CT_DEVICE_CUDA, index}, bytes));
    pthread_mutex_lock(&copies.lock);
    check_not_in_flight(dst, bytes, "a new download into memory a copy in flight still uses");
    uint64_t seq = add_in_flight((in_flight){dst, bytes, held, 0, 0});
    if (seq) {
        memset(dst, POISON, bytes);
        *(checked_event *)done = (checked_event){seq, seq}; /* on the compute stream */
    }
    pthread_mutex_unlock(&copies.lock);
    if (seq) return CT_OK;
    free(held);
    return ct_error(CT_ERR_NOMEM, "checked device: out of memory for the copies in flight");
}

/* The calling thread's work, and so every copy it enqueued, has run. */
static ct_status checked_synchronize(void) {
    pthread_mutex_lock(&copies.lock);
    end_copies((checked_event){copies.seq, copies.seq});
    pthread_mutex_unlock(&copies.lock);
    return CT_OK;
}

/* CTRAINER_CHECKED_DEVICE_REPORT=1: at exit, what the run copied back to the host and its peak
 * device memory, on stderr (tests hold an evaluation's traffic to what it keeps). */
static void report(void) {
    fprintf(stderr, "checked device: %llu bytes copied to the host in %llu copies; peak %zu bytes allocated\n",
            (unsigned long long)to_host.bytes, (unsigned long long)to_host.copies, pool.peak);
}

static ct_backend_ops table;
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void make_table(void) {
    const char *r = getenv("CTRAINER_CHECKED_DEVICE_REPORT");
    if (r && *r && strcmp(r, "0") != 0) atexit(report);
    const char *n = getenv("CTRAINER_CHECKED_DEVICE");
    int count = n ? atoi(n) : 1;
    n_devices = count > 0 && count <= 64 ? count : 1;
    table = *ct_backend_for_kind(CT_DEVICE_CPU); /* the kernels of the CPU's chosen level */
    table.size = sizeof table;
    table.name = "cuda";
    table.device_count = checked_device_count;
    table.alloc = checked_alloc;
    table.free = checked_free;
    table.copy_bytes = checked_copy_bytes;
    table.memset_zero = checked_memset_zero;
    table.synchronize = checked_synchronize;
    table.peak_allocated = checked_peak_allocated;
    table.reset_peak = checked_reset_peak;
    table.describe = checked_describe;
    table.op_begin = checked_op_begin;
    table.op_end = checked_op_end;
    table.event_create = checked_event_create;
    table.event_destroy = checked_event_destroy;
    table.event_record = checked_event_record;
    table.event_wait = checked_event_wait;
    table.pinned_alloc = checked_pinned_alloc;
    table.pinned_free = checked_pinned_free;
    table.upload = checked_upload;
    table.download = checked_download;
}

const ct_backend_ops *ct_backend_checked(void) {
    pthread_once(&table_once, make_table);
    return &table;
}
