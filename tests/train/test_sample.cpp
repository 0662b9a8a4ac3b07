// Sampling: greedy and top-k choices, the distribution it draws from, and seeded generation.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "apps/gpt2/infer/bench_sample.h"
#include "apps/gpt2/infer/sampler.h"
#include "core/autograd.h"
#include "core/factory.h"

using namespace keel;
using namespace keel::app;

TEST_CASE("temperature 0 and top-k 1 are greedy") {
  std::vector<float> logits{0.1f, 2.0f, -1.0f, 1.9f};
  Generator g(1);
  CHECK(sample_token(logits, 0.0, 0, g) == 1);
  for (int i = 0; i < 20; ++i) CHECK(sample_token(logits, 1.5, 1, g) == 1);
  CHECK_THROWS_AS(sample_token(logits, -1.0, 0, g), ValueError);
}

TEST_CASE("sampling follows softmax(logits / temperature) within the top k") {
  std::vector<float> logits{0.0f, std::log(2.0f), std::log(3.0f), -20.0f};
  Generator g(7);
  std::vector<int> counts(4, 0);
  const int n = 60000;
  for (int i = 0; i < n; ++i) ++counts[sample_token(logits, 1.0, 3, g)];
  CHECK(counts[3] == 0);  // outside the top 3
  CHECK(counts[0] / double(n) == doctest::Approx(1.0 / 6).epsilon(0.05));
  CHECK(counts[1] / double(n) == doctest::Approx(2.0 / 6).epsilon(0.05));
  CHECK(counts[2] / double(n) == doctest::Approx(3.0 / 6).epsilon(0.05));
}

TEST_CASE("generation is reproducible from a seed and runs past the context length") {
  nn::GPT2Config c = nn::GPT2Config::preset("tiny");
  c.n_layer = 1;
  c.n_embd = 32;
  c.n_head = 2;
  c.block_size = 16;
  c.vocab_size = 40;
  c.attention = nn::AttentionKind::ls;
  c.ls_local_heads = 1;
  c.ls_window = 4;
  nn::GPT2 model(c, 5);
  SampleOptions o;
  o.max_new_tokens = 50;  // more than block_size: the cache restarts from a cropped context
  o.temperature = 1.0;
  o.seed = 11;
  auto a = generate(model, {1, 2, 3}, o);
  auto b = generate(model, {1, 2, 3}, o);
  CHECK(a.size() == 50);
  CHECK(a == b);
  o.seed = 12;
  CHECK(generate(model, {1, 2, 3}, o) != a);
  CHECK_THROWS_AS(generate(model, {}, o), ValueError);
  CHECK_THROWS_AS(generate(model, {99}, o), ValueError);
}

namespace {
nn::GPT2Config bench_model(nn::AttentionKind kind) {
  nn::GPT2Config c = nn::GPT2Config::preset("tiny");
  c.n_layer = 2, c.n_embd = 32, c.n_head = 4, c.block_size = 40, c.vocab_size = 60;
  c.attention = kind, c.ls_local_heads = 3, c.ls_window = 4;
  return c;
}
}  // namespace

TEST_CASE("greedy generation is the argmax of the full forward pass, and its stats add up") {
  for (nn::AttentionKind kind : {nn::AttentionKind::mhsa, nn::AttentionKind::ls}) {
    nn::GPT2 model(bench_model(kind), 9);
    SampleOptions o;
    o.max_new_tokens = 12;
    o.temperature = 0;
    SampleStats st;
    const std::vector<int32_t> prompt{5, 6, 7, 8, 9};
    const std::vector<int32_t> got = generate(model, prompt, o, {}, &st);
    REQUIRE(got.size() == 12);
    // Recompute: the whole text through forward(), the argmax at each position.
    std::vector<int32_t> text = prompt;
    text.insert(text.end(), got.begin(), got.end());
    NoGradGuard no_grad;
    const std::vector<float> l =
        model.forward(from_vector(text, {1, int64_t(text.size())})).logits.to_vector<float>();
    for (size_t i = 0; i < got.size(); ++i) {
      const auto row = l.begin() + (prompt.size() - 1 + i) * 60;
      CHECK(got[i] == std::max_element(row, row + 60) - row);
    }
    CHECK(st.prompt_tokens == 5);
    CHECK(st.decode_steps == 11);
    CHECK(st.prefill_seconds >= 0);
    CHECK(st.decode_seconds >= 0);
    CHECK(st.cache_bytes > 0);
  }
}

TEST_CASE("bench_sample: a prefill record per batch, a decode record per context, greedy tokens as generate's") {
  nn::GPT2 mhsa(bench_model(nn::AttentionKind::mhsa), 3), ls(bench_model(nn::AttentionKind::ls), 3);
  BenchSampleOptions o;
  o.contexts = {6, 20};
  o.batch_sizes = {1, 3};
  o.prompt_tokens = 10;
  o.steps = 3;
  o.warmup = 1;
  o.prefill_reps = 2;
  o.check_tokens = 5;
  std::vector<BenchRecord> records;
  bench_sample(mhsa, "mhsa", o, [&](const BenchRecord& r) { records.push_back(r); });
  bench_sample(ls, "ls", o, [&](const BenchRecord& r) { records.push_back(r); });
  REQUIRE(records.size() == 2 * 2 * 3);
  SampleOptions greedy;
  greedy.max_new_tokens = 5;
  greedy.temperature = 0;
  const std::vector<int32_t> want = generate(mhsa, bench_prompt(10, 60, 0), greedy);
  int64_t ls_kv = 0, mhsa_kv = 0;
  for (const BenchRecord& r : records) {
    CAPTURE(r.dump());
    if (r["phase"] == "prefill") {
      CHECK(r["seconds"].get<double>() > 0);
      if (r["variant"] == "mhsa") CHECK(r["greedy"].get<std::vector<int32_t>>() == want);  // every batch row is the prompt
    } else {
      CHECK(r["ms"].get<double>() > 0);
      CHECK(r["ms_p90"].get<double>() >= r["ms"].get<double>());
      if (r["context"] == 20 && r["B"] == 1) (r["variant"] == "ls" ? ls_kv : mhsa_kv) = r["kv_bytes"].get<int64_t>();
    }
  }
  // 1 global head of 4 keeps 24 slots (20 + 4 steps), 3 local heads a ring of 4; MHSA 4 x 24.
  CHECK(mhsa_kv == 2 * 2 * 4 * 24 * 8 * 4);
  CHECK(ls_kv == 2 * 2 * (24 + 3 * 4) * 8 * 4);
  const std::string table = bench_sample_table(records);
  CHECK(table.find("ls speed-up") != std::string::npos);
  o.contexts = {40};
  CHECK_THROWS_AS(bench_sample(mhsa, "mhsa", o, [](const BenchRecord&) {}), ConfigError);
}
