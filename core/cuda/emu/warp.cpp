// What the warp collectives compute once every lane has arrived: CUDA's shuffle and vote
// semantics, lane by lane. (block.cpp decides when; this file decides what.)
#include <cstdint>

#include <fmt/format.h>

#include "core/cuda/emu/device_functions.h"
#include "core/error.h"

namespace keel::emu {

int shuffle_source(Collective kind, int lane, int arg, int width) {
  if (width <= 0 || width > 32 || (width & (width - 1)) != 0)
    throw CudaError("emulated CUDA", fmt::format("{}: width {} is not a power of two in [1, 32]", collective_name(kind), width));
  const int base = lane & ~(width - 1), pos = lane & (width - 1);
  switch (kind) {
    case Collective::shfl:  // srcLane modulo width, within the caller's segment
      return base + (arg & (width - 1));
    case Collective::shfl_up:
      return pos - arg < 0 ? -1 : lane - arg;
    case Collective::shfl_down:
      return pos + arg >= width ? -1 : lane + arg;
    case Collective::shfl_xor: {  // a later segment gives the caller its own value
      const int src = lane ^ arg;
      return src >= base + width || src < 0 || src > 31 ? -1 : src;
    }
    default:
      return -1;
  }
}

void shuffle_combine(const void* state, const void* const in[32], void* const out[32], unsigned mask) {
  const Collective kind = *static_cast<const Collective*>(state);
  for (int l = 0; l < 32; ++l) {
    if (!(mask >> l & 1u)) continue;
    const auto* me = static_cast<const ShuffleIn*>(in[l]);
    const int src = shuffle_source(kind, l, me->arg, me->width);
    uint64_t v = me->bits;
    if (src >= 0) {
      // Reading a lane that did not take part is undefined on a GPU (it may be a stale value).
      if (!(mask >> src & 1u))
        throw CudaError("emulated CUDA", fmt::format("{} with mask {:#010x}: lane {} reads lane {}, which is not in the mask",
                                                     collective_name(kind), mask, l, src),
                        "a shuffle may only read lanes named in its mask");
      v = static_cast<const ShuffleIn*>(in[src])->bits;
    }
    *static_cast<uint64_t*>(out[l]) = v;
  }
}

void ballot_combine(const void*, const void* const in[32], void* const out[32], unsigned mask) {
  unsigned bits = 0;
  for (int l = 0; l < 32; ++l)
    if ((mask >> l & 1u) && *static_cast<const int*>(in[l])) bits |= 1u << l;
  for (int l = 0; l < 32; ++l)
    if (mask >> l & 1u) *static_cast<unsigned*>(out[l]) = bits;
}

}  // namespace keel::emu
