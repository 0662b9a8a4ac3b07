// Whether keel's results must be the same bits on every run: on by default, the promise that
// makes an interrupted run resume bit-exactly and a data-parallel run independent of its world
// size. PyTorch's torch.use_deterministic_algorithms the other way round: keel is deterministic
// unless a program asks otherwise.
//
// One kernel has a faster order-dependent path today: the attention backward on a GPU (bf16 and
// f16, ops/cuda/attention_mma_backward.cu). Deterministic, the key tiles add their shares of a
// query tile's dQ in a fixed order, each waiting for the one before; off, they add them as
// they finish (f32 atomics, as FlashAttention-2 does), so dQ's rounding, and everything trained
// from it, can differ from run to run. Everything else is deterministic either way.
#pragma once

namespace keel {

void set_deterministic(bool on);
bool deterministic();

// Sets the mode for a scope and restores the previous one after it.
class DeterministicGuard {
 public:
  explicit DeterministicGuard(bool on) : previous_(deterministic()) { set_deterministic(on); }
  ~DeterministicGuard() { set_deterministic(previous_); }
  DeterministicGuard(const DeterministicGuard&) = delete;
  DeterministicGuard& operator=(const DeterministicGuard&) = delete;

 private:
  bool previous_;
};

}  // namespace keel
