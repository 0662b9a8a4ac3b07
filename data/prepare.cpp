// The prepare pipeline (see prepare.h).
#include "data/prepare.h"

#include <fmt/format.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/assets.h"
#include "data/bpe_trainer.h"
#include "data/dataset.h"
#include "core/io.h"
#include "data/file_io.h"
#include "data/progress.h"
#include "data/shard.h"
#include "data/tokenizer.h"

namespace keel::data {

namespace fs = std::filesystem;

namespace {

void check_options(const PrepareOptions& o) {
  const char* op = "prepare";
  if (o.inputs.empty()) throw ConfigError(op, "no input files", "pass --input FILE...");
  if (o.out.empty()) throw ConfigError(op, "no output directory", "pass --out DIR");
  if (!(o.val_fraction >= 0.0 && o.val_fraction < 1.0))
    throw ValueError(op, fmt::format("val fraction {} is outside [0, 1)", o.val_fraction));
  if (o.train_vocab != 0 && !o.vocab_dir.empty())
    throw ConfigError(op, "both a vocabulary directory and --train-vocab were given",
                      "use one: --vocab DIR to reuse a vocabulary, --train-vocab N to learn one");
  if (o.train_vocab < 0 || (o.train_vocab > 0 && o.train_vocab < 257))
    throw ValueError(op, fmt::format("--train-vocab {} is too small", o.train_vocab),
                     "256 byte tokens + <|endoftext|> need at least 257");
  if (o.shard_tokens == 0) throw ValueError(op, "shard size must be positive");
  // Never replace something that is not a keel dataset: `--out ~` must not wipe a home.
  std::error_code ec;
  if (fs::exists(o.out, ec)) {
    if (!fs::is_directory(o.out, ec))
      throw ConfigError(op, fmt::format("{}: exists and is not a directory", o.out.string()),
                        "choose another --out");
    const bool empty = fs::is_empty(o.out, ec);
    if (!empty && !fs::exists(o.out / "meta.json", ec))
      throw ConfigError(op, fmt::format("{}: exists, is not empty and holds no keel dataset "
                                        "(no meta.json); refusing to overwrite it", o.out.string()),
                        "choose a new or empty --out directory");
  }
}

// Copies a vocabulary directory's files (and licence notes) verbatim.
void copy_vocab_files(const fs::path& from, const fs::path& to) {
  for (const auto& entry : fs::directory_iterator(from)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_regular_file() &&
        (name == "encoder.json" || name == "vocab.bpe" || name.starts_with("LICENSE")))
      fs::copy_file(entry.path(), to / name, fs::copy_options::overwrite_existing);
  }
}

struct SplitWriter {
  std::string name;
  fs::path dir;
  uint32_t vocab_size;
  uint64_t shard_tokens;
  std::vector<uint32_t> buffer;
  SplitInfo info;

  void add(const std::vector<int32_t>& ids) {
    buffer.insert(buffer.end(), ids.begin(), ids.end());
    info.tokens += ids.size();
    ++info.documents;
    while (buffer.size() >= shard_tokens) {
      write({buffer.data(), shard_tokens});
      buffer.erase(buffer.begin(), buffer.begin() + static_cast<ptrdiff_t>(shard_tokens));
    }
  }
  void finish() {
    if (!buffer.empty()) write(buffer);
    buffer.clear();
  }
  void write(std::span<const uint32_t> tokens) {
    const std::string file = fmt::format("{}_{:06d}.bin", name, info.shards.size());
    write_shard(dir / file, tokens, vocab_size);
    info.shards.push_back(file);
  }
};

nlohmann::json split_json(const SplitInfo& s) {
  return {{"shards", s.shards}, {"tokens", s.tokens}, {"documents", s.documents}};
}

}  // namespace

PrepareResult prepare_dataset(const PrepareOptions& o) {
  check_options(o);
  auto log = [&](const std::string& s) {
    if (o.log) o.log(s);
  };

  // 1. Read every input and cut it into documents.
  std::vector<std::string> texts;
  std::vector<std::string_view> docs;
  uint64_t total_bytes = 0;
  for (const auto& path : o.inputs) {
    texts.push_back(read_text_file(path));
    if (texts.back().find_first_not_of(" \t\r\n\f\v") == std::string::npos)
      throw IoError("prepare", fmt::format("{}: is empty (no text{})", path.string(),
                                           texts.back().empty() ? "" : ", only whitespace"),
                    "remove it from --input or check that it was written completely");
    const auto file_docs = split_documents(texts.back(), o.documents);
    docs.insert(docs.end(), file_docs.begin(), file_docs.end());
    total_bytes += texts.back().size();
  }
  const uint64_t n_docs = docs.size();
  const uint64_t n_val =
      o.val_fraction > 0 ? std::max<uint64_t>(1, std::llround(n_docs * o.val_fraction)) : 0;
  if (n_val >= n_docs)
    throw ConfigError("prepare",
                      fmt::format("the input has {} document(s), too few to hold out {} for "
                                  "validation and keep any for training", n_docs, n_val),
                      "add more text, or lower --val-fraction (0 disables the split)");
  auto is_val = [&](uint64_t i) { return (i + 1) * n_val / n_docs > i * n_val / n_docs; };
  log(fmt::format("read {} file(s), {:.1f} MB, {} documents ({} for validation)",
                  o.inputs.size(), total_bytes / 1e6, n_docs, n_val));

  // 2. The vocabulary: given, GPT-2's, or learned from the training documents only.
  Vocab vocab;
  fs::path vocab_source;
  if (o.train_vocab > 0) {
    BpeTrainer trainer;
    for (uint64_t i = 0; i < n_docs; ++i)
      if (!is_val(i)) trainer.add_text(docs[i]);
    ProgressBar bar("learning vocabulary", o.train_vocab - 257, " merges", o.progress);
    vocab = trainer.train({.vocab_size = o.train_vocab,
                           .on_progress = [&](int64_t done, int64_t) { bar.update(done); }});
    bar.finish();
    log(fmt::format("learned a {}-token vocabulary{}", vocab.size(),
                    vocab.size() < o.train_vocab ? " (the text ran out of pairs to merge)" : ""));
  } else {
    vocab_source = o.vocab_dir.empty() ? default_vocab_dir() : o.vocab_dir;
    vocab = load_vocab(vocab_source);
  }
  Tokenizer tok(std::move(vocab));
  const int32_t eot = tok.eot_id();
  const auto vocab_size = static_cast<uint32_t>(tok.vocab_size());

  // 3. Tokenize into a staging directory next to `out`.
  io::StagingDir staging(o.out, "prepare");
  fs::create_directory(staging.path() / "vocab");
  if (o.train_vocab > 0) save_vocab(tok.vocab(), staging.path() / "vocab");
  else copy_vocab_files(vocab_source, staging.path() / "vocab");

  SplitWriter train{"train", staging.path(), vocab_size, o.shard_tokens, {}, {}};
  SplitWriter val{"val", staging.path(), vocab_size, o.shard_tokens, {}, {}};
  ProgressBar bar("tokenizing", total_bytes / 1000000, " MB", o.progress);
  uint64_t done_bytes = 0;
  std::vector<int32_t> ids;
  for (uint64_t i = 0; i < n_docs; ++i) {
    ids.assign(1, eot);
    tok.encode_append(docs[i], ids);
    (is_val(i) ? val : train).add(ids);
    done_bytes += docs[i].size();
    bar.update(done_bytes / 1000000);
  }
  train.finish();
  val.finish();
  bar.finish();

  nlohmann::json meta = {
      {"format", kDatasetFormat},
      {"version", kDatasetVersion},
      {"vocab_size", vocab_size},
      {"eot_id", eot},
      {"token_bytes", token_bytes_for(vocab_size)},
      {"vocab", o.train_vocab > 0 ? fmt::format("trained: {} tokens", o.train_vocab)
                                  : fmt::format("copied from {}", vocab_source.string())},
      {"inputs", [&] {
         std::vector<std::string> v;
         for (const auto& p : o.inputs) v.push_back(p.string());
         return v;
       }()},
      {"documents", {{"rule", "split at 2+ blank lines, join to min_chars, cut at max_chars"},
                     {"min_chars", o.documents.min_chars},
                     {"max_chars", o.documents.max_chars},
                     {"separator", "<|endoftext|> before every document"}}},
      {"val_fraction", o.val_fraction},
      {"splits", {{"train", split_json(train.info)}, {"val", split_json(val.info)}}}};
  io::write_file_atomic(staging.path() / "meta.json", meta.dump(2) + "\n", "prepare");
  staging.commit();

  log(fmt::format("wrote {}: {} train tokens in {} shard(s), {} val tokens in {} shard(s), "
                  "vocab size {}", o.out.string(), train.info.tokens, train.info.shards.size(),
                  val.info.tokens, val.info.shards.size(), vocab_size));
  return {vocab_size,         train.info.tokens,        val.info.tokens,
          train.info.documents, val.info.documents,     train.info.shards.size(),
          val.info.shards.size()};
}

}  // namespace keel::data
