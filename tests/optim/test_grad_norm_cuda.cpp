// The gradient norm over many tensors in a few launches (optim::sum_of_squares_into) against the
// loop it replaced, sum_of_squares per tensor added on the host in list order: the same bits on
// the (emulated) GPU, since bit-exact resume and world-size independence rest on that sum; and
// one host wait for any number of tensors. Skipped without a GPU.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/cuda/counters.h"
#include "core/factory.h"
#include "cuda_test.h"
#include "ops/shape.h"
#include "optim/clip.h"
#include "optim/grad_math.h"
#include "optim/step_readback.h"

using namespace keel;
using namespace keel::optim;

namespace {
bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// 100 tensors (more than one launch's table of 48) of every gradient dtype, sizes from 1 element
// to past the 512 blocks of 256 where the partial count stops growing, one empty, one strided.
std::vector<Tensor> gradients(Device dev) {
  Generator gen(31);
  std::vector<Tensor> out;
  const DType dtypes[] = {DType::f32, DType::bf16, DType::f16, DType::f64};
  for (int i = 0; i < 100; ++i) {
    const int64_t n = i == 7 ? 0 : i == 50 ? 140000 : (int64_t(i) * 7919) % 3000 + 1;
    out.push_back(randn({n}, gen, {dtypes[i % 4]}).to(dev));
  }
  out.push_back(transpose(randn({40, 30}, gen, {DType::f32}).to(dev), 0, 1));  // not contiguous
  return out;
}
}  // namespace

TEST_CASE("the multi-tensor sum of squares is bit-identical to the per-tensor loop, on the GPU and the CPU") {
  KEEL_REQUIRE_CUDA();
  for (Device dev : {Device::cuda(0), Device::cpu()}) {
    CAPTURE(dev.str());
    const std::vector<Tensor> ts = gradients(dev);
    double loop = 0;
    for (const Tensor& t : ts) loop += sum_of_squares(t);
    Tensor out = zeros({3}, {DType::f64, dev});
    sum_of_squares_into(ts, out, 1);
    const std::vector<double> got = out.to_vector<double>();
    CHECK(same_bits(got[1], loop));
    CHECK(got[0] == 0.0);  // the other slots untouched
    CHECK(got[2] == 0.0);
  }
}

TEST_CASE("the gradient norm reads the GPU once, with the readback's other slots") {
  KEEL_REQUIRE_CUDA();
  const Device dev = Device::cuda(0);
  std::vector<Tensor> params;
  double loop = 0;
  for (const Tensor& g : gradients(dev)) {
    Tensor p = zeros(g.shape(), {g.dtype(), dev});
    p.set_grad(g);
    params.push_back(p);
    loop += sum_of_squares(g);
  }
  StepReadback rb(dev, 4);
  rb.add_quotient(1, from_vector<float>({3.0f}, {}).to(dev), 4.0);
  rb.add_quotient(1, from_vector<float>({5.0f}, {}).to(dev), 4.0);
  rb.merge_max(2, from_vector<float>({1.0f, 7.0f}, {2}).to(dev));
  rb.merge_max(2, from_vector<float>({NAN, 2.0f}, {2}).to(dev));
  rb.merge_max(2, from_vector<float>({9.0f, 3.0f}, {2}).to(dev));  // NaN stays: it wins every merge
  const cuda::Counters before = cuda::counters();
  const double norm = grad_norm(params, &rb);
  const cuda::Counters d = cuda::counters() - before;
  CHECK(d.syncs == 1);
  // 101 tensors, 100 non-empty: 3 tables of up to 48, then the ordered sum; and the transposed one packed.
  CHECK(d.launches + d.copies == 2 * 3 + 1 + 1);
  CHECK(same_bits(norm, std::sqrt(loop)));
  const std::vector<double> host = rb.read();  // already on the host
  CHECK((cuda::counters() - before).syncs == 1);
  CHECK(same_bits(host[0], loop));
  CHECK(host[1] == 3.0 / 4.0 + 5.0 / 4.0);
  CHECK(std::isnan(host[2]));
  CHECK(host[3] == 7.0);
  CHECK(same_bits(grad_norm(params), norm));  // without a readback: the same bits
}

TEST_CASE("a readback refuses slots it does not have and values from another device") {
  KEEL_REQUIRE_CUDA();
  StepReadback rb(Device::cuda(0), 2);
  CHECK_THROWS_AS(rb.merge_max(1, zeros({2}, {DType::f32, Device::cuda(0)})), ShapeError);
  CHECK_THROWS_AS(rb.add_quotient(0, zeros({}, {DType::f32}), 1.0), DeviceError);
  CHECK_THROWS_AS(rb.add_quotient(0, zeros({2}, {DType::f32, Device::cuda(0)}), 1.0), ShapeError);
  CHECK_THROWS_AS(StepReadback(Device::cuda(0), 0), ValueError);
}
