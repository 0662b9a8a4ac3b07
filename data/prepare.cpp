// The prepare pipeline (see prepare.h).
#include "data/prepare.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/error.h"
#include "data/assets.h"
#include "data/tokenizer/bpe_trainer.h"
#include "data/dataset.h"
#include "core/io.h"
#include "data/file_io.h"
#include "data/prepare_state.h"
#include "data/progress.h"
#include "data/shard.h"
#include "data/shard_stream.h"
#include "data/tokenizer/tokenizer.h"

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
  if (o.threads < 0) throw ValueError(op, fmt::format("--threads {} is negative", o.threads));
  if (o.memory_mb < 16)
    throw ValueError(op, fmt::format("--memory-mb {} is too small", o.memory_mb),
                     "give at least 16 (MB); the default is 1024");
  if (o.memory_mb > (uint64_t{1} << 30))  // in bytes it would overflow 64 bits further on
    throw ValueError(op, fmt::format("--memory-mb {} is more than any machine has", o.memory_mb),
                     "give the memory prepare may use in MB; the default is 1024");
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

// A document of a round: its text, then its ids, and what its split has of it already.
struct Doc {
  uint64_t index = 0;
  bool val = false;
  uint64_t from = 0;  // tokens an interrupted run already wrote
  std::string text;
  std::vector<int32_t> ids;
};

// Tokenizes docs[i].text into docs[i].ids (<|endoftext|> first) on up to tokenizers.size()
// threads; each document is one task, so the ids do not depend on the thread count.
void tokenize_round(std::vector<Doc>& docs, std::vector<Tokenizer>& tokenizers, int32_t eot) {
  std::atomic<size_t> next{0};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto work = [&](Tokenizer& tok) {
    try {
      for (size_t i = next++; i < docs.size(); i = next++) {
        docs[i].ids.assign(1, eot);
        tok.encode_append(docs[i].text, docs[i].ids);
        std::string().swap(docs[i].text);
      }
    } catch (...) {
      std::lock_guard lock(error_mutex);
      error = std::current_exception();
    }
  };
  const size_t n = std::min(tokenizers.size(), docs.size());
  std::vector<std::thread> pool;
  for (size_t t = 1; t < n; ++t) pool.emplace_back(work, std::ref(tokenizers[t]));
  if (n > 0) work(tokenizers[0]);
  for (auto& th : pool) th.join();
  if (error) std::rethrow_exception(error);
}

void log_line(const PrepareOptions& o, const std::string& s) {
  if (o.log) o.log(s);
}

// The bytes of the input files (for progress), each checked to exist and to be a regular file.
uint64_t input_bytes(const std::vector<InputFile>& files) {
  uint64_t total_bytes = 0;
  for (const auto& f : files) {
    std::error_code ec;
    if (f.is_stdin()) continue;
    if (!fs::exists(f.path, ec))
      throw IoError("prepare", fmt::format("{}: file not found", f.path.string()), "check the --input path");
    io::require_regular_file(f.path, "prepare");  // a FIFO would block the run when it is opened
    total_bytes += fs::file_size(f.path, ec);
  }
  return total_bytes;
}

// One input's documents; one document (or line) may hold a quarter of the memory bound.
DocumentStream documents_of(const InputFile& f, const PrepareOptions& o) {
  return DocumentStream(f, o.documents, o.text_field, o.memory_mb * (uint64_t{1} << 20) / 4);
}

// A vocabulary of o.train_vocab tokens learned from the training documents only.
Vocab learn_vocab(const PrepareOptions& o, const std::vector<InputFile>& files) {
  BpeTrainer trainer;
  uint64_t i = 0;
  std::string doc;
  for (const auto& f : files)
    for (auto ds = documents_of(f, o); ds.next(doc); ++i)
      if (!is_validation_document(i, o.val_fraction)) trainer.add_text(doc);
  ProgressBar bar("learning vocabulary", o.train_vocab - 257, " merges", o.progress);
  Vocab vocab = trainer.train({.vocab_size = o.train_vocab,
                               .on_progress = [&](int64_t done, int64_t) { bar.update(done); }});
  bar.finish();
  return vocab;
}

// The vocabulary staged in dir (the staging directory's vocab/) and recorded as ready in the
// state: vocab_source's files (`vocab`, loaded from them), or a vocabulary learned now, or the one
// an interrupted run of the job learned, read back.
Vocab stage_vocab(const PrepareOptions& o, const std::vector<InputFile>& files, const fs::path& vocab_source,
                  const fs::path& dir, PrepareState& state, Vocab vocab) {
  io::create_directories(dir, "prepare");
  if (o.train_vocab > 0 && state.vocab_ready()) {
    vocab = load_vocab(dir);
  } else if (o.train_vocab > 0) {
    vocab = learn_vocab(o, files);
    save_vocab(vocab, dir);
    log_line(o, fmt::format("learned a {}-token vocabulary{}", vocab.size(),
                            vocab.size() < o.train_vocab ? " (the text ran out of pairs to merge)" : ""));
  } else {
    copy_vocab_files(vocab_source, dir);
  }
  state.json["vocab_ready"] = true;
  state.save();
  return vocab;
}

// One tokenizer per thread (o.threads; 0: one per core), the last taking the vocabulary itself.
std::vector<Tokenizer> make_tokenizers(const PrepareOptions& o, Vocab vocab) {
  const int threads = o.threads > 0 ? o.threads : int(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<Tokenizer> toks;
  for (int t = 0; t < threads; ++t) toks.emplace_back(t + 1 < threads ? Vocab(vocab) : std::move(vocab));
  return toks;
}

struct ReadCounts {
  uint64_t documents = 0, bytes = 0;
};

// Every document of the inputs, in order, into its split: in rounds of about memory_mb / 4 of
// text, each tokenized on every thread, then appended to the split's shards. Returns how many
// documents and bytes were read.
ReadCounts tokenize_documents(const PrepareOptions& o, const std::vector<InputFile>& files, uint64_t total_bytes,
                              std::vector<Tokenizer>& toks, ShardStream& train, ShardStream& val,
                              const ShardStream::OnShard& on_shard) {
  const int32_t eot = toks[0].eot_id();
  const uint64_t round_bytes = o.memory_mb * (1u << 20) / 4;
  std::vector<Doc> round;
  uint64_t round_text = 0, files_done_bytes = 0, n_docs = 0;
  const auto start = std::chrono::steady_clock::now();
  ProgressBar bar("tokenizing", total_bytes / 1000000, " MB", o.progress);
  auto flush_round = [&] {
    tokenize_round(round, toks, eot);
    for (Doc& d : round) (d.val ? val : train).add(d.index, d.ids, d.from, on_shard);
    round.clear();
    round_text = 0;
  };
  // Each document is assigned one step late, so that the last one can be held out when the
  // rule has held out none (a small corpus).
  std::string text, pending;
  auto assign = [&](uint64_t i, bool v) {
    ShardStream& split = v ? val : train;
    ++split.info.documents;
    const uint64_t from = split.already_written(i);
    if (from == UINT64_MAX) return;  // wholly in finished shards: not tokenized again
    round_text += pending.size();
    round.push_back({i, v, from, std::move(pending), {}});
    if (round_text >= round_bytes) flush_round();
  };
  for (const auto& f : files) {
    DocumentStream ds = documents_of(f, o);
    for (; ds.next(text); ++n_docs) {
      if (n_docs > 0) assign(n_docs - 1, is_validation_document(n_docs - 1, o.val_fraction));
      pending = std::move(text);
      const uint64_t done = files_done_bytes + ds.bytes_read();
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      bar.update(done / 1000000, fmt::format("{:.1f} M tokens, {:.1f} MB/s",
                                             (train.info.tokens + val.info.tokens) / 1e6,
                                             secs > 0 ? done / 1e6 / secs : 0.0));
    }
    files_done_bytes += ds.bytes_read();
  }
  if (n_docs > 0)
    assign(n_docs - 1, is_validation_document(n_docs - 1, o.val_fraction) ||
                           (o.val_fraction > 0 && val.info.documents == 0 && n_docs >= 2));
  flush_round();
  train.finish(on_shard);
  val.finish(on_shard);
  bar.finish();
  return {n_docs, files_done_bytes};
}

// ConfigError unless the split left documents on both sides (validation only when it is wanted).
void check_split(const PrepareOptions& o, uint64_t n_docs, const SplitInfo& train, const SplitInfo& val) {
  if ((o.val_fraction > 0 && val.documents == 0) || train.documents == 0)
    throw ConfigError("prepare",
                      fmt::format("the input has {} document(s), too few to hold out a "
                                  "fraction {} for validation and keep any for training",
                                  n_docs, o.val_fraction),
                      "add more text, or set --val-fraction 0 to disable the split");
}

nlohmann::json split_json(const SplitInfo& s) {
  return {{"shards", s.shards}, {"tokens", s.tokens}, {"documents", s.documents}};
}

// The dataset's meta.json (dataset.h): its format, vocabulary, inputs, document rule and splits.
nlohmann::json dataset_meta(const PrepareOptions& o, const std::vector<InputFile>& files, const fs::path& vocab_source,
                            uint32_t vocab_size, int32_t eot, const SplitInfo& train, const SplitInfo& val) {
  std::vector<std::string> input_names;
  for (const auto& f : files) input_names.push_back(f.path.string());
  return {
      {"format", kDatasetFormat},
      {"version", kDatasetVersion},
      {"vocab_size", vocab_size},
      {"eot_id", eot},
      {"token_bytes", token_bytes_for(vocab_size)},
      {"vocab", o.train_vocab > 0 ? fmt::format("trained: {} tokens", o.train_vocab)
                                  : fmt::format("copied from {}", vocab_source.string())},
      {"inputs", input_names},
      {"documents", {{"rule", "split at 2+ blank lines, join to min_chars, cut at max_chars; "
                              "JSON Lines: one record, cut at max_chars"},
                     {"min_chars", o.documents.min_chars},
                     {"max_chars", o.documents.max_chars},
                     {"text_field", o.text_field},
                     {"separator", "<|endoftext|> before every document"}}},
      {"val_fraction", o.val_fraction},
      {"splits", {{"train", split_json(train)}, {"val", split_json(val)}}}};
}

}  // namespace

bool is_validation_document(uint64_t i, double f) {
  if (f <= 0) return false;
  return std::floor(double(i + 1) * f + 0.5) > std::floor(double(i) * f + 0.5);
}

PrepareResult prepare_dataset(const PrepareOptions& o) {
  check_options(o);
  const std::vector<InputFile> files = expand_inputs(o.inputs);
  const bool has_stdin = std::any_of(files.begin(), files.end(), [](auto& f) { return f.is_stdin(); });
  if (has_stdin && o.train_vocab > 0)
    throw ConfigError("prepare", "--train-vocab reads the input twice, and stdin (-) can be read once",
                      "save the text to a file, or use a given vocabulary (--vocab)");
  // Fail before any work on what can be checked up front: missing inputs, a bad vocabulary.
  const uint64_t total_bytes = input_bytes(files);
  const fs::path vocab_source =
      o.train_vocab > 0 ? fs::path() : o.vocab_dir.empty() ? default_vocab_dir() : o.vocab_dir;
  Vocab vocab;
  if (o.train_vocab == 0) vocab = load_vocab(vocab_source);

  // 1. The staging directory: continue an interrupted run of the same job, else start afresh.
  // One prepare at a time per output: OUT.partial.lock is held (flock) while it runs.
  const OutputLock lock(o.out);
  io::StagingDir staging(o.out, "prepare", /*resumable=*/true);
  PrepareState state = open_prepare_state(staging.path(), o, files, has_stdin);

  // 2. The vocabulary: given, GPT-2's, or learned from the training documents only.
  vocab = stage_vocab(o, files, vocab_source, staging.path() / "vocab", state, std::move(vocab));
  std::vector<Tokenizer> toks = make_tokenizers(o, std::move(vocab));
  const int32_t eot = toks[0].eot_id();
  const auto vocab_size = static_cast<uint32_t>(toks[0].vocab_size());

  // 3. Stream documents through rounds of parallel tokenizing into the shard files.
  ShardStream train("train", staging.path(), vocab_size, o.shard_tokens);
  ShardStream val("val", staging.path(), vocab_size, o.shard_tokens);
  if (state.saved_train && state.saved_val) {
    train.restore(*state.saved_train);
    val.restore(*state.saved_val);
    log_line(o, fmt::format("resuming {}: {} finished shard(s) kept", staging.path().string(),
                            train.resumed + val.resumed));
  }
  const ShardStream::OnShard on_shard = [&](const std::string& file) {
    state.record(train, val);
    if (o.on_shard) o.on_shard(file);
  };
  const ReadCounts read = tokenize_documents(o, files, total_bytes, toks, train, val, on_shard);
  check_split(o, read.documents, train.info, val.info);
  log_line(o, fmt::format("read {} file(s), {:.1f} MB, {} documents ({} for validation)", files.size(),
                          read.bytes / 1e6, read.documents, val.info.documents));

  // 4. The dataset's meta.json, and the staging directory into place as OUT.
  const nlohmann::json meta = dataset_meta(o, files, vocab_source, vocab_size, eot, train.info, val.info);
  fs::remove(state.path);
  io::write_file_atomic(staging.path() / "meta.json", meta.dump(2) + "\n", "prepare");
  staging.commit();

  log_line(o, fmt::format("wrote {}: {} train tokens in {} shard(s), {} val tokens in {} shard(s), "
                          "vocab size {}", o.out.string(), train.info.tokens, train.info.shards.size(),
                          val.info.tokens, val.info.shards.size(), vocab_size));
  return {vocab_size,           train.info.tokens,    val.info.tokens,
          train.info.documents, val.info.documents,   train.info.shards.size(),
          val.info.shards.size(), train.resumed + val.resumed};
}

}  // namespace keel::data
