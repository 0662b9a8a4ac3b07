// Philox-4x32-10 and its uniform draw as inline functions that compile for both the host and
// the device: core/random.cpp is built on them, and so is the CUDA dropout kernel, so the device
// draws the very numbers the CPU does.
//
// Bit-identity between the two compilations holds because the rounds use only 32x32->64-bit
// integer products, xor and wrapping adds, and the uniform is (float(x >> 8) + 1) * 2^-24,
// where every step is exact in f32 (x >> 8 < 2^24), so no rounding mode, FMA contraction or
// fast-math flag can change a bit. (Normals use log/sin/cos, whose device versions differ in
// the last ulp from the host's; nothing on the device draws normals through this header.)
// tests/core/test_random.cpp checks the rounds against Random123's known-answer vector.
//
// Plain C++ when not compiled by nvcc. KEEL_HD is core/host_device.h's, the one definition, so this
// header and the others using it (ops/attention_band.h, optim/adamw_math.h) go in any order.
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace keel::philox {

struct Block {
  uint32_t x[4];
};

// One Philox-4x32-10 block for (counter, key) (Salmon et al., SC'11).
KEEL_HD inline Block philox4x32(uint64_t counter, uint64_t key) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;  // round multipliers
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;  // key schedule (golden ratio, sqrt 3)
  uint32_t c0 = static_cast<uint32_t>(counter), c1 = static_cast<uint32_t>(counter >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
#if KEEL_DEVICE_CODE
#pragma unroll
#endif
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = static_cast<uint64_t>(kM0) * c0;
    uint64_t p1 = static_cast<uint64_t>(kM1) * c2;
    uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += kW0;
    k1 += kW1;
  }
  return Block{{c0, c1, c2, c3}};
}

// A 32-bit word -> a float in (0, 1]: never 0, so log() in Box-Muller stays finite.
KEEL_HD inline float to_unit(uint32_t x) { return (static_cast<float>(x >> 8) + 1.0f) * (1.0f / 16777216.0f); }

// Element i of the stream (key, base): counter base + i/4, lane i%4.
KEEL_HD inline float uniform(uint64_t key, uint64_t base, uint64_t i) {
  Block r = philox4x32(base + i / 4, key);
  return to_unit(r.x[i % 4]);
}

}  // namespace keel::philox

