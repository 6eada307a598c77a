/* What the CUDA runtime can see: compiled only in builds with CUDA. A machine without a GPU (or
 * without a driver) reports zero devices rather than failing, so CPU runs of a CUDA build work. */
#include <cstdio>

#include <cuda_runtime.h>

#include "backends/cuda/cuda_rt.h"

extern "C" int ct_cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); /* clear the sticky error of a machine without a driver */
        return 0;
    }
    return n;
}

extern "C" void ct_cuda_describe(int index, char *buf, size_t cap) {
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, index) != cudaSuccess) {
        cudaGetLastError();
        snprintf(buf, cap, "(no properties)");
        return;
    }
    snprintf(buf, cap, "%s, %.1f GiB, compute capability %d.%d", p.name, (double)p.totalGlobalMem / (1 << 30), p.major,
             p.minor);
}
