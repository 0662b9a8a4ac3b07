// docs/ops.md, "The shape": the front end's one dispatch line picks the kernel of the device.
#include <doctest/doctest.h>

#include "core/factory.h"
#include "ops/cpu/gelu.h"
#include "ops/cuda/gelu.h"
#include "ops/gelu.h"

TEST_CASE("docs/ops.md: one dispatch line") {
  using namespace keel;
  Tensor x = from_vector<float>({-1, 0, 2}, {3}), xf = x;
  // snippet-begin
  Tensor yf = x.device().is_cuda() ? cuda::gelu_forward(xf) : cpu::gelu_forward(xf);
  // snippet-end
  CHECK(yf.to_vector<float>() == gelu(x).to_vector<float>());
}
