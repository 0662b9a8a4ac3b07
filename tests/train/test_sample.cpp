// Sampling: greedy and top-k choices, the distribution it draws from, and seeded generation.
#include <doctest/doctest.h>

#include <cmath>

#include "apps/gpt2/infer/sampler.h"

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
