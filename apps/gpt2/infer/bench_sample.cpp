#include "apps/gpt2/infer/bench_sample.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <numeric>

#include "core/allocator.h"
#include "core/autograd.h"
#include "core/cuda/counters.h"
#include "core/error.h"
#include "core/factory.h"
#include "core/random.h"
#include "nn/decode_graph.h"
#include "nn/kv_cache.h"
#include "ops/reduce.h"

namespace keel::app {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The q-quantile (0..1) of xs by the nearest rank; xs not empty.
double quantile(std::vector<double> xs, double q) {
  std::sort(xs.begin(), xs.end());
  const auto i = static_cast<size_t>(std::clamp(q * double(xs.size()) - 1e-9, 0.0, double(xs.size() - 1)));
  return xs[i];
}

// logits (B, 1, V) -> the greedy token of each row, as (B, 1) i64 ids on the logits' device,
// which the next step reads there. The argmax runs where the logits are; only the B ids come
// back (to be recorded), and that read-back waits for the device, so a step's time is its whole
// time. Ties go to the smallest id, as on the CPU.
Tensor greedy(const Tensor& logits, std::vector<int32_t>* row0 = nullptr) {
  Tensor next = argmax(logits, 2);
  const std::vector<int64_t> ids = next.to_vector<int64_t>();
  if (row0) row0->push_back(static_cast<int32_t>(ids[0]));
  return next;
}

// Row 0 of logits (B, 1, V): its kCheckTop largest logits in f32, largest first (ties: the smaller
// id first, NaN above everything), appended to ids and values. Another implementation's logits
// for the same token are compared with them (apps/bench/bench_sample.py). Not timed.
constexpr int64_t kCheckTop = 8;
void record_top(const Tensor& logits, BenchRecord& ids, BenchRecord& values) {
  const int64_t V = logits.size(-1), k = std::min(kCheckTop, V);
  std::vector<float> row = logits.to(DType::f32).to_vector<float>();
  row.resize(static_cast<size_t>(V));
  const auto key = [&](int32_t i) { return std::isnan(row[i]) ? std::numeric_limits<float>::infinity() : row[i]; };
  std::vector<int32_t> idx(static_cast<size_t>(V));
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                    [&](int32_t a, int32_t b) { return key(a) > key(b) || (key(a) == key(b) && a < b); });
  idx.resize(static_cast<size_t>(k));
  std::vector<double> v;
  for (int32_t i : idx) v.push_back(row[i]);
  ids.push_back(idx);
  values.push_back(v);
}

BenchRecord base_record(const nn::GPT2& model, const std::string& variant, const char* phase, int64_t B) {
  const Tensor& w = model.wte.weight;
  BenchRecord r;
  r["bench"] = "sample";
  r["impl"] = "keel";
  r["phase"] = phase;
  r["variant"] = variant;
  r["device"] = w.device().str();
  r["dtype"] = dtype_name(w.dtype());
  r["model"] = model.config().summary();
  r["B"] = B;
  return r;
}

using OnRecord = std::function<void(const BenchRecord&)>;
using OnProfile = std::function<void(const BenchRecord&, const profiler::Profile&)>;

// ConfigError unless the prompt and its checked tokens, and each context and its decode steps,
// fit the model's context length ctx, and the counts are in range.
void check_fits(const BenchSampleOptions& o, int64_t ctx) {
  const int64_t P = o.prompt_tokens;
  if (P < 1 || P + o.check_tokens > ctx)
    throw ConfigError("--prompt-tokens", fmt::format("a prompt of {} tokens and {} more do not fit the context {}", P,
                                                     o.check_tokens, ctx),
                      "use a shorter prompt or a model with a longer context (--seq-len)");
  const int64_t decode_steps = o.warmup + o.steps + o.profile;
  for (int64_t L : o.contexts)
    if (L < 1 || L + decode_steps > ctx)
      throw ConfigError("--contexts", fmt::format("context {} and {} decode steps do not fit the context length {}", L,
                                                  decode_steps, ctx),
                        "drop that context or give the model a longer one (--seq-len)");
  if (o.steps < 1 || o.prefill_reps < 1) throw ConfigError("bench-sample", "--steps and --prefill-reps must be >= 1");
  if (o.profile < 0) throw ConfigError("--profile", "must be >= 0", "the number of decode steps to profile");
}

// The "prefill" record of prompt_ids (B, P), handed to emit: the prompt prefilled o.prefill_reps
// times into the emptied cache (the median time), and after the last, the tokens to check.
void bench_prefill(nn::GPT2& model, const std::string& variant, const BenchSampleOptions& o, const Tensor& prompt_ids,
                   nn::KVCache& cache, const OnRecord& emit) {
  const int64_t B = prompt_ids.size(0), P = prompt_ids.size(1);
  const Device dev = model.wte.weight.device();
  std::vector<double> times;
  std::vector<int32_t> tokens;
  BenchRecord top_ids = BenchRecord::array(), top_logits = BenchRecord::array();
  reset_peak_memory(dev);
  for (int64_t rep = 0; rep < o.prefill_reps; ++rep) {
    cache.clear();
    tokens.clear();
    const auto t0 = Clock::now();
    Tensor logits = model.forward_cached(prompt_ids, cache, nn::GPT2::Logits::last);
    Tensor next = greedy(logits, &tokens);
    times.push_back(seconds_since(t0));
    if (rep + 1 < o.prefill_reps) continue;
    // The greedy continuation and each step's top logits, for another implementation to match.
    record_top(logits, top_ids, top_logits);
    for (int64_t i = 1; i < o.check_tokens; ++i) {
      logits = model.forward_cached(next, cache, nn::GPT2::Logits::last);
      next = greedy(logits, &tokens);
      record_top(logits, top_ids, top_logits);
    }
  }
  BenchRecord r = base_record(model, variant, "prefill", B);
  r["P"] = P;
  r["seconds"] = quantile(times, 0.5);
  r["seconds_min"] = *std::min_element(times.begin(), times.end());
  r["reps"] = o.prefill_reps;
  r["tokens_per_s"] = double(B * P) / quantile(times, 0.5);
  r["peak_mem_bytes"] = memory_stats(dev).peak;
  r["greedy"] = tokens;
  r["greedy_top_ids"] = top_ids;
  r["greedy_top_logits"] = top_logits;
  emit(r);
}

// o.profile eager decode steps after `next`, one profiler step each: what a token's ops cost,
// one by one. The profile goes into d["profile"], and to `profiled` (to print its table).
void profile_decode(nn::GPT2& model, const BenchSampleOptions& o, Tensor next, nn::KVCache& kv, BenchRecord& d,
                    const OnProfile& profiled) {
  profiler::Session session({model.wte.weight.device(), o.profile_gpu});
  for (int64_t s = 0; s < o.profile; ++s) {
    session.step_begin();
    next = greedy(model.forward_cached(next, kv, nn::GPT2::Logits::last));
    session.step_end();
  }
  const profiler::Profile p = session.finish();
  d["profile"] = profiler::to_json(p);
  if (profiled) profiled(d, p);
}

// Batch size B's "decode" record at context L, handed to emit: o.warmup untimed then o.steps timed
// decode steps from a cache filled with L random positions, and what the timed steps asked of the GPU.
void bench_decode(nn::GPT2& model, const std::string& variant, const BenchSampleOptions& o, int64_t B, int64_t L,
                  const OnRecord& emit, const OnProfile& profiled) {
  const Tensor& w = model.wte.weight;
  const Device dev = w.device();
  nn::KVCache kv = model.make_cache(L + o.warmup + o.steps + o.profile);
  Generator gen(o.seed + 1);
  reset_peak_memory(dev);
  nn::fill_random(kv, B, L, model.h.front()->attn.spec(), model.config().head_dim(), w.dtype(), dev, gen);
  Tensor next = full({B, 1}, 1.0, {DType::i64, dev});
  // On a GPU each token replays one captured step: the host issues 3 operations, not ~10 per layer.
  std::unique_ptr<nn::DecodeGraph> graph;
  if (o.graph && dev.is_cuda()) graph = std::make_unique<nn::DecodeGraph>(model);
  std::vector<double> ms;
  cuda::Counters timed_from;  // the counters when the timed steps began
  for (int64_t s = 0; s < o.warmup + o.steps; ++s) {
    if (s == o.warmup) timed_from = cuda::counters();
    const auto t0 = Clock::now();
    if (graph) {
      next = graph->step(next, kv).next;
      (void)next.to_vector<int64_t>();  // the tokens, read as greedy() reads them
    } else {
      next = greedy(model.forward_cached(next, kv, nn::GPT2::Logits::last));
    }
    if (s >= o.warmup) ms.push_back(1e3 * seconds_since(t0));
  }
  const cuda::Counters ops = cuda::counters() - timed_from;  // what the timed steps asked of the GPU
  BenchRecord d = base_record(model, variant, "decode", B);
  d["context"] = L;
  d["ms"] = quantile(ms, 0.5);
  d["ms_p90"] = quantile(ms, 0.9);
  d["steps"] = o.steps;
  d["tokens_per_s"] = 1e3 * double(B) / quantile(ms, 0.5);
  d["kv_bytes"] = kv.bytes();
  d["graph"] = graph != nullptr;
  // Per token (exact on the emulated GPU too): the host-side cost a GPU step pays.
  const double per = double(o.steps);
  d["launches"] = double(ops.launches) / per;
  d["library_calls"] = double(ops.library_calls) / per;
  d["copies"] = double(ops.copies) / per;
  d["syncs"] = double(ops.syncs) / per;
  d["allocations"] = double(ops.allocations) / per;
  d["peak_mem_bytes"] = memory_stats(dev).peak;
  if (o.profile > 0) profile_decode(model, o, next, kv, d, profiled);
  emit(d);
}

}  // namespace

std::vector<int32_t> bench_prompt(int64_t P, int64_t V, uint64_t seed) {
  std::vector<int32_t> ids(P);
  for (int64_t i = 0; i < P; ++i)
    ids[i] = static_cast<int32_t>(std::min<double>(double(V - 1), philox_uniform(seed, 0, uint64_t(i)) * double(V)));
  return ids;
}

void bench_sample(nn::GPT2& model, const std::string& variant, const BenchSampleOptions& o, const OnRecord& emit,
                  const OnProfile& profiled) {
  const nn::GPT2Config& c = model.config();
  check_fits(o, c.block_size);
  NoGradGuard no_grad;
  model.eval();
  const Device dev = model.wte.weight.device();
  const std::vector<int32_t> prompt = bench_prompt(o.prompt_tokens, c.vocab_size, o.seed);
  for (int64_t B : o.batch_sizes) {
    // The prefill's prompt ids and cache stay allocated through the batch size's decode records,
    // whose peak memory includes them.
    std::vector<int32_t> ids;
    for (int64_t b = 0; b < B; ++b) ids.insert(ids.end(), prompt.begin(), prompt.end());
    const Tensor prompt_ids = from_vector(ids, {B, o.prompt_tokens}).to(dev);
    nn::KVCache cache = model.make_cache(o.prompt_tokens + o.check_tokens);
    bench_prefill(model, variant, o, prompt_ids, cache, emit);
    for (int64_t L : o.contexts) bench_decode(model, variant, o, B, L, emit, profiled);
  }
}

std::string bench_sample_table(const std::vector<BenchRecord>& records) {
  std::string s = "prefill\n";
  s += fmt::format("  {:<10} {:>5} {:>6} {:>10} {:>12} {:>11}\n", "variant", "batch", "P", "seconds", "tokens/s",
                   "peak MiB");
  std::vector<std::string> variants;
  std::map<std::pair<int64_t, int64_t>, std::map<std::string, const BenchRecord*>> decode;  // (B, L) -> variant
  for (const BenchRecord& r : records) {
    const std::string v = r["variant"];
    if (std::find(variants.begin(), variants.end(), v) == variants.end()) variants.push_back(v);
    if (r["phase"] == "prefill")
      s += fmt::format("  {:<10} {:>5} {:>6} {:>10.3f} {:>12.0f} {:>11.1f}\n", v, r["B"].get<int64_t>(),
                       r["P"].get<int64_t>(), r["seconds"].get<double>(), r["tokens_per_s"].get<double>(),
                       r["peak_mem_bytes"].get<double>() / (1 << 20));
    else
      decode[{r["B"].get<int64_t>(), r["context"].get<int64_t>()}][v] = &r;
  }
  const bool pair = std::find(variants.begin(), variants.end(), "mhsa") != variants.end() &&
                    std::find(variants.begin(), variants.end(), "ls") != variants.end();
  s += "decode, per token: median ms (p90), KV cache MiB\n";
  s += fmt::format("  {:>5} {:>7}", "batch", "context");
  for (const std::string& v : variants) s += fmt::format(" {:>20} {:>9}", v + " ms (p90)", v + " KV");
  if (pair) s += fmt::format(" {:>12} {:>11}", "ls speed-up", "ls/mhsa KV");
  s += "\n";
  for (const auto& [key, by] : decode) {
    s += fmt::format("  {:>5} {:>7}", key.first, key.second);
    for (const std::string& v : variants) {
      const auto it = by.find(v);
      if (it == by.end()) {
        s += fmt::format(" {:>20} {:>9}", "-", "-");
        continue;
      }
      const BenchRecord& r = *it->second;
      s += fmt::format(" {:>20} {:>9.2f}", fmt::format("{:.2f} ({:.2f})", r["ms"].get<double>(), r["ms_p90"].get<double>()),
                       r["kv_bytes"].get<double>() / (1 << 20));
    }
    if (pair && by.count("mhsa") && by.count("ls")) {
      const BenchRecord &m = *by.at("mhsa"), &l = *by.at("ls");
      s += fmt::format(" {:>11.2f}x {:>10.1f}%", m["ms"].get<double>() / l["ms"].get<double>(),
                       100.0 * l["kv_bytes"].get<double>() / m["kv_bytes"].get<double>());
    }
    s += "\n";
  }
  // On a GPU (or the emulated one): the operations a token costs the host, the usual bound of
  // decode at batch 1 (docs/inference.md).
  bool gpu = false;
  for (const BenchRecord& r : records) gpu = gpu || (r["phase"] == "decode" && r.value("launches", 0.0) > 0);
  if (!gpu) return s;
  s += "decode, per token on the GPU: kernel launches + library calls + copies, host syncs, allocations\n";
  s += fmt::format("  {:>5} {:>7}", "batch", "context");
  for (const std::string& v : variants) s += fmt::format(" {:>30}", v);
  s += "\n";
  for (const auto& [key, by] : decode) {
    s += fmt::format("  {:>5} {:>7}", key.first, key.second);
    for (const std::string& v : variants) {
      const auto it = by.find(v);
      if (it == by.end()) {
        s += fmt::format(" {:>30}", "-");
        continue;
      }
      const BenchRecord& r = *it->second;
      s += fmt::format(" {:>30}", fmt::format("{:.0f}+{:.0f}+{:.0f}, {:.0f} sync, {:.0f} alloc", r["launches"].get<double>(),
                                              r["library_calls"].get<double>(), r["copies"].get<double>(),
                                              r["syncs"].get<double>(), r["allocations"].get<double>()));
    }
    s += "\n";
  }
  return s;
}

}  // namespace keel::app
