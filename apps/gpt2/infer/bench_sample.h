// Generation latency, measured (`gpt2 bench-sample`, docs/inference.md): the time to prefill a
// prompt of P tokens, the per-token decode latency (median and p90) with the KV cache at several
// context lengths, the KV cache's bytes and the peak tensor memory, at several batch sizes, for
// one model under the names of its attention variants (MHSA and LS-attention of one shape).
//
// Decode is timed after fill_random (nn/kv_cache.h) has given the cache a text's worth of random
// keys and values: a step costs the same whatever they are, and an 8k-token prefill per batch
// and context would take minutes on a CPU. The prefill is timed on its own, and after it
// `check_tokens` greedy tokens are generated for real and recorded, so another implementation
// fed the same weights and prompt (apps/bench/bench_sample.py) can show it computes the same model.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/profiler.h"
#include "nn/gpt2.h"

namespace keel::app {

struct BenchSampleOptions {
  std::vector<int64_t> contexts{512, 1024, 2048, 4096, 8192};  // cache lengths decode is timed at
  std::vector<int64_t> batch_sizes{1, 8};
  int64_t prompt_tokens = 1024;  // P, the prefill's prompt
  int64_t prefill_reps = 3;      // prefills timed per batch size (median)
  int64_t steps = 20;            // decode steps timed per (batch, context)
  int64_t warmup = 3;            // untimed steps before them
  int64_t check_tokens = 8;      // greedy tokens recorded after the prompt
  uint64_t seed = 0;             // the prompt's ids and the random cache
  bool graph = true;             // on CUDA, decode replays a captured step (nn/decode_graph.h)
  // Eager decode steps profiled per (batch, context) after the timed ones (0: none): per op and
  // token, launches, bytes and time (CUDA events on a GPU, a prediction for profile_gpu on the
  // emulated GPU; core/profiler.h). Eager because a replayed graph is one operation.
  int64_t profile = 0;
  std::string profile_gpu = "H100";
};

// One measurement, one JSON object (the schema is in docs/inference.md).
using BenchRecord = nlohmann::ordered_json;

// The prompt: P token ids below V from a fixed Philox stream (the text does not change the time).
std::vector<int32_t> bench_prompt(int64_t P, int64_t V, uint64_t seed);

// Times `model` (on its device, in its dtype) under the name `variant`: per batch size, one
// "prefill" record, then one "decode" record per context, each handed to emit as it is measured.
// With o.profile, the decode record also holds the profile of the profiled steps ("profile",
// core/profiler.h's JSON), and `profiled` (when given) gets it first, to print its table.
// ConfigError when a context or the prompt does not fit the model's context length.
void bench_sample(nn::GPT2& model, const std::string& variant, const BenchSampleOptions& o,
                  const std::function<void(const BenchRecord&)>& emit,
                  const std::function<void(const BenchRecord&, const profiler::Profile&)>& profiled = nullptr);

// The records as text tables: prefill per variant and batch; decode per batch and context with
// a column per variant, and LS against MHSA (speed-up and KV-cache ratio) when both are there.
std::string bench_sample_table(const std::vector<BenchRecord>& records);

}  // namespace keel::app
