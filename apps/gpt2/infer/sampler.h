// Text generation: temperature and top-k sampling over a model's next-token logits, with the
// KV cache (nn/kv_cache.h) so each new token costs one position, not the whole text.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "apps/gpt2/run/seed.h"
#include "core/random.h"
#include "nn/gpt2.h"

namespace keel::app {

struct SampleOptions {
  int64_t max_new_tokens = 200;
  double temperature = 0.8;  // 0 = greedy (always the most likely token)
  int64_t top_k = 40;        // 0 = the whole vocabulary
  Seed seed = 0;
  int32_t stop_token = -1;   // stop after emitting this token (e.g. <|endoftext|>); -1 = never
  bool graph = true;         // on CUDA, decode replays a captured step (nn/decode_graph.h)
};

// One token from logits (V): softmax(logits / temperature) restricted to the top_k largest,
// drawn with a Philox uniform from gen (ops/sample.h's sample_top_k_host). generate() on a GPU
// draws the same way there, advancing gen as this does.
int32_t sample_token(const std::vector<float>& logits, double temperature, int64_t top_k, Generator& gen);

// Where the time of one generate() call went, for `gpt2 sample --stats`.
struct SampleStats {
  int64_t prompt_tokens = 0;   // fed at once (the prompt, cropped to the context)
  int64_t decode_steps = 0;    // single tokens fed after it (every new token but the last)
  double prefill_seconds = 0;  // the prompt, up to its first token on the host
  double decode_seconds = 0;   // every step after that, a restart of the cache included
  int64_t cache_bytes = 0;     // the KV cache at the end (KVCache::bytes)
};

// Continues `prompt` (non-empty) by up to max_new_tokens, calling on_token for each new one.
// The prompt is one prefill step (only its last position's logits are computed), then each
// token one decode step. When the text reaches the model's context length, the cache restarts
// from the last half of it (learned positions end at block_size). Returns the new tokens;
// fills *stats when given.
std::vector<int32_t> generate(nn::GPT2& model, const std::vector<int32_t>& prompt, const SampleOptions& opt,
                              const std::function<void(int32_t)>& on_token = {}, SampleStats* stats = nullptr);

}  // namespace keel::app
