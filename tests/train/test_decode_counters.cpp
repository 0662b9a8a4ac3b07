// What one generated token asks of the GPU, counted on the emulated device (exact: the same
// launches, copies and synchronisations a real GPU would be asked for), through the code users
// run: `gpt2 bench-sample`'s decode loop (apps/gpt2/infer/bench_sample.h). Decode at batch 1 is
// bound by the host, so these counts are its speed proxy in CI (docs/inference.md).
#include <doctest/doctest.h>

#include <map>

#include "apps/gpt2/infer/bench_sample.h"
#include "cuda_test.h"
#include "nn/gpt2.h"

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

// variant -> its decode record at context 48 (batch 1)
std::map<std::string, app::BenchRecord> decode_records() {
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
    app::bench_sample(model, name, o, [&](const app::BenchRecord& r) {
      if (r["phase"] == "decode") out[name] = r;
    });
  }
  return out;
}
}  // namespace

TEST_CASE("a decode step synchronises with the GPU once per token, to read its token") {
  KEEL_REQUIRE_CUDA();
  for (const auto& [variant, r] : decode_records()) {
    INFO(variant << ": " << r.dump());
    CHECK(r["syncs"].get<double>() == 1.0);
    CHECK(r["launches"].get<double>() > 0);  // the counters count
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
