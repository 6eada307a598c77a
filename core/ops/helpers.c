/* The parts of the op library that run on no device: names, output sizes and dropout keys, the same
 * for every backend (ops.h, ops_conv.h, ops_misc.h). */
#include <stdint.h>

#include "core/ops/ops.h"
#include "core/rng.h"

const char *ct_activation_name(ct_activation a) {
    switch (a) {
    case CT_ACT_NONE: return "identity";
    case CT_ACT_RELU: return "relu";
    case CT_ACT_GELU: return "gelu";
    case CT_ACT_GELU_TANH: return "gelu_tanh";
    case CT_ACT_TANH: return "tanh";
    case CT_ACT_SIGMOID: return "sigmoid";
    }
    return "?";
}

int64_t ct_conv_out_size(int64_t in, int64_t kernel, int64_t stride, int64_t padding, int64_t dilation) {
    int64_t span = in + 2 * padding - dilation * (kernel - 1) - 1;
    if (span < 0) return 0; /* C division truncates toward zero; PyTorch's formula floors */
    return span / stride + 1;
}

/* splitmix64's finaliser: a bijection that spreads every input bit over the output. */
static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void ct_dropout_key(uint64_t seed, uint64_t salt, uint32_t key[2]) {
    uint64_t k = mix64(seed ^ mix64(salt + 0x9E3779B97F4A7C15ull * CT_RNG_DROPOUT));
    key[0] = (uint32_t)k;
    key[1] = (uint32_t)(k >> 32);
}

uint64_t ct_hash_name(const char *name) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
        h ^= *p;
        h *= 0x100000001b3ull;
    }
    return h;
}
