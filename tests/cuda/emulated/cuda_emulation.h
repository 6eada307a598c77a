/* Just enough of CUDA's device language for the host compiler to run a kernel written with it: a
 * launch runs the grid's blocks one after another, each by blockDim.x host threads (one per CUDA
 * thread, with its own threadIdx) that meet at __syncthreads on a barrier, so a kernel's indexing,
 * shared-memory staging and synchronisation run as they would on a GPU; a missing __syncthreads
 * shows up as a race (ThreadSanitizer in CI) or wrong numbers, a read or write out of its array as
 * an AddressSanitizer report. Only what the emulated kernels use is here: 1-D blocks, dynamic shared
 * memory through dynamic_shared<T>() (a heap block of exactly the launch's size, so that reading
 * past it is an AddressSanitizer report), no warp functions, no atomics. Included before the
 * kernels' header, which leaves its own dynamic_shared to nvcc when CT_CUDA_EMULATION is defined. */
#ifndef CT_CUDA_EMULATION_H
#define CT_CUDA_EMULATION_H

#include <pthread.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#define CT_CUDA_EMULATION 1
#define __global__
#define __device__
#define __shared__
#define __align__(n) __attribute__((aligned(n)))

struct dim3 {
    unsigned x, y, z;
    dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

inline thread_local dim3 threadIdx, blockIdx;
inline dim3 gridDim, blockDim;
inline pthread_barrier_t ct_emu_barrier;

inline void __syncthreads() { pthread_barrier_wait(&ct_emu_barrier); }

/* The running launch's dynamic shared memory. */
inline unsigned char *ct_emu_shared;
template <typename T> T *dynamic_shared() { return (T *)ct_emu_shared; }

/* the device library's overloads that the kernels call unqualified */
using std::exp;
using std::log;
using std::max;
using std::min;

/* kernel<<<grid, threads, shared_bytes>>>(args...): every block of the grid in turn, x fastest, each
 * ending with a barrier so that the next block's staging never overwrites shared memory still being
 * read. */
template <typename K, typename... A>
void ct_emu_launch(dim3 grid, unsigned threads, size_t shared_bytes, K kernel, A... args) {
    gridDim = grid;
    blockDim = dim3(threads);
    std::vector<unsigned char> shared(shared_bytes ? shared_bytes : 1);
    ct_emu_shared = shared.data();
    if (pthread_barrier_init(&ct_emu_barrier, nullptr, threads) != 0) {
        std::fprintf(stderr, "cuda emulation: cannot make a barrier of %u threads\n", threads);
        std::abort();
    }
    std::vector<std::thread> team;
    for (unsigned t = 0; t < threads; t++)
        team.emplace_back([=] {
            threadIdx = dim3(t);
            for (unsigned by = 0; by < grid.y; by++)
                for (unsigned bx = 0; bx < grid.x; bx++) {
                    blockIdx = dim3(bx, by);
                    kernel(args...);
                    __syncthreads();
                }
        });
    for (std::thread &t : team) t.join();
    pthread_barrier_destroy(&ct_emu_barrier);
}

#endif
