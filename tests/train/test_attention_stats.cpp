// `gpt2 attention-stats`: the statistics on attention matrices whose answers are known, and on a
// model with a local and a global head (infer/attention_stats.h).
#include <doctest/doctest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "apps/gpt2/infer/attention_stats.h"
#include "core/factory.h"

using namespace keel;
using namespace keel::app;

namespace {
// (T, T) from a function of (query, key); the future is 0.
std::vector<float> matrix(int64_t T, double (*p)(int64_t, int64_t)) {
  std::vector<float> m(size_t(T * T), 0.0f);
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = 0; j <= i; ++j) m[size_t(i * T + j)] = float(p(i, j));
  return m;
}
}  // namespace

TEST_CASE("attention statistics of matrices with known answers") {
  const int64_t T = 120;
  SUBCASE("every query on itself: nothing far, no spread, full rank") {
    const HeadStats s = head_stats(matrix(T, [](int64_t i, int64_t j) { return i == j ? 1.0 : 0.0; }), T);
    for (double v : s.share_beyond) CHECK(v == 0);
    CHECK(s.entropy == 0);
    CHECK(s.keys_90 == 1);
    CHECK(s.effective_rank == doctest::Approx(T));
  }
  SUBCASE("every query on the first token: all far, no spread, rank 1") {
    const HeadStats s = head_stats(matrix(T, [](int64_t, int64_t j) { return j == 0 ? 1.0 : 0.0; }), T);
    for (double v : s.share_beyond) CHECK(v == 1);  // rows i >= w put everything w or more back
    CHECK(s.entropy == 0);
    CHECK(s.keys_90 == 1);
    CHECK(s.effective_rank == doctest::Approx(1.0));
  }
  SUBCASE("uniform over the prefix") {
    const HeadStats s = head_stats(matrix(T, [](int64_t i, int64_t) { return 1.0 / double(i + 1); }), T);
    double entropy = 0, keys = 0, beyond50 = 0;
    for (int64_t i = 0; i < T; ++i) {
      entropy += std::log(double(i + 1));
      keys += std::ceil(0.9 * double(i + 1) - 1e-9);
      if (i >= 50) beyond50 += double(i - 50 + 1) / double(i + 1);
    }
    CHECK(s.entropy == doctest::Approx(entropy / T).epsilon(1e-5));
    CHECK(s.keys_90 == doctest::Approx(keys / T));
    CHECK(s.share_beyond[1] == doctest::Approx(beyond50 / double(T - 50)).epsilon(1e-5));
    CHECK(std::isnan(head_stats(matrix(40, [](int64_t i, int64_t) { return 1.0 / double(i + 1); }), 40)
                         .share_beyond[1]));  // T = 40: no query has a key 50 back
  }
}

TEST_CASE("attention statistics of a model: one entry per layer and head, local heads marked, JSON and SVG") {
  nn::GPT2Config c = nn::GPT2Config::preset("tiny");
  c.n_layer = 2, c.n_head = 2, c.n_embd = 16, c.block_size = 64, c.vocab_size = 50;
  c.attention = nn::AttentionKind::ls;
  c.ls_local_heads = 1, c.ls_window = 4;
  nn::GPT2 model(c, 3);
  std::vector<std::vector<int32_t>> seqs(3, std::vector<int32_t>(60));
  for (size_t s = 0; s < seqs.size(); ++s)
    for (size_t t = 0; t < 60; ++t) seqs[s][t] = int32_t((s * 7 + t * 3) % 50);
  const AttentionStats st = attention_stats(model, seqs);
  CHECK(st.sequences == 3);
  CHECK(st.seq_len == 60);
  REQUIRE(st.layers.size() == 2);
  for (const auto& layer : st.layers) {
    REQUIRE(layer.size() == 2);
    CHECK(layer[0].window == 4);
    CHECK(layer[1].window == 0);
    // A head of window 4 puts nothing 16 or more back; an untrained global head is near uniform.
    CHECK(layer[0].share_beyond[0] == 0);
    CHECK(layer[0].keys_90 <= 4);
    CHECK(layer[1].share_beyond[0] > 0.3);
    CHECK(layer[1].entropy > layer[0].entropy);
    CHECK(std::isnan(layer[1].share_beyond[2]));  // 60 tokens: nothing is 100 back
  }
  const auto j = nlohmann::json::parse(attention_stats_json(st));
  CHECK(j.at("layers").size() == 2);
  CHECK(j["layers"][0][0]["window"] == 4);
  CHECK(j["layers"][0][1]["share_beyond"]["100"] == "nan");
  CHECK(j["layers"][1][1]["effective_rank"].is_number());
  const std::string table = attention_stats_table(st);
  CHECK(table.find("local 4") != std::string::npos);
  CHECK(table.find("global") != std::string::npos);
  const std::string svg = attention_stats_svg(st, "t");
  CHECK(svg.find("effective rank") != std::string::npos);
  CHECK(svg.find("#f28e2b") != std::string::npos);  // a local bar
  CHECK_THROWS_AS(attention_stats(model, {}), ConfigError);
  CHECK_THROWS_AS(attention_stats(model, {std::vector<int32_t>(65, 1)}), ConfigError);  // beyond the context
  CHECK_THROWS_AS(attention_stats(model, {std::vector<int32_t>(5, 1), std::vector<int32_t>(6, 1)}), ConfigError);
}
