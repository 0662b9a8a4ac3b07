// keel against Hugging Face transformers, without either of PyTorch or transformers: a tiny
// random GPT-2 saved in HF's exact layout (tests/nn/data/hf_tiny/, and hf_tiny_legacy/ with the
// original openai-community/gpt2 names: no "transformer." prefix, attn.bias mask buffers), and
// the logits and loss GPT2LMHeadModel computes on it, evaluated in float64 by
// tests/nn/data/make_hf_fixture.py (see there to regenerate; numpy is only the fixture maker).
//
// Tolerances: keel runs in f32, the reference is f64 from the same f32 weights. Logits are of
// order 1 (|max| ~ 3.3); f32 rounding through two blocks leaves ~1e-6 (measured: 8.8e-7, 1.3e-6
// through the KV cache). The bound, 2e-5 absolute, leaves room for any summation order (BLAS,
// threads, CUDA) yet catches the subtle mistakes: erf GELU instead of gelu_new moves the logits
// by 5.9e-4, LayerNorm eps 1e-6 instead of 1e-5 by 3.7e-4; a transposed Conv1D weight or a
// wrong head split / scale moves them by more than 1. The loss (a mean of 30 terms ~5) is
// checked to 1e-5 relative.
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/autograd.h"
#include "core/factory.h"
#include "nn/hf.h"
#include "ops/shape.h"

using namespace keel;
using namespace keel::nn;

namespace {

constexpr double kLogitTol = 2e-5;
const std::string kData = std::string(KEEL_SOURCE_DIR) + "/tests/nn/data/";

struct Expected {
  int64_t B = 0, T = 0, V = 0;
  std::vector<int64_t> ids;    // (B, T)
  std::vector<double> logits;  // (B, T, V)
  double loss = 0;
};

Expected read_expected(const std::string& dir) {
  std::ifstream f(dir + "/expected.json");
  REQUIRE(f.good());
  nlohmann::json j = nlohmann::json::parse(f);
  Expected e;
  e.B = j["shape"][0], e.T = j["shape"][1], e.V = j["shape"][2];
  for (const auto& row : j["ids"])
    for (const auto& id : row) e.ids.push_back(id.get<int64_t>());
  e.logits = j["logits"].get<std::vector<double>>();
  e.loss = j["loss"].get<double>();
  REQUIRE(static_cast<int64_t>(e.ids.size()) == e.B * e.T);
  REQUIRE(static_cast<int64_t>(e.logits.size()) == e.B * e.T * e.V);
  return e;
}

// HF's labels=ids, expressed as keel targets aligned with ids: position t predicts ids[t + 1],
// the last position has nothing to predict (-100, ignored).
Tensor hf_targets(const Expected& e) {
  std::vector<int64_t> t(e.ids.size());
  for (int64_t b = 0; b < e.B; ++b)
    for (int64_t i = 0; i < e.T; ++i) t[b * e.T + i] = i + 1 < e.T ? e.ids[b * e.T + i + 1] : -100;
  return from_vector<int64_t>(t, {e.B, e.T});
}

double max_abs_diff(const std::vector<float>& got, const std::vector<double>& want, size_t offset = 0) {
  double m = 0;
  for (size_t i = 0; i < got.size(); ++i) m = std::max(m, std::abs(double(got[i]) - want[offset + i]));
  return m;
}

}  // namespace

TEST_CASE("load_pretrained on an HF GPT-2 directory matches the transformers reference logits and loss") {
  NoGradGuard no_grad;
  const std::string dir = kData + "hf_tiny";
  const Expected e = read_expected(dir);
  std::unique_ptr<GPT2> m = load_pretrained(dir);
  CHECK(m->config().vocab_size == e.V);
  CHECK(m->config().block_size == e.T);
  CHECK(m->config().tie_embeddings);
  // config.json carries HF's dropout 0.1; load_pretrained returns the model in eval mode, as
  // transformers' from_pretrained does, so forward() is deterministic.
  CHECK(m->config().dropout == doctest::Approx(0.1));
  CHECK_FALSE(m->training());

  const Tensor ids = from_vector<int64_t>(e.ids, {e.B, e.T});
  GPT2Output out = m->forward(ids, hf_targets(e));
  REQUIRE(out.logits.shape() == Shape{e.B, e.T, e.V});
  const std::vector<float> logits = out.logits.to_vector<float>();
  const double diff = max_abs_diff(logits, e.logits);
  double spread = 0;
  for (double v : e.logits) spread = std::max(spread, std::abs(v));
  MESSAGE("max |logit - reference| = " << diff << " (|logit| up to " << spread << ")");
  CHECK(spread > 1.0);  // a meaningful test: the reference logits are far from uniform
  CHECK(diff < kLogitTol);

  const double loss = out.loss.to_vector<float>()[0];
  MESSAGE("loss " << loss << " vs reference " << e.loss << ", relative diff " << std::abs(loss - e.loss) / e.loss);
  CHECK(std::abs(loss - e.loss) <= 1e-5 * e.loss);
}

TEST_CASE("the legacy HF layout (no prefix, attn.bias buffers) gives the same reference logits") {
  NoGradGuard no_grad;
  const std::string dir = kData + "hf_tiny_legacy";
  const Expected e = read_expected(dir);
  std::unique_ptr<GPT2> legacy = load_pretrained(dir);  // config without tie_word_embeddings / n_inner
  std::unique_ptr<GPT2> modern = load_pretrained(kData + "hf_tiny");
  CHECK(legacy->config() == modern->config());
  legacy->eval(), modern->eval();

  const Tensor ids = from_vector<int64_t>(e.ids, {e.B, e.T});
  GPT2Output out = legacy->forward(ids, hf_targets(e));
  const std::vector<float> logits = out.logits.to_vector<float>();
  CHECK(max_abs_diff(logits, e.logits) < kLogitTol);
  CHECK(std::abs(out.loss.to_vector<float>()[0] - e.loss) <= 1e-5 * e.loss);
  // Same weights, same code: bit-identical to the prefixed directory.
  CHECK(logits == modern->forward(ids).logits.to_vector<float>());
}

TEST_CASE("generation with the KV cache reproduces the reference logits token by token") {
  NoGradGuard no_grad;
  const std::string dir = kData + "hf_tiny";
  const Expected e = read_expected(dir);
  std::unique_ptr<GPT2> m = load_pretrained(dir);
  m->eval();
  const Tensor ids = from_vector<int64_t>(e.ids, {e.B, e.T});
  KVCache cache = m->make_cache();
  // A 5-token prompt, then one token at a time up to the full context.
  int64_t p = 0;
  double worst = 0;
  while (p < e.T) {
    const int64_t t = p == 0 ? 5 : 1;
    const std::vector<float> got = m->forward_cached(slice(ids, 1, p, p + t).contiguous(), cache).to_vector<float>();
    REQUIRE(static_cast<int64_t>(got.size()) == e.B * t * e.V);
    for (int64_t b = 0; b < e.B; ++b)
      for (int64_t i = 0; i < t; ++i)
        for (int64_t v = 0; v < e.V; ++v)
          worst = std::max(worst, std::abs(double(got[(b * t + i) * e.V + v]) - e.logits[(b * e.T + p + i) * e.V + v]));
    p += t;
  }
  CHECK(cache.length() == e.T);
  MESSAGE("cached generation: max |logit - reference| = " << worst);
  CHECK(worst < kLogitTol);
}
