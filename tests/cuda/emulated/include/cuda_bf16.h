/* CUDA's bfloat16 type and its conversions, for the host emulation of the backend's kernels: float32's
 * upper 16 bits, rounded to nearest even (a NaN stays a NaN), as __float2bfloat16 rounds on a GPU. */
#ifndef CT_FAKE_CUDA_BF16_H
#define CT_FAKE_CUDA_BF16_H

#include <cmath>
#include <cstdint>
#include <cstring>

struct __nv_bfloat16 {
    uint16_t bits;
};

inline __nv_bfloat16 __float2bfloat16(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    if (std::isnan(f)) return __nv_bfloat16{(uint16_t)((u >> 16) | 0x40)};
    u += 0x7FFF + ((u >> 16) & 1);
    return __nv_bfloat16{(uint16_t)(u >> 16)};
}

inline float __bfloat162float(__nv_bfloat16 b) {
    const uint32_t u = (uint32_t)b.bits << 16;
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}

#endif
