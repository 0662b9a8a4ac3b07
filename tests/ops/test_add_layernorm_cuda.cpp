// add_layernorm on CUDA against the CPU's x + y then layernorm (tests/ops/cuda_compare.h: f32,
// bf16, f16, the same rounded inputs, outputs poisoned, the worst row's relative error), with the
// loss on h, on out, or on both (the fused backward's dx_add path); packed rows (C * size a
// multiple of 16) and scalar ones (odd C), with and without bias; and the launches it saves.
#include <doctest/doctest.h>

#include <string>

#include "core/autograd.h"
#include "core/cuda/counters.h"
#include "cuda_compare.h"
#include "cuda_test.h"
#include "ops/add_layernorm.h"
#include "ops/arith.h"
#include "ops/layernorm.h"
#include "ops/shape.h"

using namespace keel;
using namespace keel::cudatest;

namespace {

// t = {x, y (..., C), weight (C)[, bias (C)]} -> the bias, or undefined
Tensor bias_of(const std::vector<Tensor>& t) { return t.size() > 3 ? t[3] : Tensor(); }

}  // namespace

TEST_CASE("cuda add_layernorm against the CPU: h, out and both, packed and scalar rows, with and without bias") {
  KEEL_REQUIRE_CUDA();
  // {4, 768}, {2, 32, 64}, {300, 64}: 16-byte packs in every dtype; {3, 5, 13}, {7, 37}, {9}: odd C.
  std::vector<Shape> shapes = {{4, 768}, {3, 5, 13}, {7, 37}, {9}, {2, 32, 64}, {300, 64}};
  for (DType dt : kDtypes)
    for (const Shape& s : shapes)
      for (bool with_bias : {true, false}) {
        CAPTURE(std::string(dtype_name(dt)));
        CAPTURE(shape_str(s));
        CAPTURE(with_bias);
        const int64_t C = s.back();
        std::vector<Tensor> in = {rnd(s, 60, 1.0, 2.0), rnd(s, 61), rnd({C}, 62, 1.0, 0.3)};
        if (with_bias) in.push_back(rnd({C}, 63));
        // Both outputs side by side: the backward sends h's half of the gradient to the residual
        // node and out's half to layernorm's, which adds the first into dx.
        compare(
            [](const std::vector<Tensor>& t) {
              AddLayerNorm a = add_layernorm(t[0], t[1], t[2], bias_of(t));
              return concat({a.h, a.out}, -1);
            },
            in, dt);
        compare([](const std::vector<Tensor>& t) { return add_layernorm(t[0], t[1], t[2], bias_of(t)).out; }, in, dt);
        compare([](const std::vector<Tensor>& t) { return add_layernorm(t[0], t[1], t[2], bias_of(t)).h; }, in, dt);
        compare([](const std::vector<Tensor>& t) { return add_layernorm(t[0], t[1], t[2], bias_of(t)).out; }, in, dt,
                /*backward=*/false);
      }
}

TEST_CASE("cuda add_layernorm: one launch forward, and two operations fewer backward than x + y then layernorm") {
  KEEL_REQUIRE_CUDA();
  for (DType dt : kDtypes) {
    CAPTURE(std::string(dtype_name(dt)));
    const Tensor x0 = rnd({6, 64}, 70).to(kGpu).to(dt), y0 = rnd({6, 64}, 71).to(kGpu).to(dt),
                 w = rnd({64}, 72).to(kGpu).to(dt), b = rnd({64}, 73).to(kGpu).to(dt), r = rnd({6, 64}, 74).to(kGpu).to(dt);
    // fused or not -> the counters of the forward and of the backward of h + out, as a block uses them
    auto counts = [&](bool fused) {
      Tensor x = x0.detach(), y = y0.detach();
      x.set_requires_grad(true), y.set_requires_grad(true);
      const cuda::Counters before = cuda::counters();
      Tensor h, out;
      if (fused) {
        AddLayerNorm a = add_layernorm(x, y, w, b);
        h = a.h, out = a.out;
      } else {
        h = x + y;
        out = layernorm(h, w, b);
      }
      const cuda::Counters forward = cuda::counters() - before;
      Tensor z = h + out;
      const cuda::Counters mid = cuda::counters();
      z.backward(r);
      return std::pair{forward, cuda::counters() - mid};
    };
    (void)counts(true), (void)counts(false);  // warm: the allocator's blocks
    const auto [ff, fb] = counts(true);
    const auto [uf, ub] = counts(false);
    MESSAGE(ff.summary() << " / " << uf.summary() << "; " << fb.summary() << " / " << ub.summary());
    CHECK(ff.operations() == 1);
    CHECK(uf.operations() == 2);
    // Unfused, the engine summed h's two gradients with a copy and an add; fused, the sum is
    // taken in layernorm's dx kernel.
    CHECK(fb.operations() == ub.operations() - 2);
  }
}
