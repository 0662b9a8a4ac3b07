// matmul and linear on the GPU (cuBLAS and cuBLASLt behind one op) against the CPU op, forward
// and backward, in f32, bf16 and f16: batched and broadcast operands, transposed and sliced
// views, GPT-2's shapes, biases, misaligned and 1-D inputs (tests/ops/test_ops_cuda.cpp's method).
#include <doctest/doctest.h>

#include <string>
#include <utility>
#include <vector>

#include "cuda_compare.h"
#include "cuda_test.h"
#include "ops/matmul.h"
#include "ops/shape.h"

using namespace keel;
using namespace keel::cudatest;

TEST_CASE("cuda matmul batched broadcast and transposed operands") {
  KEEL_REQUIRE_CUDA();
  const std::pair<Shape, Shape> cases[] = {{{5, 7}, {7, 3}},          {{4, 33, 17}, {4, 17, 29}}, {{2, 1, 5, 7}, {3, 7, 4}},
                                           {{6, 9}, {2, 9, 5}},       {{2, 3, 8, 16}, {16, 8}},   {{1, 1}, {1, 1}},
                                           {{3, 4, 0}, {3, 0, 5}}};
  for (DType dt : kDtypes)
    for (const auto& [sa, sb] : cases) {
      CAPTURE(std::string(dtype_name(dt)));
      CAPTURE(shape_str(sa));
      CAPTURE(shape_str(sb));
      compare([](const std::vector<Tensor>& t) { return matmul(t[0], t[1]); }, {rnd(sa, 90), rnd(sb, 91)}, dt,
              numel_of(sa) > 0);
    }
  for (DType dt : kDtypes) {
    CAPTURE(std::string(dtype_name(dt)));
    // a^T @ b and a @ b^T through transposed views, and a batch of transposes.
    compare([](const std::vector<Tensor>& t) { return matmul(transpose(t[0], 0, 1), t[1]); },
            {rnd({7, 5}, 92), rnd({7, 3}, 93)}, dt);
    compare([](const std::vector<Tensor>& t) { return matmul(t[0], transpose(t[1], -1, -2)); },
            {rnd({2, 5, 7}, 94), rnd({2, 3, 7}, 95)}, dt);
    compare([](const std::vector<Tensor>& t) { return matmul(slice(t[0], 1, 1, 8), t[1]); },
            {rnd({5, 9}, 96), rnd({7, 3}, 97)}, dt);
  }
}

TEST_CASE("cuda matmul and linear at GPT-2 shapes") {
  KEEL_REQUIRE_CUDA();
  // x (B*T rows, 768) against GPT-2's weights; fewer rows than training (B*T = 8192) to keep
  // the CPU reference quick, the same K and N.
  std::vector<std::pair<int64_t, int64_t>> kn = {{768, 2304}, {768, 3072}, {3072, 768}, {768, 768}};
  const bool reduced = keel::testing::reduced_sizes();  // under compute-sanitizer: one shape, no lm_head
  if (reduced) kn.resize(1);
  for (DType dt : kDtypes)
    for (const auto& [K, N] : kn) {
      CAPTURE(std::string(dtype_name(dt)));
      CAPTURE(K);
      CAPTURE(N);
      compare([](const std::vector<Tensor>& t) { return matmul(t[0], t[1]); }, {rnd({2, 128, K}, 100), rnd({K, N}, 101, 0, 0.05)},
              dt);
      compare([](const std::vector<Tensor>& t) { return linear(t[0], t[1], t[2]); },
              {rnd({2, 128, K}, 102), rnd({N, K}, 103, 0, 0.05), rnd({N}, 104)}, dt);
    }
  for (DType dt : {DType::bf16, DType::f32}) {  // lm_head: 768 -> 50257, no bias
    if (reduced) break;
    CAPTURE(std::string(dtype_name(dt)));
    compare([](const std::vector<Tensor>& t) { return linear(t[0], t[1]); },
            {rnd({64, 768}, 105), rnd({50257, 768}, 106, 0, 0.05)}, dt);
  }
}

TEST_CASE("cuda linear with and without bias, misaligned and 1-D inputs") {
  KEEL_REQUIRE_CUDA();
  for (DType dt : kDtypes) {
    CAPTURE(std::string(dtype_name(dt)));
    compare([](const std::vector<Tensor>& t) { return linear(t[0], t[1], t[2]); },
            {rnd({3, 5, 7}, 110), rnd({9, 7}, 111), rnd({9}, 112)}, dt);
    compare([](const std::vector<Tensor>& t) { return linear(t[0], t[1]); }, {rnd({7}, 113), rnd({9, 7}, 114)}, dt);
    // x sliced at an odd offset: cuBLASLt may refuse it; the fallback adds the bias then.
    compare([](const std::vector<Tensor>& t) { return linear(slice(t[0], 1, 1, 65), t[1], t[2]); },
            {rnd({16, 65}, 115), rnd({33, 64}, 116), rnd({33}, 117)}, dt);
    compare([](const std::vector<Tensor>& t) { return linear(transpose(t[0], 0, 1), t[1], t[2]); },
            {rnd({64, 16}, 118), rnd({33, 64}, 119), rnd({33}, 120)}, dt);
  }
}
