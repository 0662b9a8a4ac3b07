// A host-and-device helper for the planted device-branch bug (planted_classes.cu): a b + c, each
// operation rounded on its own, as the host computes it. The device spells its roundings out
// with intrinsics (nvcc would fuse the product into the sum otherwise, as optim/adamw_math.h
// explains); kFused is the planted bug, a fused multiply-add where the host rounds twice. The
// emulated GPU compiles the device branch, so the two compilations meet in one program
// (planted_classes.cu is device code, planted_rounding.cpp host code).
#pragma once

#include "core/host_device.h"

namespace keel::planted {

KEEL_BEGIN_DEVICE_VARIANT

template <bool kFused>
KEEL_HD inline float mul_add(float a, float b, float c) {
#if KEEL_DEVICE_CODE
  if constexpr (kFused) return __fmaf_rn(a, b, c);
  else return __fadd_rn(__fmul_rn(a, b), c);
#else
  volatile float product = a * b;  // rounded here: the host compiler would fuse it into the sum too
  return product + c;
#endif
}

KEEL_END_DEVICE_VARIANT

// The host compilation's mul_add (planted_rounding.cpp).
float host_mul_add(float a, float b, float c);

}  // namespace keel::planted
