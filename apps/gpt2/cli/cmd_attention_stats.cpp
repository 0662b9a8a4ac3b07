// `gpt2 attention-stats RUN --data DATASET | --text FILE`: per layer and head, how far back and
// how spread out a trained model's attention is (apps/gpt2/infer/attention_stats.h), as a table,
// --json, and --svg FILE.
#include <fmt/format.h>

#include <CLI/CLI.hpp>

#include "apps/gpt2/cli/commands.h"
#include "apps/gpt2/infer/attention_stats.h"
#include "apps/gpt2/infer/run_model.h"
#include "apps/gpt2/run/placement.h"
#include "core/io.h"
#include "data/dataset.h"
#include "data/file_io.h"
#include "data/tokenizer/tokenizer.h"

namespace keel::app {

namespace {
struct StatsArgs {
  std::string run_dir, data, split = "val", text, vocab, svg, device = "cpu";
  int64_t sequences = 8, seq_len = 0;
  bool json = false;
};

// n windows of T tokens spread evenly over the tokens (fewer when there are not that many).
std::vector<std::vector<int32_t>> sample_windows(const data::TokenSplit& split, int64_t T, int64_t n) {
  const auto total = static_cast<int64_t>(split.size());
  if (total < T)
    throw ConfigError("attention-stats",
                      fmt::format("the sample has {} tokens, fewer than one sequence of {}", total, T),
                      "use a longer text, or a shorter --seq-len");
  const int64_t count = std::min(n, total / T), stride = count > 1 ? (total - T) / (count - 1) : 0;
  std::vector<std::vector<int32_t>> out(static_cast<size_t>(count), std::vector<int32_t>(static_cast<size_t>(T)));
  for (int64_t k = 0; k < count; ++k) split.read(uint64_t(k * stride), uint64_t(T), out[size_t(k)].data());
  return out;
}

void run_attention_stats(const StatsArgs& a) {
  if (a.data.empty() == a.text.empty())
    throw ConfigError("attention-stats", "give exactly one of --data and --text");
  if (a.sequences < 1) throw ConfigError("attention-stats", "--sequences must be at least 1");
  auto model = load_run_model(a.run_dir);
  const auto& m = model->config();
  const int64_t T = a.seq_len ? a.seq_len : m.block_size;
  if (T < 1 || T > m.block_size)
    throw ConfigError("attention-stats", fmt::format("--seq-len {} is outside 1..{}, the model's context", T,
                                                     m.block_size));
  std::shared_ptr<const data::TokenSplit> split;
  if (!a.data.empty()) {
    split = data::TokenSplit::open(a.data, a.split, uint32_t(m.vocab_size));
  } else {
    data::Tokenizer tok = data::Tokenizer::from_dir(vocab_dir_for(a.vocab, a.run_dir));
    split = data::TokenSplit::from_tokens(tok.encode(data::read_text_file(a.text)), uint32_t(m.vocab_size));
  }
  model->to(resolve_device(a.device));
  const AttentionStats s = attention_stats(*model, sample_windows(*split, T, a.sequences));
  if (a.json)
    fmt::print("{}\n", attention_stats_json(s));
  else
    fmt::print("{}", attention_stats_table(s));
  if (!a.svg.empty()) {
    io::write_file_atomic(a.svg, attention_stats_svg(s, "attention statistics: " + a.run_dir), "attention-stats");
    if (!a.json) fmt::print("gpt2 attention-stats: chart written to {}\n", a.svg);
  }
}
}  // namespace

void add_attention_stats_command(CLI::App& app) {
  auto a = std::make_shared<StatsArgs>();
  CLI::App* cmd = app.add_subcommand(
      "attention-stats",
      "Per layer and head: attention mass beyond 16/50/100 tokens, row entropy, keys holding 90%, effective rank");
  cmd->add_option("run_dir", a->run_dir, "a run directory written by `gpt2 train`")->required();
  cmd->add_option("--data", a->data, "a dataset directory written by `gpt2 prepare`");
  cmd->add_option("--split", a->split, "train or val (with --data)")->check(CLI::IsMember({"train", "val"}))
      ->capture_default_str();
  cmd->add_option("--text", a->text, "a text file (.txt, .xz, .gz) instead of a dataset");
  cmd->add_option("--vocab", a->vocab, "vocabulary for --text (default: the run's)");
  cmd->add_option("--sequences", a->sequences, "sequences to average over, spread evenly over the tokens")
      ->capture_default_str();
  cmd->add_option("--seq-len", a->seq_len, "tokens per sequence (default: the model's context)");
  cmd->add_flag("--json", a->json, "print one JSON object instead of the table");
  cmd->add_option("--svg", a->svg, "also write a small bar chart of the statistics to this SVG file");
  cmd->add_option("--device", a->device, "auto | cpu | cuda | cuda:N")->capture_default_str();
  cmd->callback([a] { run_attention_stats(*a); });
}

}  // namespace keel::app
