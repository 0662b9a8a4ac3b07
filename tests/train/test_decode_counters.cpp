// What one generated token asks of the GPU, counted on the emulated device (exact: the same
// launches, copies and synchronisations a real GPU would be asked for), through the code users
// run: `gpt2 bench-sample`'s decode loop (apps/gpt2/infer/bench_sample.h), which replays a
// captured CUDA graph per token by default (nn/decode_graph.h) and runs eagerly with --no-graph.
// Decode at batch 1 is bound by the host, so these counts are its speed proxy in CI
// (docs/inference.md). The replayed step must compute exactly what the eager one does.
#include <doctest/doctest.h>

#include <map>

#include "apps/gpt2/infer/bench_sample.h"
#include "apps/gpt2/infer/sampler.h"
#include "core/autograd.h"
#include "core/cuda/counters.h"
#include "core/factory.h"
#include "core/random.h"
#include "cuda_test.h"
#include "nn/decode_graph.h"
#include "nn/gpt2.h"
#include "nn/kv_cache.h"
#include "ops/reduce.h"

using namespace keel;

namespace {
// The paper's layer shape, small: 2 layers of 6 heads of 32, LS = 5 local heads of w 8 + 1 global.
nn::GPT2Config model_config(nn::AttentionKind kind) {
  nn::GPT2Config c = nn::GPT2Config::preset("paper");
  c.n_layer = 2;
  c.block_size = 96;
  c.vocab_size = 300;
  c.attention = kind;
  c.ls_local_heads = 5;
  c.ls_window = 8;
  return c;
}

// `steps` greedy tokens decoded eagerly (through `eager`) and by replaying `graph` (through
// `replayed`), from e_next and r_next (B, 1), which advance: logits and tokens bit for bit.
void decode_side_by_side(nn::GPT2& model, nn::DecodeGraph& graph, nn::KVCache& eager, nn::KVCache& replayed,
                         Tensor& e_next, Tensor& r_next, int steps) {
  for (int i = 0; i < steps; ++i) {
    const Tensor e_logits = model.forward_cached(e_next, eager, nn::GPT2::Logits::last);
    e_next = argmax(e_logits, 2);
    const nn::DecodeStep step = graph.step(r_next, replayed);
    r_next = step.next;
    INFO("step " << i);
    CHECK(step.logits.to(Device::cpu()).to_vector<float>() == e_logits.to(Device::cpu()).to_vector<float>());
    CHECK(r_next.to_vector<int64_t>() == e_next.to_vector<int64_t>());
  }
}

// variant -> its decode record at context 48 (batch 1), with a captured step per token or eagerly
// (and `profile` eager steps profiled after the timed ones)
std::map<std::string, app::BenchRecord> decode_records(bool graph = true, int64_t profile = 0) {
  std::map<std::string, app::BenchRecord> out;
  for (auto [name, kind] : {std::pair{"mhsa", nn::AttentionKind::mhsa}, std::pair{"ls", nn::AttentionKind::ls}}) {
    nn::GPT2 model(model_config(kind), 1);
    model.to(Device::cuda(0));
    app::BenchSampleOptions o;
    o.contexts = {48};
    o.batch_sizes = {1};
    o.prompt_tokens = 16;
    o.prefill_reps = 1;
    o.steps = 3;
    o.warmup = 2;
    o.check_tokens = 2;
    o.graph = graph;
    o.profile = profile;
    app::bench_sample(model, name, o, [&](const app::BenchRecord& r) {
      if (r["phase"] == "decode") out[name] = r;
    });
  }
  return out;
}
}  // namespace

TEST_CASE("a decode step synchronises with the GPU once per token, to read its token") {
  KEEL_REQUIRE_CUDA();
  for (bool graph : {true, false})
    for (const auto& [variant, r] : decode_records(graph)) {
      INFO(variant << ": " << r.dump());
      CHECK(r["graph"].get<bool>() == graph);
      CHECK(r["syncs"].get<double>() == 1.0);
      CHECK(r["launches"].get<double>() > 0);  // the counters count
    }
}

TEST_CASE("a replayed decode step is one graph launch and allocates nothing") {
  KEEL_REQUIRE_CUDA();
  for (const auto& [variant, r] : decode_records(true)) {
    INFO(variant << ": " << r.dump());
    // The position's fill and the graph; the ids' copy; nothing else leaves the host.
    CHECK(r["launches"].get<double>() == 2.0);
    CHECK(r["copies"].get<double>() == 1.0);
    CHECK(r["library_calls"].get<double>() == 0.0);
    CHECK(r["allocations"].get<double>() == 0.0);
  }
}

TEST_CASE("bench-sample --profile: a token's ops one by one, adding up to the eager step's counts") {
  KEEL_REQUIRE_CUDA();
  for (const auto& [variant, r] : decode_records(false, 2)) {
    INFO(variant << ": " << r.dump());
    const nlohmann::ordered_json& p = r.at("profile");
    CHECK(p["steps"].get<int64_t>() == 2);
    CHECK(p["timing"] == "predicted");  // the emulated GPU: a prediction for an H100
    CHECK(p["step"]["predicted_ms"].get<double>() > 0);
    // Every launch of a token belongs to an op (decode attention included), and the profiled
    // steps ask the GPU for what the timed eager steps did.
    const auto& counts = p["step"]["counts"];
    CHECK(p["step"]["outside_ops"]["launches"].get<double>() == 0);
    CHECK(counts["launches"].get<double>() == r["launches"].get<double>());
    CHECK(counts["library_calls"].get<double>() == r["library_calls"].get<double>());
    std::map<std::string, double> calls;
    for (const auto& op : p["ops"]) calls[op["name"].get<std::string>()] += op["calls_per_step"].get<double>();
    // Per layer: one decode attention; each LayerNorm with the product that reads it, one
    // add_layernorm_linear launch each (ln_1 with c_attn, ln_2 with c_fc, and ln_f with the
    // lm_head); cuBLAS only for the two c_proj; no LayerNorm of its own.
    CHECK(calls["decode_attention_cached"] == 2);
    CHECK(calls["add_layernorm_linear"] == 2 * 2 + 1);
    CHECK(calls["linear"] == 2 * 2);
    CHECK(calls["add_layernorm"] == 0);
    CHECK(calls["layernorm"] == 0);
    CHECK(r["library_calls"].get<double>() == 2 * 2);
  }
}

TEST_CASE("graph replay decodes exactly as the eager step, for MHSA and LS-attention") {
  KEEL_REQUIRE_CUDA();
  NoGradGuard no_grad;
  const Device dev = Device::cuda(0);
  for (auto kind : {nn::AttentionKind::mhsa, nn::AttentionKind::ls}) {
    nn::GPT2 model(model_config(kind), 3);
    model.to(dev);
    model.eval();
    const std::vector<int32_t> prompt = app::bench_prompt(16, model.config().vocab_size, 5);
    const Tensor ids = from_vector(prompt, {1, 16}).to(dev);
    nn::KVCache eager = model.make_cache(40), replayed = model.make_cache(40);
    Tensor e_next = argmax(model.forward_cached(ids, eager, nn::GPT2::Logits::last), 2);
    Tensor r_next = argmax(model.forward_cached(ids, replayed, nn::GPT2::Logits::last), 2);
    nn::DecodeGraph graph(model);
    decode_side_by_side(model, graph, eager, replayed, e_next, r_next, 8);
    CHECK(graph.captures() == 1);
    CHECK(graph.replays() == 8);
    CHECK(replayed.length() == eager.length());

    // A warm token: its position's fill, the ids' copy and the graph; one wait, to read it.
    const cuda::Counters before = cuda::counters();
    r_next = graph.step(r_next, replayed).next;
    (void)r_next.to_vector<int64_t>();
    const cuda::Counters token = cuda::counters() - before;
    INFO(token.summary());
    CHECK(token.allocations == 0);
    CHECK(token.syncs == 1);
    CHECK(token.operations() == 3);

    // A new text moves the cache's buffers: the step is captured again and still exact.
    eager.clear(), replayed.clear();
    e_next = argmax(model.forward_cached(ids, eager, nn::GPT2::Logits::last), 2);
    r_next = argmax(model.forward_cached(ids, replayed, nn::GPT2::Logits::last), 2);
    const Tensor e_logits = model.forward_cached(e_next, eager, nn::GPT2::Logits::last);
    const nn::DecodeStep step = graph.step(r_next, replayed);
    CHECK(graph.captures() == 2);
    CHECK(step.logits.to(Device::cpu()).to_vector<float>() == e_logits.to(Device::cpu()).to_vector<float>());
  }
}

TEST_CASE("graph replay decodes exactly as the eager step past 256 keys, where decode attention splits a row") {
  // The eager step's grid covers the keys the text has, the graph's the slots the cache has
  // (two chunks of keys here, three of slots). At batch 22 there are 132 query rows, one per
  // emulated multiprocessor, so a split sized for the GPU would cut 301 keys and 600 slots at
  // different places; chunks of a fixed size cut both at the same keys. Tiny widths (6 heads of
  // 8) and random cached keys keep the emulator fast.
  KEEL_REQUIRE_CUDA();
  NoGradGuard no_grad;
  const Device dev = Device::cuda(0);
  constexpr int64_t B = 22, L = 300, capacity = 600;
  for (auto kind : {nn::AttentionKind::mhsa, nn::AttentionKind::ls}) {
    INFO((kind == nn::AttentionKind::mhsa ? "mhsa" : "ls"));
    nn::GPT2Config c = model_config(kind);
    c.n_embd = 48;
    c.block_size = capacity;
    nn::GPT2 model(c, 3);
    model.to(dev);
    model.eval();
    const AttentionSpec spec = c.attention_spec();
    nn::KVCache eager = model.make_cache(capacity), replayed = model.make_cache(capacity);
    Generator ge(11), gr(11);  // the same random text in both caches
    nn::fill_random(eager, B, L, spec, c.head_dim(), DType::f32, dev, ge);
    nn::fill_random(replayed, B, L, spec, c.head_dim(), DType::f32, dev, gr);
    std::vector<int64_t> first(B);
    for (int64_t b = 0; b < B; ++b) first[static_cast<size_t>(b)] = (7 * b + 1) % c.vocab_size;
    Tensor e_next = from_vector(first, {B, 1}).to(dev), r_next = e_next;
    nn::DecodeGraph graph(model);
    decode_side_by_side(model, graph, eager, replayed, e_next, r_next, 3);
    CHECK(graph.captures() == 1);
    CHECK(replayed.length() == L + 3);
    CHECK(replayed.layers[0].k_global.size(2) == capacity);  // the graph's grid: slots, not keys
  }
}

TEST_CASE("LS-attention issues no more operations per token than MHSA") {
  KEEL_REQUIRE_CUDA();
  auto ops = [](const app::BenchRecord& r) {
    return r["launches"].get<double>() + r["library_calls"].get<double>() + r["copies"].get<double>();
  };
  const auto records = decode_records();
  INFO("mhsa: " << records.at("mhsa").dump() << "\nls: " << records.at("ls").dump());
  CHECK(ops(records.at("ls")) <= ops(records.at("mhsa")));
  CHECK(records.at("ls")["allocations"].get<double>() <= records.at("mhsa")["allocations"].get<double>());
}

TEST_CASE("gpt2 sample draws the same text from replayed steps as from eager ones, past the context length") {
  KEEL_REQUIRE_CUDA();
  nn::GPT2 model(model_config(nn::AttentionKind::ls), 7);
  model.to(Device::cuda(0));
  app::SampleOptions o;
  o.max_new_tokens = 110;  // past block_size 96: the cache restarts from a cropped text, and the step is captured again
  o.temperature = 1.0;
  o.seed = 4;
  const std::vector<int32_t> replayed = app::generate(model, {1, 2, 3}, o);
  o.graph = false;
  const std::vector<int32_t> eager = app::generate(model, {1, 2, 3}, o);
  CHECK(replayed.size() == 110);
  CHECK(replayed == eager);
}

TEST_CASE("a sampled token on the GPU makes one sync: it is drawn there and only its id comes back") {
  KEEL_REQUIRE_CUDA();
  nn::GPT2 model(model_config(nn::AttentionKind::ls), 7);
  model.to(Device::cuda(0));
  app::SampleOptions o;
  o.temperature = 0.9;
  o.top_k = 40;
  o.seed = 4;
  auto run = [&](int64_t tokens) {
    o.max_new_tokens = tokens;
    const cuda::Counters before = cuda::counters();
    (void)app::generate(model, {1, 2, 3}, o);
    return cuda::counters() - before;
  };
  (void)run(4);  // warm: the graph's first capture, the allocator's blocks
  const cuda::Counters a = run(10), b = run(30);
  INFO(a.summary() << "\n" << b.summary());
  CHECK(b.syncs - a.syncs == 20);  // 20 more tokens, one wait each: to read the id
  // Per token the position's fill, the ids' copy, the graph and the draw's one launch.
  CHECK(b.operations() - a.operations() == 20 * 4);
  CHECK(b.allocations - a.allocations == 0);  // the id is drawn into one buffer per text
}
