// ZeRO stage 1 (Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion
// Parameter Models", 2020) for AdamW: the optimizer state is sharded over the ranks.
//
// Plain data parallelism keeps AdamW's m and v (and the f32 master of a bf16/f16 parameter) on
// every rank: 8 to 12 bytes per parameter, replicated. Here the parameters are laid end to end
// in one flat index space (parameter order, padded to a multiple of the world size W) and rank
// r owns the slice [r*S, (r+1)*S), S = padded / W. One optimizer step is:
//
//   reduce_gradients()   every rank's gradients -> this rank's slice of their mean (reduce-scatter)
//   clip_grad_norm(c)    the global norm: squares summed over the slice, then over the ranks
//   step(lr)             AdamW on the slice only, then the parameters all-gathered from the owners
//
// so each rank holds 1/W of the state. The reduce-scatter and the all-gather run in chunks of
// about chunk_bytes (every rank's piece of one stretch of its slice), so the packed buffers they
// need stay that small instead of the size of the whole model. The arithmetic is AdamW's own: the slice is handed to an
// ordinary AdamW as "segments" (the part of one parameter that falls into the slice, a view of
// that parameter), so CPU and CUDA, masters, bias correction and the checked state loading are
// those of optim/adamw.h. Results equal plain data parallelism up to the order in which the
// gradient norm's partial sums are added (f64), i.e. to f32 rounding.
//
// state() gathers the full state on every rank under AdamW's names, and load_state() takes it
// back, so a checkpoint does not depend on the world size or on ZeRO: a ZeRO run can resume
// without ZeRO, at another world size, and the other way round.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/dist/comm.h"
#include "optim/adamw.h"
#include "optim/data_parallel.h"

namespace keel::optim {

class ZeroAdamW final : public DataParallelOptimizer {
 public:
  // params: the same names, shapes and dtypes in the same order on every rank; contiguous,
  // f32, bf16 or f16 (ConfigError / DTypeError otherwise). reduce_dtype: the dtype gradients
  // travel in during the reduce-scatter (f32, or bf16 for half the bytes); the mean always
  // lands in f32.
  ZeroAdamW(std::shared_ptr<Communicator> comm, NamedTensors params, AdamWOptions opt = {},
            DType reduce_dtype = DType::f32, size_t chunk_bytes = size_t{25} << 20);
  ~ZeroAdamW() override;

  // As AdamW::zero_grad: every parameter drops its gradient, bf16/f16 ones keep an f32 buffer
  // that the micro-batches' gradients are written and added into.
  void zero_grad() override;
  // Collective. Every parameter's local gradient (undefined counts as zero) -> this rank's
  // slice of the mean over ranks, in f32. The parameters' own gradients are left as they were.
  void reduce_gradients();
  // This rank's slice of the gradient *= s (loss unscaling).
  void scale_gradients(double s);
  // Collective. The L2 norm of the whole mean gradient (f64 squares of each slice, summed over
  // the ranks). When max_norm > 0 and the norm exceeds it, the slice is scaled by
  // max_norm / (norm + 1e-6), as clip_grad_norm does. inf/NaN when any element is.
  double clip_grad_norm(double max_norm);
  // Collective. AdamW on this rank's slice with learning rate lr, then every rank receives
  // every parameter from its owners (all-gather): the parameters are identical on all ranks.
  void step(double lr) override;

  // The step of the DataParallelOptimizer interface: no reduction during the backward; then
  // reduce_gradients, scale_gradients(1 / loss scale) and clip_grad_norm.
  std::unique_ptr<GradReadyHookGuard> backward_hook() override { return nullptr; }
  double finish_gradients(LossScaler& scaler, double max_norm, StepReadback* readback = nullptr) override;
  NamedTensors gather_state(bool keep) const override;
  std::string summary() const override;  // the state's size on this rank against unsharded

  // Collective. The full state, named as AdamW::state() names it (on every rank).
  NamedTensors state() const;
  // Takes AdamW::state()-shaped state (from any world size, with or without ZeRO) and keeps
  // this rank's slice of it. Bad entries: the errors AdamW::load_state raises, on every rank.
  void load_state(const NamedTensors& state) override;

  const NamedTensors& params() const { return params_; }
  std::vector<Tensor> param_tensors() const { return tensors_of(params_); }
  int64_t step_count() const { return steps_; }
  double lr() const { return opt_.lr; }
  int64_t numel() const { return total_; }         // parameters, all ranks together
  int64_t shard_numel() const { return shard_; }   // elements this rank owns (padded)
  // Bytes of optimizer state this rank holds (m, v, masters of its slice).
  int64_t state_bytes() const;
  // Bytes the same state takes without sharding (what every rank would hold).
  int64_t unsharded_state_bytes() const;

 private:
  // The part of parameter `param` that lies in this rank's slice.
  struct Segment {
    size_t param = 0;
    int64_t begin = 0, len = 0;  // elements [begin, begin + len) of the flattened parameter
    int64_t at = 0;              // where they start in this rank's slice
    std::string name;            // "<parameter>@<begin>", its name in the inner AdamW
  };
  Tensor slice_of(const Tensor& flat, int64_t at, const Shape& shape) const;
  // (S) of this rank's slice -> (padded) on every rank, the owners' values.
  Tensor gather(const Tensor& shard) const;
  // Copies between elements [a, a + n) of the flat space, as held by the tensors `of(k)` of the
  // parameters (their gradients or themselves; undefined ones read as zero and are not
  // written), and buf[at, at + n).
  template <typename Of> void pack(Of of, int64_t a, int64_t n, Tensor& buf, int64_t at) const;
  template <typename Of> void unpack(Of of, int64_t a, int64_t n, const Tensor& buf, int64_t at) const;

  std::shared_ptr<Communicator> comm_;
  NamedTensors params_;
  AdamWOptions opt_;
  DType reduce_dtype_;
  std::vector<int64_t> offset_;   // parameter k starts at offset_[k] in the flat space
  int64_t total_ = 0, shard_ = 0;
  int64_t chunk_ = 1;             // elements per rank in one reduce-scatter / all-gather
  std::vector<Segment> segments_;
  std::unique_ptr<AdamW> inner_;  // AdamW over the segments (null when the slice is padding only)
  Tensor grad_shard_;             // (S) f32: this rank's slice of the mean gradient
  std::vector<Tensor> grad32_;    // f32 accumulation buffers of bf16/f16 parameters
  int64_t steps_ = 0;
};

}  // namespace keel::optim
