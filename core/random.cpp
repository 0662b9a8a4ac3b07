#include "core/random.h"

#include <cmath>

namespace keel {

std::array<uint32_t, 4> philox4x32(uint64_t counter, uint64_t key) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;  // round multipliers
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;  // key schedule (golden ratio, sqrt 3)
  uint32_t c0 = static_cast<uint32_t>(counter), c1 = static_cast<uint32_t>(counter >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
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
  return {c0, c1, c2, c3};
}

namespace {
// (0, 1]: never 0, so log() in Box-Muller stays finite.
float to_unit(uint32_t x) { return (static_cast<float>(x >> 8) + 1.0f) * (1.0f / 16777216.0f); }
}  // namespace

float philox_uniform(uint64_t key, uint64_t base, uint64_t i) {
  auto r = philox4x32(base + i / 4, key);
  return to_unit(r[i % 4]);
}

float philox_normal(uint64_t key, uint64_t base, uint64_t i) {
  auto r = philox4x32(base + i / 4, key);
  unsigned lane = i % 4, pair = lane & ~1u;
  float u1 = to_unit(r[pair]), u2 = to_unit(r[pair + 1]);
  float radius = std::sqrt(-2.0f * std::log(u1));
  float angle = 6.2831853071795864f * u2;
  return (lane & 1u) ? radius * std::sin(angle) : radius * std::cos(angle);
}

}  // namespace keel
