// `gpt2 prepare`: text or JSON Lines files -> token shards + vocabulary in a dataset directory,
// streamed in bounded memory on every core, resumable after an interruption (data/prepare.h).
#include <fmt/format.h>

#include <CLI/CLI.hpp>

#include "apps/gpt2/cli/commands.h"
#include "core/io.h"
#include "data/prepare.h"

namespace keel::app {

namespace {
// An unsigned option parsed by us: CLI11 would wrap -1 to 2^64 - 1.
CLI::Option* add_count_option(CLI::App* cmd, const std::string& flag, uint64_t& value, const std::string& help) {
  return cmd
      ->add_option_function<std::string>(
          flag,
          [&value, flag](const std::string& s) {
            int64_t v = 0;
            if (!io::parse_int(s, 0, INT64_MAX, v))
              throw CLI::ValidationError(flag, fmt::format("'{}' is not a non-negative integer in range", s));
            value = static_cast<uint64_t>(v);
          },
          help)
      ->type_name("INT")
      ->default_str(std::to_string(value));
}
}  // namespace

void add_prepare_command(CLI::App& app) {
  auto opts = std::make_shared<data::PrepareOptions>();
  auto inputs = std::make_shared<std::vector<std::string>>();
  auto out = std::make_shared<std::string>();
  auto vocab = std::make_shared<std::string>();
  auto quiet = std::make_shared<bool>(false);

  CLI::App* cmd = app.add_subcommand(
      "prepare",
      "Tokenize text files into train/val token shards (documents separated by <|endoftext|>); "
      "re-running an interrupted prepare continues it");
  cmd->add_option("--input,-i", *inputs,
                  "text (.txt) or JSON Lines (.jsonl) files, optionally .xz / .gz; folders (every "
                  "such file inside); quoted globs ('shards/*.jsonl.gz'); - for stdin")
      ->required();
  cmd->add_option("--out,-o", *out, "output dataset directory (replaced atomically)")->required();
  auto* v = cmd->add_option("--vocab", *vocab,
                            "vocabulary directory (encoder.json + vocab.bpe); default: GPT-2's");
  auto* t = cmd->add_option("--train-vocab", opts->train_vocab,
                            "learn a byte-level BPE vocabulary of this size from the training "
                            "split instead (e.g. 10000)");
  v->excludes(t);
  cmd->add_option("--val-fraction", opts->val_fraction,
                  "fraction of documents held out for validation")
      ->capture_default_str();
  add_count_option(cmd, "--shard-tokens", opts->shard_tokens, "tokens per shard file at most");
  cmd->add_option("--text-field", opts->text_field, "the text field of JSON Lines records")
      ->capture_default_str();
  cmd->add_option("--threads", opts->threads, "tokenizing threads (0: every core)")
      ->capture_default_str();
  add_count_option(cmd, "--memory-mb", opts->memory_mb,
                   "bound on the text and tokens held in memory at once, in MB (a quarter of it for one "
                   "document or line)");
  cmd->add_flag("--quiet,-q", *quiet, "no progress bars or summary");

  cmd->callback([=] {
    for (const auto& s : *inputs) opts->inputs.emplace_back(s);
    opts->out = *out;
    opts->vocab_dir = *vocab;
    opts->progress = !*quiet;
    if (!*quiet) opts->log = [](const std::string& line) { fmt::print(stderr, "{}\n", line); };
    data::prepare_dataset(*opts);
  });
}

}  // namespace keel::app
