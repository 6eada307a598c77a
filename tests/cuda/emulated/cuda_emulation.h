/* Just enough of CUDA's device language for the host's C++ compiler to run the CUDA backend's own
 * kernels. A launch runs the grid's blocks one after another; a block's threads are fibers
 * (ucontext) on the calling thread, one per CUDA thread with its own threadIdx, each running until
 * it reaches a barrier, the others then, in an order shuffled per block, until all have reached it:
 * so a kernel's indexing, shared-memory staging and synchronisation run as they would on a GPU, a
 * missing __syncthreads lets one thread's writes reach another's reads early (wrong numbers), and a
 * barrier that not every thread reaches is reported as the deadlock it would be. A read or write out
 * of an array is an AddressSanitizer report (the switches are announced to it).
 *
 * What is here is what the kernels use: 1-D blocks on a 2-D grid; static __shared__ arrays (static
 * locals: one block runs at a time, so its threads share them); dynamic shared memory through
 * dynamic_shared<T>() (a heap block of exactly the launch's size, 128-byte aligned and filled with
 * NaN bytes, so reading past it is an
 * AddressSanitizer report); __syncwarp and the warp shuffles __shfl_sync and __shfl_xor_sync (the
 * 32 threads of a warp meet at a barrier of their own, as a full mask requires them all); atomicMin;
 * __trap. Launches are `ct_emu_launch(ct_emu_config(grid, block[, shared_bytes[, stream]]), kernel,
 * args...)`, into which rewrite_launches.py turns `kernel<<<...>>>(args...)`; one runs at a time in
 * the process. Included first by every emulated kernel file, before the fake CUDA headers of
 * include/. */
#ifndef CT_CUDA_EMULATION_H
#define CT_CUDA_EMULATION_H

#include <setjmp.h>
#include <sys/mman.h>
#include <ucontext.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <type_traits>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define CT_EMU_ASAN 1
#endif

#define CT_CUDA_EMULATION 1
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __restrict__ __restrict
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(...)

struct dim3 {
    unsigned x, y, z;
    dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

inline dim3 threadIdx, blockIdx, gridDim, blockDim;
constexpr int warpSize = 32;

/* --- fibers ------------------------------------------------------------------------------------- */

/* A barrier of `target` threads: a thread that arrives waits until the generation moves on. */
struct ct_emu_barrier {
    unsigned count, target, generation;
};

/* A fiber's first entry is setcontext; after that, switches are _setjmp / _longjmp, which unlike
 * swapcontext make no system call to save the signal mask: a launch switches millions of times. */
struct ct_emu_fiber {
    ucontext_t context;
    jmp_buf jump;
    bool started;
    char *stack;
    const ct_emu_barrier *waiting; /* NULL: runnable */
    unsigned generation;           /* of `waiting` when it arrived */
    bool done;
    void *fake_stack; /* AddressSanitizer's record of the fiber's fake stack while it is switched out */
};

constexpr size_t CT_EMU_STACK = 512 * 1024; /* kernels keep whole rows in locals; sanitizers add more */

inline struct ct_emu_state {
    std::vector<ct_emu_fiber> fibers;
    jmp_buf scheduler_jump;
    const void *scheduler_bottom;
    size_t scheduler_size;
    unsigned current;
    ct_emu_barrier block;
    std::vector<ct_emu_barrier> warps;
    std::vector<double> exchange; /* a shuffle's values, a slot per thread */
    unsigned char *shared;        /* the launch's dynamic shared memory */
    std::function<void()> body;   /* the kernel with its arguments */
} ct_emu;

/* Back to the scheduler (AddressSanitizer told which stack it goes to), until resumed. */
inline void ct_emu_to_scheduler() {
    ct_emu_fiber &f = ct_emu.fibers[ct_emu.current];
#ifdef CT_EMU_ASAN
    __sanitizer_start_switch_fiber(&f.fake_stack, ct_emu.scheduler_bottom, ct_emu.scheduler_size);
#endif
    if (!_setjmp(f.jump)) _longjmp(ct_emu.scheduler_jump, 1);
#ifdef CT_EMU_ASAN
    __sanitizer_finish_switch_fiber(f.fake_stack, &ct_emu.scheduler_bottom, &ct_emu.scheduler_size);
#endif
}

inline void ct_emu_wait(ct_emu_barrier &b) {
    ct_emu_fiber &f = ct_emu.fibers[ct_emu.current];
    if (++b.count == b.target) { /* the last to arrive releases the others and goes on */
        b.count = 0;
        b.generation++;
        return;
    }
    f.waiting = &b;
    f.generation = b.generation;
    ct_emu_to_scheduler();
}

/* A fiber runs the kernel once per block, for every block of its launch. */
[[noreturn]] inline void ct_emu_fiber_main() {
#ifdef CT_EMU_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &ct_emu.scheduler_bottom, &ct_emu.scheduler_size);
#endif
    for (;;) {
        ct_emu.body();
        ct_emu.fibers[ct_emu.current].done = true;
        ct_emu_to_scheduler();
    }
}

inline void ct_emu_resume(ct_emu_fiber &f) {
    void *fake = nullptr;
#ifdef CT_EMU_ASAN
    __sanitizer_start_switch_fiber(&fake, f.stack, CT_EMU_STACK);
#endif
    if (!_setjmp(ct_emu.scheduler_jump)) {
        if (f.started)
            _longjmp(f.jump, 1);
        f.started = true;
        setcontext(&f.context);
    }
#ifdef CT_EMU_ASAN
    __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
    (void)fake;
}

inline void __syncthreads() { ct_emu_wait(ct_emu.block); }
inline void __syncwarp(unsigned = 0xffffffffu) { ct_emu_wait(ct_emu.warps[threadIdx.x / warpSize]); }

/* A kernel's stop on a broken invariant: the emulated process aborts, as a GPU's context would fail. */
[[noreturn]] inline void __trap() {
    std::fprintf(stderr, "cuda emulation: __trap in block (%u, %u), thread %u\n", blockIdx.x, blockIdx.y, threadIdx.x);
    std::abort();
}

/* The running launch's dynamic shared memory. */
template <typename T> T *dynamic_shared() { return (T *)ct_emu.shared; }

/* v of lane src of the calling thread's warp; every lane of the warp calls it (a full mask). */
template <typename T> T ct_emu_shuffle(T v, unsigned (*lane_of)(unsigned lane, unsigned arg), unsigned arg) {
    static_assert(sizeof(T) <= sizeof(double), "shuffled values of up to 8 bytes");
    const unsigned me = threadIdx.x, warp = me / warpSize, lane = me % warpSize;
    std::memcpy(&ct_emu.exchange[me], &v, sizeof v);
    __syncwarp();
    T out;
    std::memcpy(&out, &ct_emu.exchange[warp * warpSize + lane_of(lane, arg) % warpSize], sizeof out);
    __syncwarp(); /* every lane has read before a later shuffle writes */
    return out;
}

template <typename T> T __shfl_sync(unsigned, T v, int src) {
    return ct_emu_shuffle(v, [](unsigned, unsigned s) { return s; }, (unsigned)src);
}

template <typename T> T __shfl_xor_sync(unsigned, T v, int mask) {
    return ct_emu_shuffle(v, [](unsigned lane, unsigned m) { return lane ^ m; }, (unsigned)mask);
}

template <typename T> T atomicMin(T *address, T v) {
    T old = *address; /* one fiber runs at a time */
    if (v < old) *address = v;
    return old;
}

/* the device library's overloads and intrinsics that the kernels call unqualified */
using std::exp;
using std::fabs;
using std::fmax;
using std::fmin;
using std::isfinite;
using std::isnan;
using std::log;
using std::max;
using std::min;
using std::sqrt;
using std::tanh;
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }

/* <<<grid, block, shared_bytes, stream>>> */
struct ct_emu_config {
    dim3 grid, block;
    size_t shared_bytes;
    ct_emu_config(dim3 g, dim3 b, size_t shm = 0, const void * = nullptr) : grid(g), block(b), shared_bytes(shm) {}
};

/* Runs one block: every fiber until it ends its kernel, the runnable ones in a shuffled order each
 * round. */
inline void ct_emu_run_block(unsigned threads, uint64_t &order_seed) {
    std::vector<unsigned> order(threads);
    for (unsigned t = 0; t < threads; t++) {
        ct_emu.fibers[t].waiting = nullptr;
        ct_emu.fibers[t].done = false;
        order[t] = t;
    }
    for (unsigned t = threads; t > 1; t--) { /* Fisher-Yates with a fixed-seed LCG: reproducible */
        order_seed = order_seed * 6364136223846793005ull + 1442695040888963407ull;
        std::swap(order[t - 1], order[(order_seed >> 33) % t]);
    }
    for (unsigned finished = 0; finished < threads;) {
        bool ran = false;
        for (unsigned t : order) {
            ct_emu_fiber &f = ct_emu.fibers[t];
            if (f.done || (f.waiting && f.waiting->generation == f.generation)) continue;
            f.waiting = nullptr;
            ct_emu.current = t;
            threadIdx = dim3(t);
            ct_emu_resume(f);
            ran = true;
            finished += f.done;
        }
        if (!ran) {
            std::fprintf(stderr, "cuda emulation: block (%u, %u) deadlocks: %u of %u threads ended, the others wait at "
                         "barriers the rest never reach\n", blockIdx.x, blockIdx.y, finished, threads);
            std::abort();
        }
    }
}

/* One launch at a time in the process, whichever host thread makes it (the Trainer's asynchronous
 * evaluation launches beside training): the state above is the running launch's. One mutex for every
 * kernel, not a static in the template, which would be one per kernel. */
inline std::mutex ct_emu_one_launch_at_a_time;

/* Every block of the grid in turn, x fastest. */
/* Aborts when p lies in an allocation of a device other than the calling thread's current one
 * (emulated_runtime.cpp). */
void ct_emu_check_current_device(const void *p);

template <typename T> void ct_emu_check_argument(const T &arg) {
    if constexpr (std::is_pointer_v<T>) ct_emu_check_current_device((const void *)arg);
}

template <typename K, typename... A> void ct_emu_launch(ct_emu_config c, K kernel, A... args) {
    (ct_emu_check_argument(args), ...); /* before the one-launch lock: the check takes the memory lock */
    std::lock_guard<std::mutex> hold(ct_emu_one_launch_at_a_time);
    const unsigned threads = c.block.x;
    if (c.block.y != 1 || c.block.z != 1 || c.grid.z != 1 || threads == 0 || threads > 1024) {
        std::fprintf(stderr, "cuda emulation: only 1-D blocks of 1 to 1024 threads on a 2-D grid\n");
        std::abort();
    }
    if (c.shared_bytes > 227 * 1024) { /* Hopper's most a block may have (opted in) */
        std::fprintf(stderr, "cuda emulation: %zu bytes of dynamic shared memory, more than 227 KiB\n", c.shared_bytes);
        std::abort();
    }
    gridDim = c.grid;
    blockDim = c.block;
    /* exactly the launch's bytes (reading past them is an AddressSanitizer report), aligned as a GPU's */
    void *shared = nullptr;
    if (posix_memalign(&shared, 128, c.shared_bytes ? c.shared_bytes : 1) != 0) {
        std::fprintf(stderr, "cuda emulation: no memory for %zu bytes of shared memory\n", c.shared_bytes);
        std::abort();
    }
    std::memset(shared, 0xFF, c.shared_bytes); /* NaN as float and bf16: a read before a write shows */
    struct release {
        void *p;
        ~release() { std::free(p); }
    } release_shared{shared};
    ct_emu.shared = (unsigned char *)shared;
    const unsigned warps = (threads + warpSize - 1) / warpSize;
    ct_emu.exchange.assign((size_t)warps * warpSize, 0.0);
    ct_emu.block = {0, threads, 0};
    ct_emu.warps.assign(warps, ct_emu_barrier{});
    for (unsigned w = 0; w < warps; w++) ct_emu.warps[w].target = std::min<unsigned>(warpSize, threads - w * warpSize);
    while (ct_emu.fibers.size() < threads) {
        void *stack = mmap(nullptr, CT_EMU_STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                           -1, 0);
        if (stack == MAP_FAILED) {
            std::fprintf(stderr, "cuda emulation: no memory for a thread's stack\n");
            std::abort();
        }
        ct_emu.fibers.push_back(ct_emu_fiber{});
        ct_emu.fibers.back().stack = (char *)stack;
    }
    for (unsigned t = 0; t < threads; t++) { /* each fiber starts afresh in this launch */
        ct_emu_fiber &f = ct_emu.fibers[t];
        f.started = false;
        getcontext(&f.context);
        f.context.uc_stack.ss_sp = f.stack;
        f.context.uc_stack.ss_size = CT_EMU_STACK;
        f.context.uc_link = nullptr;
        makecontext(&f.context, ct_emu_fiber_main, 0);
    }
    ct_emu.body = [&] { kernel(args...); };
    uint64_t order_seed = 0x9E3779B97F4A7C15ull;
    for (unsigned by = 0; by < c.grid.y; by++)
        for (unsigned bx = 0; bx < c.grid.x; bx++) {
            blockIdx = dim3(bx, by);
            ct_emu_run_block(threads, order_seed);
        }
    ct_emu.body = nullptr;
}

#endif
