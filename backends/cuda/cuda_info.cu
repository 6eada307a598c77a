/* What the CUDA runtime can see: compiled only in builds with CUDA. A machine without a GPU (or
 * without a driver) reports zero devices rather than failing, so CPU runs of a CUDA build work. */
#include <cuda_runtime.h>

extern "C" int ct_cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); /* clear the sticky error of a machine without a driver */
        return 0;
    }
    return n;
}
