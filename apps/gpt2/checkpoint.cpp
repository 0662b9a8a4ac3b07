#include "apps/gpt2/checkpoint.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "nn/file_util.h"
#include "nn/safetensors.h"

namespace fs = std::filesystem;

namespace keel::app {

namespace {
constexpr const char* kOp = "checkpoint";

fs::path checkpoints_dir(const fs::path& run_dir) { return run_dir / "checkpoints"; }

// step_00000100 -> 100; nullopt for anything else (temporaries, stray files).
std::optional<int64_t> step_of(const fs::path& p) {
  std::string n = p.filename().string();
  if (n.rfind("step_", 0) != 0 || n.size() <= 5) return std::nullopt;
  int64_t step = 0;
  for (char c : n.substr(5)) {
    if (c < '0' || c > '9') return std::nullopt;
    step = step * 10 + (c - '0');
  }
  return step;
}

std::vector<std::pair<int64_t, fs::path>> list_checkpoints(const fs::path& run_dir) {
  std::vector<std::pair<int64_t, fs::path>> out;
  std::error_code ec;
  if (!fs::is_directory(checkpoints_dir(run_dir), ec)) return out;
  for (const auto& e : fs::directory_iterator(checkpoints_dir(run_dir)))
    if (auto s = step_of(e.path()); s && fs::exists(e.path() / "trainer.json")) out.emplace_back(*s, e.path());
  std::sort(out.begin(), out.end());
  return out;
}

// Makes the rename of a directory entry durable.
void fsync_dir(const fs::path& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}
}  // namespace

fs::path save_checkpoint(const fs::path& run_dir, int64_t step, const nn::NamedTensors& model,
                         const nn::NamedTensors& optimizer, const nlohmann::json& trainer, int64_t keep) {
  fs::path root = checkpoints_dir(run_dir);
  fs::create_directories(root);
  fs::path final_dir = root / fmt::format("step_{:08d}", step);
  fs::path tmp = root / fmt::format(".tmp-step_{:08d}-{}", step, ::getpid());
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  try {
    // Each file is itself written atomically and fsync'd; the directory rename publishes them together.
    nn::save_safetensors(tmp / "model.safetensors", model, {{"format", "keel-checkpoint"}});
    nn::save_safetensors(tmp / "optimizer.safetensors", optimizer);
    nn::write_file_atomic(tmp / "trainer.json", trainer.dump(2) + "\n", kOp);
    if (fs::exists(final_dir)) fs::remove_all(final_dir);  // a re-run of the same step replaces it
    fs::rename(tmp, final_dir);
    fsync_dir(root);
  } catch (...) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    throw;
  }
  auto all = list_checkpoints(run_dir);
  for (size_t i = 0; i + keep < all.size(); ++i) fs::remove_all(all[i].second);
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
  for (const char* f : {"model.safetensors", "optimizer.safetensors", "trainer.json"})
    if (!fs::exists(dir / f))
      throw IoError(kOp, fmt::format("{}: missing {}", dir.string(), f),
                    "the checkpoint is incomplete; delete it to resume from the one before");
  c.model = nn::load_safetensors(dir / "model.safetensors").tensors;
  c.optimizer = nn::load_safetensors(dir / "optimizer.safetensors").tensors;
  std::string text = nn::read_whole_file(dir / "trainer.json", kOp);
  try {
    c.trainer = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw IoError(kOp, fmt::format("{}: malformed JSON: {}", (dir / "trainer.json").string(), e.what()),
                  "the checkpoint is corrupt; delete it to resume from the one before");
  }
  if (!c.trainer.is_object() || !c.trainer.contains("step"))
    throw IoError(kOp, fmt::format("{}: no 'step' field", (dir / "trainer.json").string()));
  return c;
}

}  // namespace keel::app
