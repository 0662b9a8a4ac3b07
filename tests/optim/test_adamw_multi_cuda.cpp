// The multi-tensor AdamW step and gradient scale (a launch per 48 tensors) against the
// per-tensor kernels they replaced: the same bits in every parameter, moment and master weight
// over several steps, for mixed dtypes, odd sizes, an empty tensor and more than one table;
// and the launch count that is their point. Skipped without a GPU.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/cuda/counters.h"
#include "core/factory.h"
#include "cuda_test.h"
#include "ops/arith.h"
#include "ops/reduce.h"
#include "optim/adamw.h"
#include "optim/clip.h"
#include "optim/cuda/adamw.h"
#include "optim/grad_math.h"

using namespace keel;
using namespace keel::optim;

namespace {
const Device kGpu = Device::cuda(0);

// a, b (any shape, same dtype) -> whether every element has the same bits (exact in f64).
bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  const std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  return x.empty() || std::memcmp(x.data(), y.data(), x.size() * sizeof(double)) == 0;  // memcmp: no null pointers
}

// 103 parameters (three tables of 48): every dtype, 1-D (not decayed) and 2-D (decayed), sizes
// from 1 element to several thousand, one of 0 elements.
NamedTensors parameters(uint64_t seed) {
  Generator gen(seed);
  const DType dtypes[] = {DType::bf16, DType::f32, DType::f16, DType::f64, DType::bf16};
  NamedTensors out;
  for (int i = 0; i < 103; ++i) {
    const int64_t n = i == 9 ? 0 : (int64_t(i) * 7919) % 2500 + 1;
    const Shape shape = i % 3 == 0 ? Shape{n} : Shape{n, 3};
    out.emplace_back("p" + std::to_string(i), randn(shape, gen, {dtypes[i % 5]}).to(kGpu));
  }
  return out;
}

// p (any shape) -> a gradient: f32 for every other half parameter (as zero_grad makes them), else p's dtype.
Tensor gradient(const Tensor& p, int i, Generator& gen) {
  const bool half = p.dtype() == DType::bf16 || p.dtype() == DType::f16;
  return randn(p.shape(), gen, {half && i % 2 ? DType::f32 : p.dtype()}).to(kGpu);
}
}  // namespace

TEST_CASE("the multi-tensor AdamW step is bit-identical to the per-tensor kernel over several steps") {
  KEEL_REQUIRE_CUDA();
  NamedTensors params = parameters(41), ref = parameters(41);
  const AdamWOptions opt{.lr = 3e-3, .weight_decay = 0.1};
  AdamW multi(params, opt);
  struct Slot { Tensor m, v, master; };
  std::vector<Slot> slots;
  for (auto& [name, p] : ref) {
    const DType md = p.dtype() == DType::f64 ? DType::f64 : DType::f32;
    const bool half = p.dtype() == DType::bf16 || p.dtype() == DType::f16;
    slots.push_back({zeros(p.shape(), {md, kGpu}), zeros(p.shape(), {md, kGpu}), half ? p.to(DType::f32) : Tensor()});
  }
  Generator gen(42);
  for (int step = 1; step <= 4; ++step) {
    for (size_t i = 0; i < params.size(); ++i) {
      Tensor g = gradient(params[i].second, int(i), gen);
      params[i].second.set_grad(g);
      AdamWScalars s;
      s.beta1 = opt.beta1, s.beta2 = opt.beta2, s.eps = opt.eps;
      s.decay = ref[i].second.dim() >= 2 ? 1.0 - opt.lr * opt.weight_decay : 1.0;
      s.step_size = opt.lr / (1.0 - std::pow(opt.beta1, step));
      s.bc2_sqrt = std::sqrt(1.0 - std::pow(opt.beta2, step));
      Tensor p = ref[i].second.detach();
      optim::cuda::adamw_step(p, g, slots[i].m, slots[i].v, slots[i].master, s);
    }
    multi.step();
  }
  const NamedTensors state = multi.state();
  size_t k = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    CAPTURE(params[i].first);
    CHECK(same_bits(params[i].second, ref[i].second));
    CHECK(same_bits(state[k++].second, slots[i].m));
    CHECK(same_bits(state[k++].second, slots[i].v));
    if (slots[i].master.defined()) CHECK(same_bits(state[k++].second, slots[i].master));
    ++k;  // the parameter's step count
  }
}

TEST_CASE("an AdamW step makes a launch per 48 tensors of a dtype pair, and no host wait") {
  KEEL_REQUIRE_CUDA();
  Generator gen(43);
  NamedTensors params;
  for (int i = 0; i < 148; ++i) params.emplace_back("p" + std::to_string(i), randn({i % 7 + 1, 5}, gen, {DType::bf16}).to(kGpu));
  AdamW opt(params, {});
  for (auto& [name, p] : params) p.set_grad(zeros(p.shape(), {DType::f32, kGpu}));  // f32, as in training
  const keel::cuda::Counters before = keel::cuda::counters();
  opt.step();
  const keel::cuda::Counters d = keel::cuda::counters() - before;
  CHECK(d.syncs == 0);
  CHECK(d.operations() <= (148 + 47) / 48 + 2);
}

TEST_CASE("zero_grad launches nothing, and a bf16 gradient reaches its f32 buffer in one launch, written then added") {
  KEEL_REQUIRE_CUDA();
  Generator gen(45);
  Tensor w = randn({3, 5}, gen, {DType::bf16}).to(kGpu).set_requires_grad(true);
  AdamW opt({{"w", w}}, {});
  opt.zero_grad();  // makes the buffer (one allocation, no fill)
  Tensor g1 = randn({3, 5}, gen, {DType::bf16}).to(kGpu), g2 = randn({3, 5}, gen, {DType::bf16}).to(kGpu);
  auto backward_of = [&](const Tensor& g) {
    Tensor y = mul(w, 1.0);  // dy/dw = 1: w's gradient is g, in bf16
    y.backward(g);
  };
  for (int round = 0; round < 2; ++round) {
    keel::cuda::Counters before = keel::cuda::counters();
    opt.zero_grad();
    CHECK((keel::cuda::counters() - before).operations() == 0);
    CHECK_FALSE(w.grad().defined());
    backward_of(g1);
    REQUIRE(w.grad().defined());
    CHECK(w.grad().dtype() == DType::f32);
    CHECK(same_bits(w.grad(), g1.to(DType::f32)));  // written, not added to last round's sum
    before = keel::cuda::counters();
    AccumulateGrad(w.impl_ptr()).backward(g2);  // the engine's accumulation alone
    CHECK((keel::cuda::counters() - before).operations() == 1);
    CHECK(same_bits(w.grad(), add(g1.to(DType::f32), g2.to(DType::f32))));  // f32 sum of the widened values
  }
}

TEST_CASE("the multi-tensor gradient scale is bit-identical to scale_ per tensor, in a launch per 48 tensors") {
  KEEL_REQUIRE_CUDA();
  NamedTensors a = parameters(44), b = parameters(44);
  std::vector<Tensor> grads;
  for (auto& [name, p] : a) grads.push_back(p);
  const keel::cuda::Counters before = keel::cuda::counters();
  scale_all_(grads, 0.37);
  const keel::cuda::Counters d = keel::cuda::counters() - before;
  CHECK(d.operations() == (103 + 47) / 48);
  for (size_t i = 0; i < a.size(); ++i) {
    CAPTURE(a[i].first);
    Tensor t = b[i].second;
    scale_(t, 0.37);
    CHECK(same_bits(a[i].second, t));
  }
  // Clipping scales every gradient in that one pass: the readback's zeroing, the norm's 2 per
  // table and its ordered sum, then the scale's 1 per table (it was 1 per gradient).
  std::vector<Tensor> ps;
  for (auto& [name, p] : b) {
    p.set_grad(p.detach().clone());
    ps.push_back(p);
  }
  const keel::cuda::Counters c0 = keel::cuda::counters();
  clip_grad_norm(ps, 1e-3);
  const keel::cuda::Counters dc = keel::cuda::counters() - c0;
  CHECK(dc.syncs == 1);
  CHECK(dc.launches <= 1 + 2 * 3 + 1 + 3);
}

TEST_CASE("AdamW::step(lr, c) takes the step of scale_all_(grads, c) then step(lr), bit for bit, every dtype") {
  // The clip's factor applied as the step reads each gradient (no pass of its own) must round
  // each gradient as the scale pass would have left it: f32 for f32/bf16/f16, f64 for f64.
  KEEL_REQUIRE_CUDA();
  NamedTensors fused = parameters(46), scaled = parameters(46);
  const AdamWOptions opt{.lr = 3e-3, .weight_decay = 0.1};
  AdamW a(fused, opt), b(scaled, opt);
  Generator gen(47);
  for (int step = 1; step <= 3; ++step) {
    const double c = step == 2 ? 1.0 : 0.3 / step;  // 1: the unclipped step
    std::vector<Tensor> grads;
    for (size_t i = 0; i < fused.size(); ++i) {
      Tensor g = gradient(fused[i].second, int(i), gen);
      fused[i].second.set_grad(g.clone());
      scaled[i].second.set_grad(g);
      grads.push_back(g);
    }
    const keel::cuda::Counters before = keel::cuda::counters();
    a.step(3e-3, c);
    CHECK((keel::cuda::counters() - before).operations() <= 8);  // the multi-tensor launches alone
    scale_all_(grads, c);
    b.step(3e-3);
  }
  const NamedTensors sa = a.state(), sb = b.state();
  for (size_t i = 0; i < fused.size(); ++i) {
    CAPTURE(fused[i].first);
    CHECK(same_bits(fused[i].second, scaled[i].second));
  }
  REQUIRE(sa.size() == sb.size());
  for (size_t i = 0; i < sa.size(); ++i) {
    CAPTURE(sa[i].first);
    CHECK(same_bits(sa[i].second, sb[i].second));
  }
  CHECK_THROWS_AS(a.step(3e-3, 0.0), ValueError);
  CHECK_THROWS_AS(a.step(3e-3, std::nan("")), ValueError);
}
