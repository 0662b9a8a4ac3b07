// Cross-entropy on the GPU: the loss and its gradient against the CPU op at GPT-2's vocabulary,
// odd shapes, a padded vocabulary and ignored rows (tests/ops/test_ops_cuda.cpp's method); the
// fused classifier, whose forward writes the logits' gradient when told the loss's gradient
// (cross_entropy_fused_check.h), with the very bits of the two-pass path; and the z-loss and
// log Z's statistics against their f64 reference (cross_entropy_z_loss_check.h).
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "core/factory.h"
#include "cross_entropy_fused_check.h"
#include "cross_entropy_z_loss_check.h"
#include "cuda_compare.h"
#include "cuda_test.h"
#include "ops/cross_entropy.h"

using namespace keel;
using namespace keel::cudatest;

TEST_CASE("cuda cross_entropy at V 50257 with ignored rows") {
  KEEL_REQUIRE_CUDA();
  for (DType dt : kDtypes)
    for (DType it : {DType::i32, DType::i64}) {
      CAPTURE(std::string(dtype_name(dt)));
      Tensor logits = rnd({2, 4, 50257}, 80, 0.0, 2.0);
      std::vector<int64_t> t = ids_of({8}, 50257, 81).to_vector<int64_t>();
      t[3] = -100, t[6] = -100;
      Tensor targets = from_vector<int64_t>(t, {2, 4}, {it});
      // The loss is f32 for every dtype, so it is held to f32's 1e-5 against the f32 CPU op
      // fed the same rounded logits; the logits' gradient to dt's tolerance.
      compare([](const std::vector<Tensor>& a) { return cross_entropy(a[0], a[1]); }, {logits, targets}, dt, true,
              DType::f32);
      // Odd small shapes and a custom ignore_index.
      Tensor l2 = rnd({37, 1001}, 82);
      Tensor t2 = ids_of({37}, 1001, 83, it);
      compare([](const std::vector<Tensor>& a) { return cross_entropy(a[0], a[1], 5); }, {l2, t2}, dt, true,
              DType::f32);
      // Rows padded to 1024 columns of which 1001 are classes (the GPU's padded vocabulary):
      // the padding is read by neither device and its gradient is 0 on both.
      Tensor l3 = rnd({37, 1024}, 84);
      compare([](const std::vector<Tensor>& a) { return cross_entropy(a[0], a[1], kIgnoreIndex, 1001); },
              {l3, t2}, dt, true, DType::f32);
    }
  // Every row ignored: loss 0 and a zero gradient; a bad target raises IndexError.
  Tensor l = rnd({3, 10}, 84).to(kGpu).detach().set_requires_grad(true);
  Tensor all_ignored = from_vector<int64_t>({-100, -100, -100}, {3}).to(kGpu);
  Tensor loss = cross_entropy(l, all_ignored);
  CHECK(loss.item() == 0.0);
  loss.backward();
  for (float v : l.grad().to_vector<float>()) CHECK(v == 0.0f);
  // The kernel checks the targets (no read-back): the IndexError comes at the next host sync,
  // naming the target, its position and V; the row counts as ignored, so nothing reads past it.
  Tensor bad_loss = cross_entropy(l, from_vector<int64_t>({0, 10, 1}, {3}).to(kGpu));
  try {
    (void)bad_loss.item();
    FAIL("a target of 10 with V = 10 must raise IndexError");
  } catch (const IndexError& e) {
    const std::string msg = e.what();
    CHECK(msg.find("target 10 at position 1") != std::string::npos);
    CHECK(msg.find("V = 10") != std::string::npos);
  }
  CHECK(cross_entropy(l, from_vector<int64_t>({0, 9, 1}, {3}).to(kGpu)).item() > 0.0);  // the slot was cleared
  // A custom ignore_index inside [0, V) is ignored, not counted: the mean is over the other rows.
  const double two = cross_entropy(l, from_vector<int64_t>({0, 3, 1}, {3}).to(kGpu), 3).item();
  const double ref = cross_entropy(l.detach().to(Device::cpu()), from_vector<int64_t>({0, 3, 1}, {3}), 3).item();
  CHECK(two == doctest::Approx(ref).epsilon(1e-6));
  // No classes (V = 0): the CPU's ShapeError, before any kernel could read an unwritten row
  // loss; no rows but some classes: 0.
  for (DType dt : kDtypes) {
    CAPTURE(std::string(dtype_name(dt)));
    CHECK_THROWS_AS(cross_entropy(empty({3, 0}, {dt, kGpu}), all_ignored), ShapeError);
    CHECK_THROWS_AS(cross_entropy(empty({0, 0}, {dt, kGpu}), empty({0}, {DType::i64, kGpu})), ShapeError);
    CHECK(cross_entropy(empty({0, 7}, {dt, kGpu}), empty({0}, {DType::i32, kGpu})).item() == 0.0);
  }
}

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
