// Counter-based random numbers (Philox-4x32-10, Salmon et al., SC'11).
//
// A Philox draw is a pure function of (key, counter): element i of a tensor filled from
// generator state (seed, offset) uses counter offset + i/4, lane i%4. The CPU and a CUDA
// kernel can therefore produce the very same numbers in any order, and a run is reproducible
// from its seed alone. After filling n elements the generator's offset advances by ceil(n/4).
#pragma once

#include <array>
#include <cstdint>

namespace keel {

// One Philox-4x32-10 block: four 32-bit random words.
std::array<uint32_t, 4> philox4x32(uint64_t counter, uint64_t key);

// Element i of the stream (key, base): a uniform float in (0, 1] and a standard normal.
// Normals use Box-Muller on lane pairs (0,1) and (2,3) of a block.
float philox_uniform(uint64_t key, uint64_t base, uint64_t i);
float philox_normal(uint64_t key, uint64_t base, uint64_t i);

class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : seed_(seed) {}
  uint64_t seed() const { return seed_; }
  uint64_t offset() const { return offset_; }
  void set_state(uint64_t seed, uint64_t offset) { seed_ = seed, offset_ = offset; }
  // Reserve counters for n elements; returns the base counter to draw them from.
  uint64_t advance(uint64_t n) {
    uint64_t base = offset_;
    offset_ += (n + 3) / 4;
    return base;
  }

 private:
  uint64_t seed_;
  uint64_t offset_ = 0;
};

}  // namespace keel
