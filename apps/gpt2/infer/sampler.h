// Text generation: temperature and top-k sampling over a model's next-token logits, with the
// KV cache (nn/kv_cache.h) so each new token costs one position, not the whole text.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "apps/gpt2/train/seed.h"
#include "core/random.h"
#include "nn/gpt2.h"

namespace keel::app {

struct SampleOptions {
  int64_t max_new_tokens = 200;
  double temperature = 0.8;  // 0 = greedy (always the most likely token)
  int64_t top_k = 40;        // 0 = the whole vocabulary
  Seed seed = 0;
  int32_t stop_token = -1;   // stop after emitting this token (e.g. <|endoftext|>); -1 = never
};

// One token from logits (V): softmax(logits / temperature) restricted to the top_k largest,
// drawn with a Philox uniform from gen.
int32_t sample_token(const std::vector<float>& logits, double temperature, int64_t top_k, Generator& gen);

// Continues `prompt` (non-empty) by up to max_new_tokens, calling on_token for each new one.
// When the text reaches the model's context length, the cache restarts from the last half of
// it (learned positions end at block_size). Returns the new tokens.
std::vector<int32_t> generate(nn::GPT2& model, const std::vector<int32_t>& prompt, const SampleOptions& opt,
                              const std::function<void(int32_t)>& on_token = {});

}  // namespace keel::app
