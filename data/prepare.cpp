// The prepare pipeline (see prepare.h).
#include "data/prepare.h"

#include <fmt/format.h>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <mutex>
#include <optional>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/error.h"
#include "data/assets.h"
#include "data/tokenizer/bpe_trainer.h"
#include "data/dataset.h"
#include "core/io.h"
#include "data/file_io.h"
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

// An exclusive flock on OUT.partial.lock, so that two prepares into one output refuse rather
// than interleave; removed when the run ends.
class OutputLock {
 public:
  explicit OutputLock(const fs::path& out) {
    fs::path target = out.filename().empty() ? out.parent_path() : out;
    path_ = target.string() + ".partial.lock";
    try {
      if (!target.parent_path().empty()) io::create_directories(target.parent_path(), "prepare");
    } catch (const IoError& e) {  // the message names the parent; the user typed the output
      throw IoError("prepare", fmt::format("--out {}: {}", target.string(), e.message()), e.hint());
    }
    fd_ = open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0)
      throw IoError("prepare", fmt::format("{}: cannot create: {}", path_.string(), std::strerror(errno)));
    if (flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      close(fd_);
      throw ConfigError("prepare", fmt::format("{}: another gpt2 prepare is writing this output "
                                               "(it holds {})", target.string(), path_.string()),
                        "wait for it to finish, or choose another --out");
    }
  }
  ~OutputLock() {
    std::error_code ec;
    fs::remove(path_, ec);
    close(fd_);
  }
  OutputLock(const OutputLock&) = delete;
  OutputLock& operator=(const OutputLock&) = delete;

 private:
  fs::path path_;
  int fd_ = -1;
};

nlohmann::json split_json(const SplitInfo& s) {
  return {{"shards", s.shards}, {"tokens", s.tokens}, {"documents", s.documents}};
}

// What must match for an interrupted run to be continued: the inputs (by size and time) and
// every option that changes the output. Threads and the memory bound do not.
// One split's finished shards as an interrupted run recorded them in state.json, if the record
// is what prepare writes and every shard it lists is whole; nullopt otherwise, and the run
// starts over: a damaged state must neither reach the dataset nor escape as a library error.
std::optional<ShardStreamState> saved_split(const nlohmann::json& state, const char* name, const fs::path& dir,
                                            uint64_t shard_tokens) {
  if (!state.contains(name) || !state[name].is_object()) return std::nullopt;
  const nlohmann::json& j = state[name];
  ShardStreamState s;
  try {
    s.next_doc = uint64_t(io::get_int(j.contains("next_doc") ? j["next_doc"] : nlohmann::json(), 0, INT64_MAX, "next_doc"));
    s.next_skip = uint64_t(io::get_int(j.contains("next_skip") ? j["next_skip"] : nlohmann::json(), 0, INT64_MAX, "next_skip"));
  } catch (const ConfigError&) {
    return std::nullopt;
  }
  if (!j.contains("shards") || !j["shards"].is_array()) return std::nullopt;
  for (const auto& f : j["shards"]) {
    if (!f.is_string() || f.get<std::string>() != fmt::format("{}_{:06d}.bin", name, s.shards.size()))
      return std::nullopt;
    try {
      if (ShardReader(dir / f.get<std::string>()).size() != shard_tokens) return std::nullopt;
    } catch (const Error&) {
      return std::nullopt;
    }
    s.shards.push_back(f.get<std::string>());
  }
  return s;
}

nlohmann::json fingerprint(const PrepareOptions& o, const std::vector<InputFile>& files) {
  nlohmann::json inputs = nlohmann::json::array();
  for (const auto& f : files) {
    std::error_code ec;
    const auto size = fs::file_size(f.path, ec);
    const auto time = fs::last_write_time(f.path, ec).time_since_epoch().count();
    inputs.push_back({f.path.string(), ec ? 0 : size, ec ? 0 : time});
  }
  return {{"version", kDatasetVersion}, {"inputs", inputs}, {"vocab", o.vocab_dir.string()},
          {"train_vocab", o.train_vocab}, {"val_fraction", o.val_fraction},
          {"shard_tokens", o.shard_tokens}, {"min_chars", o.documents.min_chars},
          {"max_chars", o.documents.max_chars}, {"text_field", o.text_field}};
}

// Tokenizes docs[i].text into docs[i].ids (<|endoftext|> first) on up to tokenizers.size()
// threads; each document is one task, so the ids do not depend on the thread count.
struct Doc {
  uint64_t index = 0;
  bool val = false;
  uint64_t from = 0;  // tokens an interrupted run already wrote
  std::string text;
  std::vector<int32_t> ids;
};

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

}  // namespace

bool is_validation_document(uint64_t i, double f) {
  if (f <= 0) return false;
  return std::floor(double(i + 1) * f + 0.5) > std::floor(double(i) * f + 0.5);
}

PrepareResult prepare_dataset(const PrepareOptions& o) {
  check_options(o);
  auto log = [&](const std::string& s) {
    if (o.log) o.log(s);
  };
  const std::vector<InputFile> files = expand_inputs(o.inputs);
  const bool has_stdin = std::any_of(files.begin(), files.end(), [](auto& f) { return f.is_stdin(); });
  if (has_stdin && o.train_vocab > 0)
    throw ConfigError("prepare", "--train-vocab reads the input twice, and stdin (-) can be read once",
                      "save the text to a file, or use a given vocabulary (--vocab)");
  // Fail before any work on what can be checked up front: missing inputs, a bad vocabulary.
  uint64_t total_bytes = 0;
  for (const auto& f : files) {
    std::error_code ec;
    if (f.is_stdin()) continue;
    if (!fs::exists(f.path, ec))
      throw IoError("prepare", fmt::format("{}: file not found", f.path.string()), "check the --input path");
    io::require_regular_file(f.path, "prepare");  // a FIFO would block the run when it is opened
    total_bytes += fs::file_size(f.path, ec);
  }
  const fs::path vocab_source =
      o.train_vocab > 0 ? fs::path() : o.vocab_dir.empty() ? default_vocab_dir() : o.vocab_dir;
  Vocab vocab;
  if (o.train_vocab == 0) vocab = load_vocab(vocab_source);

  // 1. The staging directory: continue an interrupted run of the same job, else start afresh.
  // One prepare at a time per output: OUT.partial.lock is held (flock) while it runs.
  const OutputLock lock(o.out);
  io::StagingDir staging(o.out, "prepare", /*resumable=*/true);
  const fs::path state_path = staging.path() / "state.json";
  const nlohmann::json fp = fingerprint(o, files);
  nlohmann::json state;
  std::optional<ShardStreamState> saved_train, saved_val;
  std::error_code ec;
  if (!has_stdin && fs::exists(state_path, ec)) {
    try {
      state = io::read_json_file(state_path, "prepare");
      if (!state.is_object() || !state.contains("fingerprint") || state["fingerprint"] != fp ||
          !state.contains("vocab_ready") || !state["vocab_ready"].is_boolean())
        state = nullptr;
    } catch (const Error&) {
      state = nullptr;  // unreadable: start again
    }
    if (state.is_object() && state.contains("train")) {
      saved_train = saved_split(state, "train", staging.path(), o.shard_tokens);
      saved_val = saved_split(state, "val", staging.path(), o.shard_tokens);
      if (!saved_train || !saved_val) state = nullptr;  // damaged: start again
    }
  }
  const bool resuming = !state.is_null();
  if (!resuming) {
    for (const auto& e : fs::directory_iterator(staging.path())) fs::remove_all(e.path());
    state = {{"fingerprint", fp}, {"vocab_ready", false}};
  }
  auto docs_of = [&](const InputFile& f) {
    return DocumentStream(f, o.documents, o.text_field, o.memory_mb * (uint64_t{1} << 20) / 4);
  };

  // 2. The vocabulary: given, GPT-2's, or learned from the training documents only.
  io::create_directories(staging.path() / "vocab", "prepare");
  if (o.train_vocab > 0 && state["vocab_ready"].get<bool>()) {
    vocab = load_vocab(staging.path() / "vocab");
  } else if (o.train_vocab > 0) {
    BpeTrainer trainer;
    uint64_t i = 0;
    std::string doc;
    for (const auto& f : files)
      for (auto ds = docs_of(f); ds.next(doc); ++i)
        if (!is_validation_document(i, o.val_fraction)) trainer.add_text(doc);
    ProgressBar bar("learning vocabulary", o.train_vocab - 257, " merges", o.progress);
    vocab = trainer.train({.vocab_size = o.train_vocab,
                           .on_progress = [&](int64_t done, int64_t) { bar.update(done); }});
    bar.finish();
    save_vocab(vocab, staging.path() / "vocab");
    log(fmt::format("learned a {}-token vocabulary{}", vocab.size(),
                    vocab.size() < o.train_vocab ? " (the text ran out of pairs to merge)" : ""));
  } else {
    copy_vocab_files(vocab_source, staging.path() / "vocab");
  }
  state["vocab_ready"] = true;
  io::write_file_atomic(state_path, state.dump() + "\n", "prepare");

  const int threads = o.threads > 0 ? o.threads : int(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<Tokenizer> toks;
  for (int t = 0; t < threads; ++t) toks.emplace_back(t + 1 < threads ? Vocab(vocab) : std::move(vocab));
  const int32_t eot = toks[0].eot_id();
  const auto vocab_size = static_cast<uint32_t>(toks[0].vocab_size());

  // 3. Stream documents through rounds of parallel tokenizing into the shard files.
  ShardStream train("train", staging.path(), vocab_size, o.shard_tokens);
  ShardStream val("val", staging.path(), vocab_size, o.shard_tokens);
  if (saved_train && saved_val) {
    train.restore(*saved_train);
    val.restore(*saved_val);
    log(fmt::format("resuming {}: {} finished shard(s) kept", staging.path().string(),
                    train.resumed + val.resumed));
  }
  auto as_json = [](const ShardStreamState& s) {
    return nlohmann::json{{"shards", s.shards}, {"next_doc", s.next_doc}, {"next_skip", s.next_skip}};
  };
  const ShardStream::OnShard on_shard = [&](const std::string& file) {
    state["train"] = as_json(train.state());
    state["val"] = as_json(val.state());
    io::write_file_atomic(state_path, state.dump() + "\n", "prepare");
    if (o.on_shard) o.on_shard(file);
  };

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
    DocumentStream ds = docs_of(f);
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

  const uint64_t n_val = val.info.documents;
  if ((o.val_fraction > 0 && n_val == 0) || train.info.documents == 0)
    throw ConfigError("prepare",
                      fmt::format("the input has {} document(s), too few to hold out a "
                                  "fraction {} for validation and keep any for training",
                                  n_docs, o.val_fraction),
                      "add more text, or set --val-fraction 0 to disable the split");
  log(fmt::format("read {} file(s), {:.1f} MB, {} documents ({} for validation)", files.size(),
                  files_done_bytes / 1e6, n_docs, n_val));

  std::vector<std::string> input_names;
  for (const auto& f : files) input_names.push_back(f.path.string());
  nlohmann::json meta = {
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
      {"splits", {{"train", split_json(train.info)}, {"val", split_json(val.info)}}}};
  fs::remove(state_path);
  io::write_file_atomic(staging.path() / "meta.json", meta.dump(2) + "\n", "prepare");
  staging.commit();

  log(fmt::format("wrote {}: {} train tokens in {} shard(s), {} val tokens in {} shard(s), "
                  "vocab size {}", o.out.string(), train.info.tokens, train.info.shards.size(),
                  val.info.tokens, val.info.shards.size(), vocab_size));
  return {vocab_size,           train.info.tokens,    val.info.tokens,
          train.info.documents, val.info.documents,   train.info.shards.size(),
          val.info.shards.size(), train.resumed + val.resumed};
}

}  // namespace keel::data
