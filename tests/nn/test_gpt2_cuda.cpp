// The model's training forward on the CUDA device against the CPU: on a GPU the output layer runs
// over the vocabulary padded to a multiple of 128 (nn/gpt2.cpp), which must change nothing a
// user sees: the logits are (B, T, V), the loss and every gradient are the CPU's (f32, 1e-5),
// tied or not.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "core/factory.h"
#include "cuda_test.h"
#include "decode_check.h"
#include "nn/gpt2.h"
#include "ops/cross_entropy.h"

using namespace keel;
using namespace keel::nn;

namespace {
// The worst row's relative error (design.md, section 6): max over rows of the last dim of
// ||got - want|| / ||want||, so one wrong row cannot hide in a norm over the whole tensor.
double worst_row_err(const Tensor& got, const Tensor& want) {
  const std::vector<double> a = got.to_vector<double>(), b = want.to_vector<double>();
  const size_t n = static_cast<size_t>(want.size(-1));
  double worst = 0;
  for (size_t r = 0; r < b.size(); r += n) {
    double num = 0, den = 0;
    for (size_t i = r; i < r + n; ++i) num += (a[i] - b[i]) * (a[i] - b[i]), den += b[i] * b[i];
    worst = std::max(worst, den > 0 ? std::sqrt(num / den) : std::sqrt(num));
  }
  return worst;
}
}  // namespace

TEST_CASE("padded_vocab: a multiple of 128 on a GPU, unchanged on the CPU") {
  CHECK(padded_vocab(50257, Device::cuda(0)) == 50304);  // as llm.c
  CHECK(padded_vocab(50304, Device::cuda(0)) == 50304);
  CHECK(padded_vocab(40, Device::cuda(0)) == 128);
  CHECK(padded_vocab(50257, Device::cpu()) == 50257);
}

TEST_CASE("CUDA GPT-2 forward and backward over the padded vocabulary equal the CPU's") {
  KEEL_REQUIRE_CUDA();
  for (bool tied : {true, false}) {
    CAPTURE(tied);
    GPT2Config c = GPT2Config::preset("tiny");
    c.n_layer = 2, c.n_head = 2, c.n_embd = 64, c.block_size = 16, c.vocab_size = 40;  // 40 -> 128 on the GPU
    c.tie_embeddings = tied;
    const int64_t B = 2, T = 12;
    std::vector<int32_t> targets = nn::testing::decode_tokens(B, T, 40);
    targets[5] = static_cast<int32_t>(kIgnoreIndex);
    const Tensor ids = from_vector(nn::testing::decode_tokens(B, T, 40), {B, T});
    const Tensor tg = from_vector(targets, {B, T});

    GPT2 cpu_model(c, 5), gpu_model(c, 5);
    gpu_model.to(Device::cuda(0));
    GPT2Output want = cpu_model.forward(ids, tg);
    GPT2Output got = gpu_model.forward(ids.to(Device::cuda(0)), tg.to(Device::cuda(0)));
    CHECK(got.logits.shape() == Shape{B, T, 40});
    CHECK(worst_row_err(got.logits, want.logits) < 1e-5);
    CHECK(got.loss.item() == doctest::Approx(want.loss.item()).epsilon(1e-6));
    want.loss.backward();
    got.loss.backward();
    const NamedTensors pc = cpu_model.named_parameters(), pg = gpu_model.named_parameters();
    REQUIRE(pc.size() == pg.size());
    for (size_t i = 0; i < pc.size(); ++i) {
      CAPTURE(pc[i].first);
      REQUIRE(pg[i].second.grad().defined());
      CHECK(pg[i].second.grad().shape() == pc[i].second.grad().shape());  // (V, C): no padded rows
      CHECK(worst_row_err(pg[i].second.grad(), pc[i].second.grad()) < 1e-5);
    }
  }
}
