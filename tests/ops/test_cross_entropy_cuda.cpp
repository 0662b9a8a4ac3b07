// The fused classifier on the GPU: cross_entropy's forward writes the logits' gradient when told
// the loss's gradient (cross_entropy_fused_check.h), with the very bits of the two-pass path; and
// the z-loss and log Z's statistics against their f64 reference (cross_entropy_z_loss_check.h).
#include <doctest/doctest.h>

#include "cross_entropy_fused_check.h"
#include "cross_entropy_z_loss_check.h"
#include "cuda_test.h"

using namespace keel;

TEST_CASE("cuda cross_entropy with expected_grad: the forward's gradient, same bits, promise checked on the device") {
  KEEL_REQUIRE_CUDA();
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) cross_entropy_test::check_fused(Device::cuda(0), dt);
}

TEST_CASE("cuda cross_entropy z-loss: the fused pass writes its gradient too, same bits") {
  KEEL_REQUIRE_CUDA();
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) cross_entropy_test::check_fused(Device::cuda(0), dt, 1e-3);
}

TEST_CASE("cuda cross_entropy z-loss: loss, gradient and log Z against an f64 reference, every dtype") {
  KEEL_REQUIRE_CUDA();
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) z_loss_test::check_z_loss(Device::cuda(0), dt);
  z_loss_test::check_log_z_edges(Device::cuda(0));
}
