// Batches of (B, T+1) token windows for training and evaluation, independent of tensors.
//
// Training (TrainLoader): each epoch cuts the split into disjoint windows of T+1 tokens,
// window k covering [off + k(T+1), off + (k+1)(T+1)) with a per-epoch offset off in [0, T],
// and visits them in a pseudo-random order: a keyed bijection (a Feistel network with cycle
// walking) of the window numbers, keyed by hash(seed, epoch). Global sample g = step*R*B +
// rank*B + b (R ranks, batch B per rank) is window perm_epoch(g mod W) of epoch g div W, with
// W windows per epoch. Hence:
//   - any step's batch is computed directly from (seed, step, rank), without replaying;
//   - within an epoch no window is used twice, so ranks see disjoint windows;
//   - R ranks with batch B see exactly the windows one rank with batch R*B sees.
// Resuming needs only the step: state() / restore() carry it with the settings to check.
//
// Evaluation (EvalLoader): windows of T inputs at stride T, so the targets of all windows
// together are every token of the split after the first, exactly once. Rank r takes every
// R-th window; the last window may be short and missing rows are padding: padded targets are
// kIgnoreTarget and padded inputs 0. Every rank gets the same number of batches.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace keel::data {

// The target of a padded position: -100, cross_entropy's ignore index (Hugging Face's and
// PyTorch's), so a batch goes to the loss as it is. data/ does not see ops/; tests/train checks
// that the two agree.
inline constexpr int32_t kIgnoreTarget = -100;

struct Batch {
  int64_t batch_size = 0, seq_len = 0;  // B, T
  std::vector<int32_t> inputs;          // B*T, row-major
  std::vector<int32_t> targets;         // B*T, row-major; inputs shifted by one, or kIgnoreTarget
  int64_t valid_targets = 0;            // targets that are not kIgnoreTarget
};

struct LoaderOptions {
  // B and T have no default here: they are the run's (TrainConfig, the model's context), and a
  // loader left at 0 is refused (ValueError).
  int64_t batch_size = 0;  // B, per rank
  int64_t seq_len = 0;     // T
  uint64_t seed = 0;
  int64_t rank = 0;
  int64_t world_size = 1;  // R
};

// What a TrainLoader needs to resume: the next step, and the settings it must match.
struct LoaderState {
  uint64_t seed = 0, step = 0;
  int64_t batch_size = 0, seq_len = 0, world_size = 0;
  uint64_t split_tokens = 0;

  std::string to_json() const;
  static LoaderState from_json(const std::string& text);  // IoError if malformed
  bool operator==(const LoaderState&) const = default;
};

class TrainLoader {
 public:
  // ConfigError if the split has fewer windows than one global batch (R*B).
  TrainLoader(std::shared_ptr<const TokenSplit> split, const LoaderOptions& options);

  Batch batch_at(uint64_t step) const;  // pure: the batch of any step
  Batch next() { return batch_at(step_++); }
  uint64_t step() const { return step_; }
  uint64_t windows_per_epoch() const { return windows_; }
  // Start offset (in the split) of sample b of this rank at step; what batch_at reads.
  uint64_t window_start(uint64_t step, int64_t b) const;

  LoaderState state() const;
  // ConfigError when the state was saved with other settings or another split.
  void restore(const LoaderState& state);

 private:
  std::shared_ptr<const TokenSplit> split_;
  LoaderOptions o_;
  uint64_t windows_ = 0, step_ = 0;
};

class EvalLoader {
 public:
  EvalLoader(std::shared_ptr<const TokenSplit> split, const LoaderOptions& options);

  uint64_t num_batches() const { return batches_; }  // the same on every rank
  bool next(Batch& batch);                           // false after the last batch
  void reset() { next_ = 0; }
  Batch batch_at(uint64_t index) const;

 private:
  std::shared_ptr<const TokenSplit> split_;
  LoaderOptions o_;
  uint64_t windows_ = 0, batches_ = 0, next_ = 0;
};

}  // namespace keel::data
