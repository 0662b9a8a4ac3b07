// linear_gelu on CUDA against the CPU's gelu(linear(...)) (tests/ops/cuda_compare.h: f32, bf16,
// f16, the same rounded inputs, outputs poisoned, the worst row's relative error), on the fused
// path (one cublasLtMatmul with the GELU epilogue, and the pre-activation as its aux output when
// a gradient is wanted) and on the fallback (linear then gelu), each forced by the operands and
// told apart by the launches it makes. f32 always takes the fallback: the epilogue's GELU is not
// exact enough for f32's parity (ops/cuda/linear_gelu.cu). On the emulated GPU this runs the
// emulated cuBLASLt's GELU epilogues; on a GPU it checks that cuBLASLt's GELU is keel's tanh form
// to bf16's and f16's tolerance.
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "core/autograd.h"
#include "core/cuda/counters.h"
#include "cuda_compare.h"
#include "cuda_test.h"
#include "ops/linear_gelu.h"
#include "ops/shape.h"

using namespace keel;
using namespace keel::cudatest;

namespace {

// t = {x (..., K), weight (N, K)[, bias (N)]} -> (..., N)
Tensor fused(const std::vector<Tensor>& t) { return linear_gelu(t[0], t[1], t.size() > 2 ? t[2] : Tensor()); }

// x (..., K), w (N, K), b (N), on the CPU in f32 -> the launches and library calls of one forward
// of linear_gelu on the device in dtype dt (w requiring a gradient when `grad`).
cuda::Counters forward_counts(const Tensor& x, const Tensor& w, const Tensor& b, DType dt, bool grad) {
  Tensor xd = x.to(kGpu).to(dt), wd = w.to(kGpu).to(dt), bd = b.to(kGpu).to(dt);
  if (grad) wd.set_requires_grad(true);
  (void)linear_gelu(xd, wd, bd);  // warm: the cuBLAS(Lt) handles and the allocator's blocks
  const cuda::Counters before = cuda::counters();
  (void)linear_gelu(xd, wd, bd);
  return cuda::counters() - before;
}

}  // namespace

TEST_CASE("cuda linear_gelu against the CPU, fused: odd rows and in-features, with and without bias") {
  KEEL_REQUIRE_CUDA();
  struct Case {
    Shape x;
    int64_t N;
    bool bias;
  };
  // N a multiple of 8 (the aux matrix's leading dimension must be), everything else odd.
  std::vector<Case> cases = {{{3, 5, 13}, 24, true}, {{7}, 16, true}, {{37, 9}, 40, false}, {{2, 32, 64}, 256, true}};
  if (!keel::testing::reduced_sizes()) cases.push_back({{2, 64, 768}, 3072, true});  // GPT-2 124M's c_fc, 128 rows
  for (DType dt : kDtypes)
    for (const Case& c : cases) {
      CAPTURE(std::string(dtype_name(dt)));
      CAPTURE(shape_str(c.x));
      CAPTURE(c.N);
      CAPTURE(c.bias);
      const int64_t K = c.x.back();
      std::vector<Tensor> in = {rnd(c.x, 200), rnd({c.N, K}, 201, 0.0, 1.0 / std::sqrt(double(K)))};
      if (c.bias) in.push_back(rnd({c.N}, 202));
      // With a gradient: GELU_AUX(_BIAS). A single row (x 1-D) is forward only, in every dtype:
      // each row of its weight gradient is one d(pre) element times x, with no sum to dilute it,
      // and d(pre) = dout gelu'(pre) has no relative error bound near gelu's minimum (gelu' = 0
      // at -0.75, where its two terms, each ~0.22, cancel). Two correct f32 evaluations (the
      // CPU's vectorized exp, the device's tanhf) differ there by any relative amount, and so do
      // the dtype-rounded pre-activations of bf16 and f16. In the batched cases each row is a sum
      // over the rows of x, and they hold the same gradient to the tolerance.
      compare(fused, in, dt, /*backward=*/c.x.size() > 1);
      compare(fused, in, dt, /*backward=*/false);  // without: GELU(_BIAS), no aux
    }
}

TEST_CASE("cuda linear_gelu against the CPU on the fallback: odd N, a misaligned bias, a transposed x") {
  KEEL_REQUIRE_CUDA();
  for (DType dt : kDtypes) {
    CAPTURE(std::string(dtype_name(dt)));
    // N = 9: no aux matrix can have that leading dimension, so with a gradient it is linear then
    // gelu; without one the epilogue needs no aux and stays fused.
    const std::vector<Tensor> odd = {rnd({5, 7}, 210), rnd({9, 7}, 211, 0.0, 0.4), rnd({9}, 212)};
    compare(fused, odd, dt);
    compare(fused, odd, dt, /*backward=*/false);
    // A bias one element into its buffer: off the 16 bytes the epilogue reads it in.
    compare([](const std::vector<Tensor>& t) { return linear_gelu(t[0], t[1], slice(t[2], 0, 1, 17)); },
            {rnd({6, 11}, 213), rnd({16, 11}, 214, 0.0, 0.3), rnd({17}, 215)}, dt);
    // x column-major: cuBLASLt is handed row-major operands only.
    compare([](const std::vector<Tensor>& t) { return linear_gelu(transpose(t[0], 0, 1), t[1], t[2]); },
            {rnd({12, 10}, 216), rnd({16, 12}, 217, 0.0, 0.3), rnd({16}, 218)}, dt);
  }
}

TEST_CASE("cuda linear_gelu: the fused path is one library call and no kernel, the fallback adds gelu's") {
  KEEL_REQUIRE_CUDA();
  for (DType dt : kDtypes) {
    CAPTURE(std::string(dtype_name(dt)));
    const Tensor x = rnd({4, 6, 32}, 220), w = rnd({64, 32}, 221, 0.0, 0.2), b = rnd({64}, 222);
    for (bool grad : {true, false}) {
      CAPTURE(grad);
      const cuda::Counters f = forward_counts(x, w, b, dt, grad);
      CHECK(f.library_calls == 1);
      CHECK(f.launches == (dt == DType::f32 ? 1 : 0));  // f32: linear, then keel's gelu kernel
      CHECK(f.copies == 0);
    }
    // N = 36, not a multiple of 8, with a gradient: linear (the bias in its epilogue), then gelu.
    const Tensor w36 = narrow(w, 0, 0, 36).contiguous(), b36 = narrow(b, 0, 0, 36).contiguous();
    const cuda::Counters u = forward_counts(x, w36, b36, dt, true);
    CHECK(u.library_calls == 1);
    CHECK(u.launches == 1);
  }
}

TEST_CASE("cuda linear_gelu backward: gelu's backward kernel on the saved pre-activation, then linear's") {
  KEEL_REQUIRE_CUDA();
  Tensor x = rnd({3, 8, 16}, 230).to(kGpu), w = rnd({32, 16}, 231, 0.0, 0.3).to(kGpu), b = rnd({32}, 232).to(kGpu);
  x.set_requires_grad(true), w.set_requires_grad(true), b.set_requires_grad(true);
  Tensor y = linear_gelu(x, w, b);
  REQUIRE(y.grad_fn() != nullptr);
  CHECK(std::string(y.grad_fn()->name()) == "LinearGeluBackward");
  const Tensor r = rnd({3, 8, 32}, 233).to(kGpu);
  const cuda::Counters before = cuda::counters();
  y.backward(r);
  const cuda::Counters d = cuda::counters() - before;
  INFO(d.summary());
  CHECK(d.library_calls == 2);  // dx and dweight
  CHECK(d.launches >= 2);       // d(pre), then the bias gradient's reduction
}
