// `gpt2 bench-sample`: generation latency (prefill, per-token decode, KV cache, memory) for MHSA
// and LS-attention; the work is in infer/bench_sample.cpp, the guide in docs/inference.md.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "apps/gpt2/cli/commands.h"
#include "apps/gpt2/infer/bench_sample.h"
#include "apps/gpt2/infer/run_model.h"
#include "apps/gpt2/run/placement.h"
#include "apps/gpt2/run/seed.h"
#include "core/io.h"
#include "nn/hf.h"

namespace keel::app {

namespace {
struct BenchSampleArgs {
  std::string run_dir, init_from, preset = "paper", variants = "mhsa,ls", device = "auto", dtype = "f32", json,
                               save_hf;
  int64_t seq_len = 0;
  bool no_graph = false;
  BenchSampleOptions opt;
};

// One model per variant: the run's or HF directory's own, or the preset's with random weights
// under every asked-for variant (the same seed draws the same weights: the variants differ only
// in their attention windows or cap).
std::vector<std::pair<std::string, std::unique_ptr<nn::GPT2>>> models_for(const BenchSampleArgs& a,
                                                                          bool variants_given) {
  std::vector<std::pair<std::string, std::unique_ptr<nn::GPT2>>> out;
  if (!a.run_dir.empty() || !a.init_from.empty()) {
    if (variants_given)
      throw ConfigError("bench-sample", "--variants is for --preset models", "a trained model runs as it was trained");
    auto m = load_model(a.run_dir, a.init_from, "bench-sample");
    out.emplace_back(nn::attention_kind_name(m->config().attention), std::move(m));
    return out;
  }
  int64_t longest = a.opt.prompt_tokens + a.opt.check_tokens;
  for (int64_t L : a.opt.contexts) longest = std::max(longest, L + a.opt.warmup + a.opt.steps + a.opt.profile);
  std::stringstream names(a.variants);
  for (std::string v; std::getline(names, v, ',');) {
    nn::GPT2Config c = nn::GPT2Config::preset(a.preset);
    c.block_size = a.seq_len ? a.seq_len : longest;
    c.attention = nn::parse_attention_kind(v);
    c.fill_ls_shape();
    c.validate();
    out.emplace_back(v, std::make_unique<nn::GPT2>(c, a.opt.seed));
  }
  if (out.empty()) throw ConfigError("--variants", "no variant given", "e.g. --variants mhsa,ls");
  return out;
}

void run_bench_sample(const BenchSampleArgs& a, bool variants_given) {
  auto models = models_for(a, variants_given);
  const Device device = resolve_device(a.device);
  const DType dtype = parse_dtype(a.dtype);
  if (!a.save_hf.empty()) {
    // The weights and the prompt, so that another implementation can run the same model on it.
    const nn::GPT2& first = *models.front().second;
    nn::save_pretrained(first, a.save_hf);
    const nlohmann::json prompt = bench_prompt(a.opt.prompt_tokens, first.config().vocab_size, a.opt.seed);
    io::write_file_atomic(std::filesystem::path(a.save_hf) / "bench_prompt.json", prompt.dump() + "\n",
                          "bench-sample --save-hf");
    fmt::print("weights of {} and the prompt written to {} (a Hugging Face GPT-2 directory)\n", models.front().first,
               a.save_hf);
  }
  std::vector<BenchRecord> records;
  std::string lines;
  for (auto& [variant, model] : models) {
    model->to(device);
    model->to(dtype);
    fmt::print("{}: {}\n", variant, model->config().summary());
    std::fflush(stdout);
    const auto print_profile = [&](const BenchRecord& r, const profiler::Profile& p) {
      fmt::print("\n  {} B={} context={}: {} eager decode steps profiled (per step = per token)\n{}\n", variant,
                 r["B"].get<int64_t>(), r["context"].get<int64_t>(), a.opt.profile, profiler::table(p));
    };
    bench_sample(*model, variant, a.opt, [&](const BenchRecord& r) {
      records.push_back(r);
      lines += r.dump() + "\n";
      fmt::print("  {} B={} {}: {}\n", r["phase"].get<std::string>(), r["B"].get<int64_t>(),
                 r["phase"] == "prefill" ? fmt::format("P={}", r["P"].get<int64_t>())
                                         : fmt::format("context={}", r["context"].get<int64_t>()),
                 r["phase"] == "prefill" ? fmt::format("{:.3f} s", r["seconds"].get<double>())
                                         : fmt::format("{:.2f} ms/token", r["ms"].get<double>()));
      std::fflush(stdout);
    }, print_profile);
    model->to(Device::cpu());  // free the device for the next variant
  }
  fmt::print("\n{}", bench_sample_table(records));
  if (!a.json.empty()) io::write_file_atomic(a.json, lines, "bench-sample --json");
}
}  // namespace

void add_bench_sample_command(CLI::App& app) {
  auto a = std::make_shared<BenchSampleArgs>();
  CLI::App* cmd = app.add_subcommand(
      "bench-sample", "Generation latency: prefill, per-token decode and KV cache of MHSA and LS-attention");
  cmd->add_option("run_dir", a->run_dir, "a run directory written by `gpt2 train` (default: --preset, random weights)");
  cmd->add_option("--init-from", a->init_from, "a Hugging Face GPT-2 directory instead of a run");
  cmd->add_option("--preset", a->preset, "model shape with random weights: paper | gpt2-124m | tiny");
  cmd->add_option("--seq-len", a->seq_len, "context length of the preset model (default: what the benchmark needs)")
      ->check(CLI::PositiveNumber);
  CLI::Option* variants =
      cmd->add_option("--variants", a->variants, "comma-separated attention variants of the preset model");
  cmd->add_option("--contexts", a->opt.contexts, "cache lengths to time decode at")->delimiter(',');
  cmd->add_option("--batch-sizes", a->opt.batch_sizes, "batch sizes")->delimiter(',')->check(CLI::PositiveNumber);
  cmd->add_option("--prompt-tokens", a->opt.prompt_tokens, "tokens of the prompt timed for prefill")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--prefill-reps", a->opt.prefill_reps, "prefills timed per batch size (median)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--steps", a->opt.steps, "decode steps timed per batch size and context")->check(CLI::PositiveNumber);
  cmd->add_option("--warmup", a->opt.warmup, "untimed decode steps before them")->check(CLI::NonNegativeNumber);
  add_seed_option(*cmd, a->opt.seed, "weights of the preset model, the prompt and the random cache");
  cmd->add_option("--device", a->device, "auto | cpu | cuda | cuda:N");
  cmd->add_option("--dtype", a->dtype, "f32 | bf16 | f16 (bf16 and f16 on CUDA)");
  cmd->add_option("--json", a->json, "also write one JSON object per measurement to this file");
  cmd->add_option("--save-hf", a->save_hf, "write the (first) model as a Hugging Face directory, for the PyTorch anchor");
  cmd->add_flag("--no-graph", a->no_graph, "on CUDA, run each decode step eagerly instead of replaying a captured one");
  cmd->add_option("--profile", a->opt.profile,
                  "eager decode steps to profile per batch size and context, after the timed ones: a table per op")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--profile-gpu", a->opt.profile_gpu,
                  "the GPU whose times the emulated GPU predicts in the profile: H100 | H200")
      ->check(CLI::IsMember({"H100", "H200"}));
  cmd->callback([a, variants] {
    a->opt.graph = !a->no_graph;
    run_bench_sample(*a, variants->count() > 0);
  });
}

}  // namespace keel::app
