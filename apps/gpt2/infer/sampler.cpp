#include "apps/gpt2/infer/sampler.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <numeric>

#include "core/autograd.h"
#include "core/factory.h"
#include "nn/decode_graph.h"
#include "ops/sample.h"
#include "ops/shape.h"

namespace keel::app {

int32_t sample_token(const std::vector<float>& logits, double temperature, int64_t top_k, Generator& gen) {
  const int64_t V = static_cast<int64_t>(logits.size());
  if (V == 0) throw ValueError("sample", "empty logits");
  if (temperature < 0 || !std::isfinite(temperature))
    throw ValueError("sample", "temperature " + std::to_string(temperature) + " must be >= 0");
  // Draw first, so the generator advances the same way whatever the branch.
  const uint64_t key = gen.seed(), base = gen.advance(1);
  return int32_t(sample_top_k_host(logits.data(), V, temperature, top_k, philox_uniform(key, base, 0)));
}

std::vector<int32_t> generate(nn::GPT2& model, const std::vector<int32_t>& prompt, const SampleOptions& opt,
                              const std::function<void(int32_t)>& on_token, SampleStats* stats) {
  if (prompt.empty()) throw ValueError("sample", "the prompt has no tokens", "start from <|endoftext|>");
  NoGradGuard no_grad;
  model.eval();
  const int64_t ctx = model.config().block_size, V = model.config().vocab_size;
  const Device device = model.named_parameters().front().second.device();
  for (int32_t id : prompt)
    if (id < 0 || id >= V)
      throw ValueError("sample", "prompt token " + std::to_string(id) + " is outside the vocabulary of " + std::to_string(V));
  Generator gen(opt.seed);
  std::vector<int32_t> text = prompt, out;
  SampleStats st;
  // The whole text fits the context: room for all of it now, so no step grows the cache.
  nn::KVCache cache = model.make_cache(int64_t(prompt.size()) + opt.max_new_tokens);
  // Feeds `ids` after what the cache holds; returns the logits of the last position. One new
  // token goes up as a kernel's argument (a fill), not as a copy the host must wait for: a
  // decode step then synchronises once, to read its logits.
  auto feed = [&](const std::vector<int32_t>& ids) {
    Tensor ids_t = ids.size() == 1 ? full({1, 1}, double(ids[0]), {DType::i64, device})
                                   : from_vector(ids, {1, int64_t(ids.size())}).to(device);
    return model.forward_cached(ids_t, cache, nn::GPT2::Logits::last);
  };
  // On a GPU a decode step replays one captured CUDA graph; the token goes up in a fill there too.
  std::unique_ptr<nn::DecodeGraph> graph;
  if (opt.graph && device.is_cuda()) graph = std::make_unique<nn::DecodeGraph>(model);
  auto decode = [&](int32_t id) {
    if (!graph) return feed({id});
    return graph->step(id, cache).logits;
  };
  // On a GPU the token is drawn there (ops/sample.h) and only its id comes back: a step's one
  // wait. A top_k the kernel does not keep reads the logits and draws on the host.
  const bool draw_on_device = device.is_cuda() && sample_candidates(V, opt.temperature, opt.top_k) <= kMaxDeviceTopK;
  Tensor drawn = draw_on_device ? empty({1}, {DType::i64, device}) : Tensor();  // one id, reused: no allocation per token
  auto draw = [&](const Tensor& logits) {  // (1, 1, V)
    if (!draw_on_device) return sample_token(logits.to(DType::f32).to_vector<float>(), opt.temperature, opt.top_k, gen);
    const uint64_t key = gen.seed(), base = gen.advance(1);
    sample_top_k_into(logits, opt.temperature, opt.top_k, key, base, drawn);
    return int32_t(drawn.to_vector<int64_t>()[0]);
  };
  auto window = [&](size_t n) { return std::vector<int32_t>(text.end() - std::min<size_t>(n, text.size()), text.end()); };
  using Clock = std::chrono::steady_clock;
  auto t0 = Clock::now();
  Tensor logits = feed(window(ctx));
  int32_t next = opt.max_new_tokens > 0 ? draw(logits) : -1;  // the wait for the prompt's logits
  st.prompt_tokens = std::min<int64_t>(ctx, int64_t(text.size()));
  st.prefill_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  t0 = Clock::now();
  for (int64_t i = 0; i < opt.max_new_tokens; ++i) {
    if (i > 0) next = draw(logits);
    text.push_back(next);
    out.push_back(next);
    if (on_token) on_token(next);
    if (next == opt.stop_token || i + 1 == opt.max_new_tokens) break;
    if (cache.length() + 1 > ctx) {
      cache.clear();  // positions end at block_size: restart from the last half of the text
      logits = feed(window(ctx / 2));
    } else {
      logits = decode(next);
    }
    ++st.decode_steps;
  }
  st.decode_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  st.cache_bytes = cache.bytes();
  if (stats) *stats = st;
  return out;
}

}  // namespace keel::app
