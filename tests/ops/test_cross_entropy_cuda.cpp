// The fused classifier on the GPU: cross_entropy's forward writes the logits' gradient when told
// the loss's gradient (cross_entropy_fused_check.h), with the very bits of the two-pass path.
#include <doctest/doctest.h>

#include "cross_entropy_fused_check.h"
#include "cuda_test.h"

using namespace keel;

TEST_CASE("cuda cross_entropy with expected_grad: the forward's gradient, same bits, promise checked on the device") {
  KEEL_REQUIRE_CUDA();
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) cross_entropy_test::check_fused(Device::cuda(0), dt);
}
