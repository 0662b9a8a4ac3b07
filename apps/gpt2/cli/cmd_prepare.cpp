// `gpt2 prepare`: text or JSON Lines files -> token shards + vocabulary in a dataset directory,
// streamed in bounded memory on every core, resumable after an interruption (data/prepare.h).
// With --synthetic KIND the corpus is generated (data/synthetic.h) instead of read.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <unistd.h>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "apps/gpt2/cli/commands.h"
#include "apps/gpt2/run/seed.h"
#include "core/error.h"
#include "core/io.h"
#include "data/prepare.h"
#include "data/synthetic.h"

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

// The generated corpus lives only while it is prepared: a private file in the system's
// temporary directory (TMPDIR), removed on success and on error, so nothing is left beside the
// output. An interrupted run leaves OUT.partial behind; re-run, it starts that over cleanly
// (the regenerated corpus is a new input to prepare's fingerprint).
class TempCorpus {
 public:
  explicit TempCorpus(const std::string& kind) {
    std::error_code ec;
    const std::filesystem::path dir = std::filesystem::temp_directory_path(ec);
    if (ec)
      throw IoError("prepare --synthetic", "no temporary directory: " + ec.message(),
                    "set TMPDIR to a writable directory");
    path_ = dir / fmt::format("keel-synthetic-{}-{}.jsonl", kind, getpid());
  }
  ~TempCorpus() {
    std::error_code ec;
    std::filesystem::remove(path_, ec);
  }
  TempCorpus(const TempCorpus&) = delete;
  TempCorpus& operator=(const TempCorpus&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// Generates the corpus into a temporary JSON Lines file, prepares it like any corpus, and
// records the generator's options in OUT/synthetic.json so the dataset says how it was made.
void prepare_synthetic(data::PrepareOptions opts, const data::SyntheticOptions& syn) {
  data::validate(syn);
  const TempCorpus corpus(syn.kind);
  const uint64_t bytes = data::write_synthetic_corpus(syn, corpus.path().string());
  if (opts.log)
    opts.log(fmt::format("synthetic {}: {} documents of {} words ({} bytes of text)", syn.kind, syn.documents,
                         syn.doc_words, bytes));
  opts.inputs = {corpus.path()};
  data::prepare_dataset(opts);
  const nlohmann::json meta = {{"kind", syn.kind},          {"words", syn.words},
                               {"order", syn.order},        {"noise", syn.noise},
                               {"recall_rate", syn.recall_rate}, {"documents", syn.documents},
                               {"doc_words", syn.doc_words}, {"seed", syn.seed},
                               {"vocabulary", data::synthetic_vocabulary(syn)}};
  io::write_file_atomic(opts.out / "synthetic.json", meta.dump(1) + "\n", "prepare --synthetic");
}
}  // namespace

void add_prepare_command(CLI::App& app) {
  auto opts = std::make_shared<data::PrepareOptions>();
  auto inputs = std::make_shared<std::vector<std::string>>();
  auto out = std::make_shared<std::string>();
  auto vocab = std::make_shared<std::string>();
  auto quiet = std::make_shared<bool>(false);
  auto syn = std::make_shared<data::SyntheticOptions>();
  auto syn_kind = std::make_shared<std::string>();

  CLI::App* cmd = app.add_subcommand(
      "prepare",
      "Tokenize text files into train/val token shards (documents separated by <|endoftext|>); "
      "re-running an interrupted prepare continues it; --synthetic generates the corpus instead");
  auto* in = cmd->add_option("--input,-i", *inputs,
                             "text (.txt) or JSON Lines (.jsonl) files, optionally .xz / .gz; folders (every "
                             "such file inside); quoted globs ('shards/*.jsonl.gz'); - for stdin");
  auto* synthetic = cmd->add_option("--synthetic", *syn_kind,
                                    "generate the corpus instead of reading one: " + data::synthetic_kind_names() +
                                        " (data/synthetic.h; docs/instability.md)");
  in->excludes(synthetic);
  const data::SyntheticOptions d;
  cmd->add_option("--words", syn->words, "--synthetic: distinct words W of the rule")
      ->default_val(d.words)
      ->needs(synthetic);
  cmd->add_option("--order", syn->order, "--synthetic: a word follows from the k words before it")
      ->default_val(d.order)
      ->needs(synthetic);
  cmd->add_option("--noise", syn->noise, "--synthetic: probability that a word is random instead of the rule's")
      ->default_val(d.noise)
      ->needs(synthetic);
  cmd->add_option("--recall-rate", syn->recall_rate,
                  "--synthetic recall: probability of a 'recall <key>' pair at each position")
      ->default_val(d.recall_rate)
      ->needs(synthetic);
  cmd->add_option("--documents", syn->documents, "--synthetic: documents to generate")
      ->default_val(d.documents)
      ->needs(synthetic);
  cmd->add_option("--doc-words", syn->doc_words, "--synthetic: words per document")
      ->default_val(d.doc_words)
      ->needs(synthetic);
  add_seed_option(*cmd, syn->seed, "--synthetic: seed of the generated text")->needs(synthetic);
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
    if (inputs->empty() && syn_kind->empty())
      throw CLI::RequiredError("--input (or --synthetic KIND)");
    for (const auto& s : *inputs) opts->inputs.emplace_back(s);
    opts->out = *out;
    opts->vocab_dir = *vocab;
    opts->progress = !*quiet;
    if (!*quiet) opts->log = [](const std::string& line) { fmt::print(stderr, "{}\n", line); };
    if (!syn_kind->empty()) {
      syn->kind = *syn_kind;
      prepare_synthetic(*opts, *syn);
    } else {
      data::prepare_dataset(*opts);
    }
  });
}

}  // namespace keel::app
