#include "core/random.h"

#include "core/philox.h"

#include <cmath>

namespace keel {

std::array<uint32_t, 4> philox4x32(uint64_t counter, uint64_t key) {
  philox::Block b = philox::philox4x32(counter, key);
  return {b.x[0], b.x[1], b.x[2], b.x[3]};
}

float philox_uniform(uint64_t key, uint64_t base, uint64_t i) { return philox::uniform(key, base, i); }

float philox_normal(uint64_t key, uint64_t base, uint64_t i) {
  philox::Block r = philox::philox4x32(base + i / 4, key);
  unsigned lane = i % 4, pair = lane & ~1u;
  float u1 = philox::to_unit(r.x[pair]), u2 = philox::to_unit(r.x[pair + 1]);
  float radius = std::sqrt(-2.0f * std::log(u1));
  float angle = 6.2831853071795864f * u2;
  return (lane & 1u) ? radius * std::sin(angle) : radius * std::cos(angle);
}

}  // namespace keel
