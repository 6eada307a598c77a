/* A deterministic sum over the threads of one block (C++/CUDA only: included by .cu files).
 *
 * Every thread contributes one value (its own strided partial sum); the values meet in a fixed binary tree over
 * shared memory, so the result depends only on the block size and the data, never on scheduling: the same inputs give
 * the same bits on every run, which atomics would not. The kernels that use it (normalisation statistics, bias
 * gradients) accumulate in double like the CPU backend does. */
#ifndef CT_CUDA_BLOCK_SUM_CUH
#define CT_CUDA_BLOCK_SUM_CUH

/* Sum of v over a block of exactly THREADS threads (a power of two). shm holds THREADS doubles. Every thread of the
 * block must call it (it synchronises); every thread gets the sum, and shm may be reused right after. */
template <int THREADS> __device__ inline double ct_block_sum(double v, double *shm) {
    static_assert(THREADS >= 1 && (THREADS & (THREADS - 1)) == 0, "block size must be a power of two");
    shm[threadIdx.x] = v;
    __syncthreads();
    for (int s = THREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) shm[threadIdx.x] += shm[threadIdx.x + s];
        __syncthreads();
    }
    double total = shm[0];
    __syncthreads(); /* everyone has read shm[0] before a later call overwrites it
                    */
    return total;
}

#endif
