#include "apps/gpt2/run/checkpoint.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <vector>

#include "core/error.h"
#include "core/io.h"
#include "nn/safetensors.h"

namespace fs = std::filesystem;

namespace keel::app {

namespace {
constexpr const char* kOp = "checkpoint";

fs::path checkpoints_dir(const fs::path& run_dir) { return run_dir / "checkpoints"; }

// step_00000100 -> 100; nullopt for anything else (temporaries, stray files, and numbers too
// large for int64, which would otherwise overflow).
std::optional<int64_t> step_of(const fs::path& p) {
  const std::string n = p.filename().string();
  if (n.rfind("step_", 0) != 0 || n.size() <= 5 || n[5] == '-') return std::nullopt;
  int64_t step = 0;
  if (!io::parse_int(std::string_view(n).substr(5), 0, INT64_MAX, step)) return std::nullopt;
  return step;
}

std::vector<std::pair<int64_t, fs::path>> list_checkpoints(const fs::path& run_dir) {
  std::vector<std::pair<int64_t, fs::path>> out;
  std::error_code ec;
  if (!fs::is_directory(checkpoints_dir(run_dir), ec)) return out;
  for (const fs::path& e : io::list_directory(checkpoints_dir(run_dir), kOp))
    if (auto s = step_of(e); s && fs::exists(e / "trainer.json", ec)) out.emplace_back(*s, e);
  std::sort(out.begin(), out.end());
  return out;
}

// Deletes a checkpoint directory so that no reader ever lists it half-deleted: it is first
// renamed to a temporary name (atomic; a kill after this leaves only a temporary, which
// remove_stale_temporaries cleans), the rename made durable, and only then deleted.
void remove_checkpoint_dir(const fs::path& dir) {
  const fs::path trash = dir.parent_path() / fmt::format(".del-{}-{}", dir.filename().string(), ::getpid());
  io::rename(dir, trash, kOp);
  io::fsync_dir(dir.parent_path());
  std::error_code ec;
  fs::remove_all(trash, ec);  // what stays is a temporary that the next run cleans
}

// The pid that wrote a temporary ".tmp-step_00000100-1234" or ".del-step_00000100-1234".
std::optional<int64_t> owner_pid(const std::string& name) {
  if (name.rfind(".tmp-step_", 0) != 0 && name.rfind(".del-step_", 0) != 0) return std::nullopt;
  const size_t dash = name.rfind('-');
  int64_t pid = 0;
  if (dash == std::string::npos || !io::parse_int(std::string_view(name).substr(dash + 1), 1, INT32_MAX, pid))
    return std::nullopt;
  return pid;
}
}  // namespace

void remove_stale_temporaries(const fs::path& run_dir) {
  std::error_code ec;
  if (!fs::is_directory(checkpoints_dir(run_dir), ec)) return;
  for (const fs::path& e : io::list_directory(checkpoints_dir(run_dir), kOp)) {
    const auto pid = owner_pid(e.filename().string());
    // Ours (a leftover of an earlier process with the same pid) or of a process that is gone.
    if (pid && (*pid == ::getpid() || (::kill(static_cast<pid_t>(*pid), 0) != 0 && errno == ESRCH)))
      io::remove_all(e, kOp);
  }
}

fs::path save_checkpoint(const fs::path& run_dir, int64_t step, const NamedTensors& model,
                         const NamedTensors& optimizer, const nlohmann::json& trainer, int64_t keep) {
  fs::path root = checkpoints_dir(run_dir);
  io::create_directories(root, kOp);
  fs::path final_dir = root / fmt::format("step_{:08d}", step);
  fs::path tmp = root / fmt::format(".tmp-step_{:08d}-{}", step, ::getpid());
  io::remove_all(tmp, kOp);
  io::create_directories(tmp, kOp);
  try {
    // Each file is itself written atomically and fsync'd; the directory rename publishes them together.
    nn::save_safetensors(tmp / "model.safetensors", model, {{"format", "keel-checkpoint"}});
    nn::save_safetensors(tmp / "optimizer.safetensors", optimizer);
    io::write_file_atomic(tmp / "trainer.json", trainer.dump(2) + "\n", kOp);
    std::error_code ec;
    if (fs::exists(final_dir, ec)) remove_checkpoint_dir(final_dir);  // a re-run of the same step replaces it
    io::rename(tmp, final_dir, kOp);
    io::fsync_dir(root);
  } catch (...) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    throw;
  }
  auto all = list_checkpoints(run_dir);
  for (size_t i = 0; i + keep < all.size(); ++i) remove_checkpoint_dir(all[i].second);
  return final_dir;
}

std::optional<fs::path> latest_checkpoint(const fs::path& run_dir) {
  auto all = list_checkpoints(run_dir);
  if (all.empty()) return std::nullopt;
  return all.back().second;
}

Checkpoint load_checkpoint(const fs::path& dir) {
  Checkpoint c;
  c.dir = dir;
  const std::string corrupt = "the checkpoint is corrupt; delete it to resume from the one before";
  for (const char* f : {"model.safetensors", "optimizer.safetensors", "trainer.json"})
    if (std::error_code ec; !fs::exists(dir / f, ec))
      throw IoError(kOp, fmt::format("{}: missing {}", dir.string(), f),
                    "the checkpoint is incomplete; delete it to resume from the one before");
  c.model = nn::load_safetensors(dir / "model.safetensors").tensors;
  c.optimizer = nn::load_safetensors(dir / "optimizer.safetensors").tensors;
  const fs::path tj = dir / "trainer.json";
  c.trainer = io::read_json_file(tj, kOp);
  auto bad = [&](const std::string& msg) { return IoError(kOp, fmt::format("{}: {}", tj.string(), msg), corrupt); };
  if (!c.trainer.is_object() || !c.trainer.contains("step")) throw bad("no 'step' field");
  // The state must agree with the directory it sits in: a step that disagrees would make resume
  // truncate the metrics log and overwrite newer checkpoints.
  int64_t step = 0;
  try {
    step = io::get_int(c.trainer["step"], 0, INT64_MAX, "field 'step'");
  } catch (const ConfigError& e) {
    throw bad(e.message());
  }
  if (auto named = step_of(dir); named && *named != step)
    throw bad(fmt::format("step {} disagrees with the directory name (step {})", step, *named));
  // The fields resume reads, checked here so that no raw library message or cast escapes later.
  if (!c.trainer.contains("loader") || !c.trainer["loader"].is_object()) throw bad("no 'loader' object");
  const auto& rng = c.trainer.contains("dropout_rng") ? c.trainer["dropout_rng"] : nlohmann::json();
  if (!rng.is_object() || !rng.contains("seed") || !rng.contains("offset") || !rng["seed"].is_number_unsigned() ||
      !rng["offset"].is_number_unsigned())
    throw bad("'dropout_rng' must hold non-negative integers 'seed' and 'offset'");
  if (c.trainer.contains("elapsed_s") && !c.trainer["elapsed_s"].is_number()) throw bad("'elapsed_s' is not a number");
  if (c.trainer.contains("recent_losses")) {
    const auto& r = c.trainer["recent_losses"];
    if (!r.is_array() || !std::all_of(r.begin(), r.end(), [](const auto& v) { return v.is_number(); }))
      throw bad("'recent_losses' is not an array of numbers");
  }
  return c;
}

}  // namespace keel::app
