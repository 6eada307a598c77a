/* What the CUDA runtime can see: compiled only in builds with CUDA. A machine without a GPU (or
 * without a driver) reports zero devices rather than failing, so CPU runs of a CUDA build work. */
#include <cstdio>
#include <cstring>

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

/* Dense peaks as NVIDIA's datasheets state them (TFLOP/s: bf16 and fp16 tensor cores, tf32 tensor
 * cores, fp32 without them), matched by the device's name, most specific first: what llm.c and
 * nanoGPT divide by for MFU. The clock a datasheet assumes is not the boost clock the runtime
 * reports, so a formula alone would overstate H100s by about 8%. */
static const struct {
    const char *name;
    double bf16, tf32, fp32;
} datasheet[] = {
    {"H100 PCIe", 756.5, 378.0, 51.2}, {"H100 NVL", 835.0, 417.5, 60.0}, {"H100", 989.4, 494.7, 66.9},
    {"H200", 989.4, 494.7, 66.9},      {"GH200", 989.4, 494.7, 66.9},    {"A100", 312.0, 156.0, 19.5},
    {"L40S", 362.1, 183.0, 91.6},      {"L4", 121.0, 60.0, 30.3},        {"A10", 125.0, 62.5, 31.2},
};

/* Other GPUs: streaming multiprocessors x the reported clock x dense FLOP per SM and clock of the
 * architecture (tensor-core bf16, tf32, and fp32 lanes); 0 for an architecture not listed. */
static double by_architecture(int index, int major, int minor, ct_math_mode m) {
    int sms = 0, khz = 0;
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, index) != cudaSuccess ||
        cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, index) != cudaSuccess) {
        cudaGetLastError();
        return 0.0;
    }
    double bf16 = major == 9 ? 4096 : major == 8 && minor == 0 ? 2048 : major == 8 ? 1024 : 0;
    double fp32 = major == 9 || (major == 8 && minor != 0) ? 256 : major == 8 ? 128 : 0;
    double per_clock = m == CT_MATH_F32 ? fp32 : m == CT_MATH_TF32 ? bf16 / 2 : bf16;
    return (double)sms * (double)khz * 1e3 * per_clock;
}

extern "C" double ct_cuda_peak_flops(int index, ct_math_mode m) {
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, index) != cudaSuccess) {
        cudaGetLastError();
        return 0.0;
    }
    for (const auto &d : datasheet)
        if (strstr(p.name, d.name))
            return 1e12 * (m == CT_MATH_F32 ? d.fp32 : m == CT_MATH_TF32 ? d.tf32 : d.bf16);
    return by_architecture(index, p.major, p.minor, m);
}
