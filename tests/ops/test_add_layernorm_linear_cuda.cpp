// add_layernorm_linear on CUDA: the fused decode kernel against the CPU's composition
// (add_layernorm or layernorm, then linear or linear_gelu; tests/ops/cuda_compare.h: f32, bf16,
// f16, the same rounded inputs, outputs poisoned, the worst row's relative error) for 1 to 8 rows,
// packed and scalar widths, with and without y, biases and GELU; at the largest shapes it takes
// (its 48 KB of shared memory full); and when it is one launch (few rows, no gradient) and when
// it is the composition's ops.
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "core/autograd.h"
#include "core/cuda/counters.h"
#include "cuda_compare.h"
#include "cuda_test.h"
#include "ops/add_layernorm_linear.h"
#include "ops/cuda/add_layernorm_linear.h"
#include "ops/shape.h"

using namespace keel;
using namespace keel::cudatest;

namespace {

// t = {x, y, ln_weight, ln_bias, weight, bias}; an empty tensor (numel 0, shape {0}) stands for an
// undefined one -> h and out side by side along the last dim
Tensor run(const std::vector<Tensor>& t, bool gelu) {
  auto opt = [](const Tensor& a) { return a.numel() == 0 ? Tensor() : a; };
  const AddLayerNormLinear r = add_layernorm_linear(t[0], opt(t[1]), t[2], opt(t[3]), 1e-5, t[4], opt(t[5]), gelu);
  return concat({r.h, r.out}, -1);
}

}  // namespace

TEST_CASE("cuda add_layernorm_linear against the CPU's add_layernorm then linear, fused for a decode step's rows") {
  KEEL_REQUIRE_CUDA();
  NoGradGuard no_grad;
  struct Case {
    Shape x;
    int64_t N;
  };
  // Packed rows (C 192, 64) and scalar ones (C 13); 1, 3 and 8 rows (8: the most it takes);
  // N of the paper model's c_attn and c_fc, an odd one, and the lm_head's vocabulary.
  const Case cases[] = {{{1, 1, 192}, 576}, {{3, 1, 192}, 768}, {{8, 64}, 37}, {{2, 13}, 300}, {{1, 1, 64}, 5000}};
  for (DType dt : kDtypes)
    for (const Case& c : cases)
      for (int variant = 0; variant < 4; ++variant) {
        const bool residual = variant & 1, biases = variant & 2;
        CAPTURE(std::string(dtype_name(dt)));
        CAPTURE(shape_str(c.x));
        CAPTURE(c.N);
        CAPTURE(variant);
        const int64_t C = c.x.back();
        const Tensor none = zeros({0});
        const std::vector<Tensor> in = {rnd(c.x, 80, 0.5, 2.0),
                                        residual ? rnd(c.x, 81) : none,
                                        rnd({C}, 82, 1.0, 0.3),
                                        biases ? rnd({C}, 83) : none,
                                        rnd({c.N, C}, 84, 0.0, 1.0 / std::sqrt(double(C))),
                                        biases ? rnd({c.N}, 85) : none};
        for (bool gelu : {false, true}) {
          CAPTURE(gelu);
          compare([gelu](const std::vector<Tensor>& t) { return run(t, gelu); }, in, dt, /*backward=*/false);
        }
      }
}

TEST_CASE("cuda add_layernorm_linear: one launch and no library call for a decode step, the composition otherwise") {
  KEEL_REQUIRE_CUDA();
  for (DType dt : kDtypes) {
    CAPTURE(std::string(dtype_name(dt)));
    auto counts = [&](int64_t rows, bool grad) {
      Tensor x = rnd({rows, 64}, 90).to(kGpu).to(dt), y = rnd({rows, 64}, 91).to(kGpu).to(dt);
      Tensor lw = rnd({64}, 92, 1.0, 0.2).to(kGpu).to(dt), w = rnd({128, 64}, 93, 0.0, 0.1).to(kGpu).to(dt);
      if (grad) w.set_requires_grad(true);
      (void)add_layernorm_linear(x, y, lw, Tensor(), 1e-5, w, Tensor());  // warm: handles and blocks
      const cuda::Counters before = cuda::counters();
      const AddLayerNormLinear r = add_layernorm_linear(x, y, lw, Tensor(), 1e-5, w, Tensor());
      CHECK(r.out.requires_grad() == grad);
      return cuda::counters() - before;
    };
    const cuda::Counters fused = counts(8, false), rows9 = counts(9, false), grad = counts(4, true);
    CHECK(fused.launches == 1);
    CHECK(fused.library_calls == 0);
    CHECK(rows9.launches == 1);  // add_layernorm's kernel, then cuBLAS
    CHECK(rows9.library_calls == 1);
    CHECK(grad.launches == 1);
    CHECK(grad.library_calls == 1);
  }
}

TEST_CASE("cuda add_layernorm_linear at its largest shapes: 48 KB of dynamic shared memory and no static, one launch") {
  KEEL_REQUIRE_CUDA();
  NoGradGuard no_grad;
  // 2 M C sizeof(T) = 49152 bytes, all a kernel may have without cudaFuncSetAttribute: f32 C 768 at
  // 8 rows (GPT-2 124M decoding a batch of 8 in f32), C 1024 at 6, C 1536 at 4, bf16/f16 C 1536 at 8.
  // A byte of static shared memory beside them fails the launch on a GPU (the emulated one too).
  struct Case {
    DType dt;
    int64_t M, C;
  };
  const Case cases[] = {{DType::f32, 8, 768},   {DType::f32, 6, 1024}, {DType::f32, 4, 1536},
                        {DType::bf16, 8, 1536}, {DType::f16, 8, 1536}};
  for (const Case& c : cases) {
    CAPTURE(std::string(dtype_name(c.dt)));
    CAPTURE(c.M);
    CAPTURE(c.C);
    REQUIRE(2 * c.M * c.C * int64_t(dtype_size(c.dt)) == 48 << 10);
    CHECK(cuda::add_layernorm_linear_fits(c.M, c.C, c.dt));
    CHECK_FALSE(cuda::add_layernorm_linear_fits(c.M, c.C + 8, c.dt));  // one pack more: the composition
    const int64_t N = 24;
    const std::vector<Tensor> in = {rnd({c.M, c.C}, 120, 0.5, 2.0), rnd({c.M, c.C}, 121), rnd({c.C}, 122, 1.0, 0.3),
                                    rnd({c.C}, 123), rnd({N, c.C}, 124, 0.0, 1.0 / std::sqrt(double(c.C))),
                                    rnd({N}, 125)};
    compare([](const std::vector<Tensor>& t) { return run(t, true); }, in, c.dt, /*backward=*/false);
    std::vector<Tensor> dev;
    for (const Tensor& t : in) dev.push_back(t.to(kGpu).to(c.dt));
    const cuda::Counters before = cuda::counters();
    (void)add_layernorm_linear(dev[0], dev[1], dev[2], dev[3], 1e-5, dev[4], dev[5]);
    const cuda::Counters used = cuda::counters() - before;
    CHECK(used.launches == 1);
    CHECK(used.library_calls == 0);
  }
}
