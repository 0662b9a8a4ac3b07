// The host side of the planted device-branch bug: mul_add compiled as host code.
#include "planted_rounding.h"

namespace keel::planted {

float host_mul_add(float a, float b, float c) { return mul_add<false>(a, b, c); }

}  // namespace keel::planted
