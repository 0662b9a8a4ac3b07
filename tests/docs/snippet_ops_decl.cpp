// docs/ops.md, "gelu, file by file": the kernel declarations as printed there are the ones in
// ops/cpu/gelu.h and ops/cuda/gelu.h (a redeclaration must agree, and taking each function's
// address fails to compile if a differing overload crept in).
#include <doctest/doctest.h>

#include <type_traits>

#include "ops/cpu/gelu.h"
#include "ops/cuda/gelu.h"

namespace keel::cpu {
// snippet-begin
// x (N) contiguous -> (N)
Tensor gelu_forward(const Tensor& x);
// grad, x (N) contiguous -> dx (N) = grad * gelu'(x)
Tensor gelu_backward(const Tensor& grad, const Tensor& x);
// snippet-end
}  // namespace keel::cpu

TEST_CASE("docs/ops.md: the gelu kernels are declared as printed, on both devices") {
  using keel::Tensor;
  static_assert(std::is_same_v<decltype(&keel::cpu::gelu_forward), Tensor (*)(const Tensor&)>);
  static_assert(std::is_same_v<decltype(&keel::cuda::gelu_forward), Tensor (*)(const Tensor&)>);
  static_assert(std::is_same_v<decltype(&keel::cpu::gelu_backward), Tensor (*)(const Tensor&, const Tensor&)>);
  static_assert(std::is_same_v<decltype(&keel::cuda::gelu_backward), Tensor (*)(const Tensor&, const Tensor&)>);
  CHECK(true);  // the checks above are at compile time
}
