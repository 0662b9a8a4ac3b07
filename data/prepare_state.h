// What lets `gpt2 prepare` (prepare.h) continue an interrupted run: OUT.partial/state.json, which
// records the job (its fingerprint), whether the vocabulary is staged and each split's finished
// shards; and OutputLock, which keeps a second prepare out of the same output meanwhile.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "data/doc_stream.h"
#include "data/prepare.h"
#include "data/shard_stream.h"

namespace keel::data {

// An exclusive flock on OUT.partial.lock, so that two prepares into one output refuse rather
// than interleave; removed when the run ends.
class OutputLock {
 public:
  explicit OutputLock(const std::filesystem::path& out);
  ~OutputLock();
  OutputLock(const OutputLock&) = delete;
  OutputLock& operator=(const OutputLock&) = delete;

 private:
  std::filesystem::path path_;
  int fd_ = -1;
};

// state.json of a staging directory: {"fingerprint", "vocab_ready", and once a shard is finished
// "train" and "val": each split's finished shards and where its next shard starts}.
struct PrepareState {
  std::filesystem::path path;
  nlohmann::json json;
  // The finished shards of an interrupted run, when they are continued from.
  std::optional<ShardStreamState> saved_train, saved_val;

  bool vocab_ready() const { return json.at("vocab_ready").get<bool>(); }
  // Records both splits' finished shards (after each one), and saves.
  void record(const ShardStream& train, const ShardStream& val);
  void save() const;
};

// The state that an interrupted run of the same job left in the staging directory, when it is
// whole; otherwise the directory is emptied and a new state begins. Stdin is never continued from.
PrepareState open_prepare_state(const std::filesystem::path& staging, const PrepareOptions& o,
                                const std::vector<InputFile>& files, bool has_stdin);

}  // namespace keel::data
