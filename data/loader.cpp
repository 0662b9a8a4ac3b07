// Deterministic, rank-sharded batch loaders (see loader.h for the sampling scheme).
#include "data/loader.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/io.h"

namespace keel::data {

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
uint64_t hash2(uint64_t a, uint64_t b) { return splitmix64(splitmix64(a) ^ (b + 0x632BE59BD9B4E019ull)); }

// A keyed bijection of [0, n): a balanced Feistel network over the smallest even-bit power of
// two >= n, cycle-walking values that land outside [0, n) (fewer than 4 steps on average).
uint64_t permute(uint64_t x, uint64_t n, uint64_t key) {
  int bits = 2;
  while ((uint64_t{1} << bits) < n) bits += 2;
  const int half = bits / 2;
  const uint64_t mask = (uint64_t{1} << half) - 1;
  do {
    uint64_t l = x >> half, r = x & mask;
    for (uint64_t round = 0; round < 6; ++round) {
      const uint64_t f = hash2(key + round, r) & mask;
      const uint64_t nl = r;
      r = l ^ f;
      l = nl;
    }
    x = (l << half) | r;
  } while (x >= n);
  return x;
}

void check_options(const LoaderOptions& o, const char* op) {
  if (o.batch_size <= 0 || o.seq_len <= 0)
    throw ValueError(op, fmt::format("batch size {} and sequence length {} must be positive",
                                     o.batch_size, o.seq_len));
  if (o.world_size <= 0 || o.rank < 0 || o.rank >= o.world_size)
    throw ValueError(op, fmt::format("rank {} is outside world size {}", o.rank, o.world_size));
}

Batch empty_batch(const LoaderOptions& o) {
  Batch b;
  b.batch_size = o.batch_size, b.seq_len = o.seq_len;
  b.inputs.assign(o.batch_size * o.seq_len, 0);
  b.targets.assign(o.batch_size * o.seq_len, kIgnoreTarget);
  return b;
}

}  // namespace

// ---- LoaderState ---------------------------------------------------------------------------

std::string LoaderState::to_json() const {
  return nlohmann::json{{"seed", seed}, {"step", step}, {"batch_size", batch_size},
                        {"seq_len", seq_len}, {"world_size", world_size},
                        {"split_tokens", split_tokens}}.dump();
}

LoaderState LoaderState::from_json(const std::string& text) {
  static const char* kOp = "LoaderState::from_json";
  const auto j = io::parse_json(text, "loader state", kOp);
  // Range-checked, so a hostile 1e30 or 2^64 - 1 never becomes a position or a size.
  auto integer = [&](const char* key, int64_t lo, int64_t hi) {
    if (!j.is_object() || !j.contains(key))
      throw IoError(kOp, fmt::format("malformed loader state: no field \"{}\"", key));
    try {
      return io::get_int(j[key], lo, hi, fmt::format("loader state field \"{}\"", key));
    } catch (const ConfigError& e) {
      throw IoError(kOp, "malformed " + e.message());
    }
  };
  LoaderState s;
  s.seed = static_cast<uint64_t>(integer("seed", 0, INT64_MAX));
  s.step = static_cast<uint64_t>(integer("step", 0, INT64_MAX));
  s.batch_size = integer("batch_size", 1, INT32_MAX);
  s.seq_len = integer("seq_len", 1, INT32_MAX);
  s.world_size = integer("world_size", 1, INT32_MAX);
  s.split_tokens = static_cast<uint64_t>(integer("split_tokens", 0, INT64_MAX));
  return s;
}

// ---- TrainLoader ---------------------------------------------------------------------------

TrainLoader::TrainLoader(std::shared_ptr<const TokenSplit> split, const LoaderOptions& o)
    : split_(std::move(split)), o_(o) {
  check_options(o_, "TrainLoader");
  const uint64_t n = split_->size(), w = o_.seq_len + 1;
  // Offsets go up to T, so count the windows that fit after the largest one.
  windows_ = n > static_cast<uint64_t>(o_.seq_len) ? (n - o_.seq_len) / w : 0;
  const uint64_t global = o_.batch_size * o_.world_size;
  if (windows_ < global)
    throw ConfigError("TrainLoader",
                      fmt::format("the split has {} tokens: {} windows of {} tokens, fewer than "
                                  "one global batch of {} (world size {} x batch {})",
                                  n, windows_, w, global, o_.world_size, o_.batch_size),
                      "use more data, a shorter sequence length or a smaller batch");
}

uint64_t TrainLoader::window_start(uint64_t step, int64_t b) const {
  const uint64_t g = (step * o_.world_size + o_.rank) * o_.batch_size + b;
  const uint64_t epoch = g / windows_;
  const uint64_t key = hash2(o_.seed, epoch);
  const uint64_t offset = hash2(key, 0xA5A5A5A5ull) % (o_.seq_len + 1);
  return offset + permute(g % windows_, windows_, key) * (o_.seq_len + 1);
}

Batch TrainLoader::batch_at(uint64_t step) const {
  Batch batch = empty_batch(o_);
  const int64_t T = o_.seq_len;
  std::vector<int32_t> window(T + 1);
  for (int64_t b = 0; b < o_.batch_size; ++b) {
    split_->read(window_start(step, b), T + 1, window.data());
    std::copy_n(window.begin(), T, batch.inputs.begin() + b * T);
    std::copy_n(window.begin() + 1, T, batch.targets.begin() + b * T);
  }
  batch.valid_targets = o_.batch_size * T;
  return batch;
}

LoaderState TrainLoader::state() const {
  return {o_.seed, step_, o_.batch_size, o_.seq_len, o_.world_size, split_->size()};
}

void TrainLoader::restore(const LoaderState& s) {
  LoaderState mine = state();
  mine.step = s.step;
  if (!(mine == s))
    throw ConfigError("TrainLoader::restore",
                      fmt::format("the saved loader state {} does not match this loader {}",
                                  s.to_json(), mine.to_json()),
                      "resume with the same seed, batch size, sequence length, world size "
                      "and dataset");
  step_ = s.step;
}

// ---- EvalLoader ----------------------------------------------------------------------------

EvalLoader::EvalLoader(std::shared_ptr<const TokenSplit> split, const LoaderOptions& o)
    : split_(std::move(split)), o_(o) {
  check_options(o_, "EvalLoader");
  const uint64_t n = split_->size();
  windows_ = n >= 2 ? (n - 1 + o_.seq_len - 1) / o_.seq_len : 0;
  const uint64_t global = o_.batch_size * o_.world_size;
  batches_ = (windows_ + global - 1) / global;
}

Batch EvalLoader::batch_at(uint64_t index) const {
  Batch batch = empty_batch(o_);
  const int64_t T = o_.seq_len;
  const uint64_t n = split_->size();
  std::vector<int32_t> window(T + 1);
  for (int64_t b = 0; b < o_.batch_size; ++b) {
    const uint64_t k = (index * o_.world_size + o_.rank) * o_.batch_size + b;
    if (k >= windows_) break;  // padding rows
    const uint64_t start = k * T;
    const uint64_t len = std::min<uint64_t>(T + 1, n - start);  // >= 2 by construction
    split_->read(start, len, window.data());
    std::copy_n(window.begin(), len - 1, batch.inputs.begin() + b * T);
    std::copy_n(window.begin() + 1, len - 1, batch.targets.begin() + b * T);
    batch.valid_targets += static_cast<int64_t>(len - 1);
  }
  return batch;
}

bool EvalLoader::next(Batch& batch) {
  if (next_ >= batches_) return false;
  batch = batch_at(next_++);
  return true;
}

}  // namespace keel::data
