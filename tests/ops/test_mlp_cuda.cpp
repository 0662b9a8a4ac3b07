// mlp on CUDA against the CPU's linear(linear_gelu(...)) (tests/ops/cuda_compare.h: f32, bf16,
// f16, the same rounded inputs, outputs poisoned, the worst row's relative error), on the fused
// backward (c_proj's input gradient and the GELU's derivative in one cublasLtMatmul, epilogue
// DGELU) and on the fallback (the product, then gelu's backward kernel), each told apart by the
// launches it makes. f32 always takes the fallback, as linear_gelu's forward: keel's f32 is exact
// (ops/cuda/linear_gelu.cu). On the emulated GPU this runs the emulated cuBLASLt's DGELU; on a
// GPU it checks that cuBLASLt's derivative is that of keel's tanh GELU to bf16's and f16's
// tolerance.
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "core/autograd.h"
#include "core/cuda/counters.h"
#include "cuda_compare.h"
#include "cuda_test.h"
#include "ops/linear_gelu.h"
#include "ops/matmul.h"
#include "ops/mlp.h"
#include "ops/shape.h"

using namespace keel;
using namespace keel::cudatest;

namespace {

// t = {x (..., C), fc_w (H, C), fc_b (H), proj_w (D, H), proj_b (D)} -> (..., D)
Tensor one_op(const std::vector<Tensor>& t) { return mlp(t[0], t[1], t[2], t[3], t[4]); }

// The launches and library calls of one backward of mlp on the device in dtype dt, every input
// requiring a gradient; inputs on the CPU in f32.
cuda::Counters backward_counts(const std::vector<Tensor>& host, DType dt) {
  std::vector<Tensor> in;
  for (const Tensor& t : host) in.push_back(t.to(kGpu).to(dt).set_requires_grad(true));
  Shape ys = host[0].shape();
  ys.back() = host[3].size(0);
  const Tensor r = rnd(ys, 300).to(kGpu).to(dt);
  one_op(in).backward(r);  // warm: the cuBLAS(Lt) handles and the allocator's blocks
  for (Tensor& t : in) t.zero_grad();
  Tensor y = one_op(in);
  const cuda::Counters before = cuda::counters();
  y.backward(r);
  return cuda::counters() - before;
}

}  // namespace

TEST_CASE("cuda mlp against the CPU: GPT-2's shape and odd ones, fused backward and fallback") {
  KEEL_REQUIRE_CUDA();
  struct Case {
    Shape x;
    int64_t H, D;
  };
  // H a multiple of 8 (the DGELU epilogue's aux matrix's leading dimension) but for the last,
  // which takes the fallback in every dtype; odd rows and widths elsewhere.
  std::vector<Case> cases = {{{3, 5, 13}, 24, 13}, {{37, 9}, 40, 11}, {{2, 32, 64}, 256, 64}, {{6, 7}, 36, 7}};
  if (!keel::testing::reduced_sizes()) cases.push_back({{2, 64, 768}, 3072, 768});  // GPT-2 124M's MLP, 128 rows
  for (DType dt : kDtypes)
    for (const Case& c : cases) {
      CAPTURE(std::string(dtype_name(dt)));
      CAPTURE(shape_str(c.x));
      CAPTURE(c.H);
      const int64_t C = c.x.back();
      compare(one_op,
              {rnd(c.x, 310), rnd({c.H, C}, 311, 0.0, 1.0 / std::sqrt(double(C))), rnd({c.H}, 312),
               rnd({c.D, c.H}, 313, 0.0, 1.0 / std::sqrt(double(c.H))), rnd({c.D}, 314)},
              dt);
    }
}

TEST_CASE("cuda mlp backward: the GELU's derivative rides in c_proj's input gradient, no kernel of its own") {
  KEEL_REQUIRE_CUDA();
  for (DType dt : kDtypes) {
    CAPTURE(std::string(dtype_name(dt)));
    const std::vector<Tensor> in = {rnd({4, 6, 32}, 320), rnd({128, 32}, 321, 0.0, 0.2), rnd({128}, 322),
                                    rnd({32, 128}, 323, 0.0, 0.1), rnd({32}, 324)};
    const cuda::Counters d = backward_counts(in, dt);
    INFO(d.summary());
    // c_proj's dweight, d(pre) (DGELU epilogue, or the product then gelu's kernel in f32), c_fc's
    // dx and dweight; the two bias gradients are reductions.
    CHECK(d.library_calls == 4);
    CHECK(d.launches == (dt == DType::f32 ? 3 : 2));
    // H = 36: no aux matrix can have that leading dimension, so every dtype takes the fallback.
    const std::vector<Tensor> odd = {rnd({4, 6, 32}, 325), rnd({36, 32}, 326, 0.0, 0.2), rnd({36}, 327),
                                     rnd({32, 36}, 328, 0.0, 0.1), rnd({32}, 329)};
    CHECK(backward_counts(odd, dt).launches == 3);
  }
}

TEST_CASE("cuda mlp in f32 is linear(linear_gelu(...)) on the device bit for bit") {
  KEEL_REQUIRE_CUDA();
  std::vector<Tensor> a, b;
  for (const Tensor& t : {rnd({3, 8, 16}, 330), rnd({64, 16}, 331, 0.0, 0.3), rnd({64}, 332),
                          rnd({16, 64}, 333, 0.0, 0.2), rnd({16}, 334)}) {
    a.push_back(t.to(kGpu).set_requires_grad(true));
    b.push_back(t.to(kGpu).set_requires_grad(true));
  }
  const Tensor r = rnd({3, 8, 16}, 335).to(kGpu);
  Tensor ya = one_op(a), yb = linear(linear_gelu(b[0], b[1], b[2]), b[3], b[4]);
  CHECK(ya.to_vector<float>() == yb.to_vector<float>());
  ya.backward(r), yb.backward(r);
  for (size_t i = 0; i < a.size(); ++i) {
    CAPTURE(i);
    CHECK(a[i].grad().to_vector<float>() == b[i].grad().to_vector<float>());
  }
}
