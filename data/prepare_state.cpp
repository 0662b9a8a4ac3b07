// The output lock and the state of an interrupted prepare (see prepare_state.h).
#include "data/prepare_state.h"

#include <fmt/format.h>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cstring>

#include "core/error.h"
#include "core/io.h"
#include "data/dataset.h"
#include "data/shard.h"

namespace keel::data {

namespace fs = std::filesystem;

OutputLock::OutputLock(const fs::path& out) {
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

OutputLock::~OutputLock() {
  std::error_code ec;
  fs::remove(path_, ec);
  close(fd_);
}

namespace {

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

// What must match for an interrupted run to be continued: the inputs (by size and time) and
// every option that changes the output. Threads and the memory bound do not.
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

nlohmann::json as_json(const ShardStreamState& s) {
  return nlohmann::json{{"shards", s.shards}, {"next_doc", s.next_doc}, {"next_skip", s.next_skip}};
}

}  // namespace

void PrepareState::record(const ShardStream& train, const ShardStream& val) {
  json["train"] = as_json(train.state());
  json["val"] = as_json(val.state());
  save();
}

void PrepareState::save() const { io::write_file_atomic(path, json.dump() + "\n", "prepare"); }

PrepareState open_prepare_state(const fs::path& staging, const PrepareOptions& o, const std::vector<InputFile>& files,
                                bool has_stdin) {
  PrepareState state{staging / "state.json", nullptr, std::nullopt, std::nullopt};
  const nlohmann::json fp = fingerprint(o, files);
  std::error_code ec;
  if (!has_stdin && fs::exists(state.path, ec)) {
    try {
      state.json = io::read_json_file(state.path, "prepare");
      const nlohmann::json& j = state.json;
      if (!j.is_object() || !j.contains("fingerprint") || j["fingerprint"] != fp || !j.contains("vocab_ready") ||
          !j["vocab_ready"].is_boolean())
        state.json = nullptr;
    } catch (const Error&) {
      state.json = nullptr;  // unreadable: start again
    }
    if (state.json.is_object() && state.json.contains("train")) {
      state.saved_train = saved_split(state.json, "train", staging, o.shard_tokens);
      state.saved_val = saved_split(state.json, "val", staging, o.shard_tokens);
      if (!state.saved_train || !state.saved_val) state.json = nullptr;  // damaged: start again
    }
  }
  if (state.json.is_null()) {
    for (const auto& e : fs::directory_iterator(staging)) fs::remove_all(e.path());
    state.json = {{"fingerprint", fp}, {"vocab_ready", false}};
  }
  return state;
}

}  // namespace keel::data
