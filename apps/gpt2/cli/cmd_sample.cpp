// `gpt2 sample`: continue a prompt with a trained run or a Hugging Face GPT-2 directory.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>

#include "apps/gpt2/cli/commands.h"
#include "apps/gpt2/infer/run_model.h"
#include "apps/gpt2/infer/sampler.h"
#include "apps/gpt2/run/placement.h"
#include "apps/gpt2/run/seed.h"
#include "apps/gpt2/train/trainer.h"
#include "data/assets.h"
#include "data/tokenizer/tokenizer.h"
#include "nn/hf.h"

namespace fs = std::filesystem;

namespace keel::app {

namespace {
struct SampleArgs {
  std::string run_dir, init_from, prompt, vocab, device = "auto";
  int64_t num_samples = 1;
  bool stats = false, no_graph = false;
  SampleOptions opt;
};

// Where the time went: the prompt (prefill) and the tokens after it (decode), and the cache.
void print_stats(const SampleStats& st) {
  fmt::print(stderr, "[prefill: {} tokens in {:.3f} s, {:.1f} tokens/s]\n", st.prompt_tokens, st.prefill_seconds,
             double(st.prompt_tokens) / std::max(st.prefill_seconds, 1e-9));
  if (st.decode_steps > 0)
    fmt::print(stderr, "[decode: {} steps in {:.3f} s, {:.1f} tokens/s, {:.2f} ms/token]\n", st.decode_steps,
               st.decode_seconds, double(st.decode_steps) / std::max(st.decode_seconds, 1e-9),
               1e3 * st.decode_seconds / double(st.decode_steps));
  fmt::print(stderr, "[KV cache: {:.2f} MiB ({} bytes)]\n", double(st.cache_bytes) / (1 << 20), st.cache_bytes);
}

void run_sample(const SampleArgs& a) {
  auto model = load_model(a.run_dir, a.init_from, "sample");
  fs::path vocab = vocab_dir_for(a.vocab, a.run_dir);
  data::Tokenizer tok = data::Tokenizer::from_dir(vocab);
  if (tok.vocab_size() > model->config().vocab_size)
    throw ConfigError("sample", fmt::format("the vocabulary in {} has {} tokens, the model {}", vocab.string(),
                                            tok.vocab_size(), model->config().vocab_size),
                      "pass the vocabulary the model was trained with (--vocab)");
  Device device = resolve_device(a.device);
  model->to(device);
  std::vector<int32_t> prompt = tok.encode_with_special(a.prompt);
  if (prompt.empty()) prompt.push_back(tok.eot_id());  // an unconditional sample starts a document
  for (int64_t s = 0; s < a.num_samples; ++s) {
    SampleOptions opt = a.opt;
    opt.seed = a.opt.seed + uint64_t(s);
    opt.graph = !a.no_graph;
    opt.stop_token = tok.eot_id();
    if (a.num_samples > 1) fmt::print("--- sample {} ---\n", s + 1);
    fmt::print("{}", a.prompt);
    auto t0 = std::chrono::steady_clock::now();
    SampleStats st;
    // Tokens print as they come; a multi-byte character split across tokens completes itself.
    auto n = generate(
        *model, prompt, opt,
        [&](int32_t id) {
          if (id == tok.eot_id()) return;
          std::string piece = tok.decode({id});
          std::fwrite(piece.data(), 1, piece.size(), stdout);
          std::fflush(stdout);
        },
        &st);
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    fmt::print("\n");
    fmt::print(stderr, "[{} tokens in {:.2f} s, {:.1f} tokens/s on {}]\n", n.size(), secs, double(n.size()) / secs,
               device.str());
    if (a.stats) print_stats(st);
  }
}
}  // namespace

void add_sample_command(CLI::App& app) {
  auto a = std::make_shared<SampleArgs>();
  CLI::App* cmd = app.add_subcommand("sample", "Continue a prompt with a trained model (temperature, top-k, KV cache)");
  cmd->add_option("run_dir", a->run_dir, "a run directory written by `gpt2 train`");
  cmd->add_option("--init-from", a->init_from, "a Hugging Face GPT-2 directory instead of a run");
  cmd->add_option("--prompt,-p", a->prompt, "text to continue (default: start a new document)");
  cmd->add_option("--max-new-tokens,-n", a->opt.max_new_tokens, "tokens to generate")->check(CLI::PositiveNumber);
  cmd->add_option("--temperature,-t", a->opt.temperature, "0 = greedy; higher = more random")->check(CLI::NonNegativeNumber);
  cmd->add_option("--top-k,-k", a->opt.top_k, "sample among the k most likely tokens (0 = all)")->check(CLI::NonNegativeNumber);
  add_seed_option(*cmd, a->opt.seed, "sampling seed");
  cmd->add_option("--num-samples", a->num_samples, "independent samples (seeds seed, seed+1, ...)")->check(CLI::PositiveNumber);
  cmd->add_option("--vocab", a->vocab, "vocabulary directory (default: the run's, or GPT-2's)");
  cmd->add_option("--device", a->device, "auto | cpu | cuda | cuda:N");
  cmd->add_flag("--no-graph", a->no_graph, "on CUDA, run each decode step eagerly instead of replaying a captured one");
  cmd->add_flag("--stats", a->stats, "print prefill and decode tokens/s and the KV cache size (stderr)");
  cmd->callback([a] { run_sample(*a); });
}

}  // namespace keel::app
