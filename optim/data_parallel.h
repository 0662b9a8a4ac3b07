// The optimizer of a data-parallel training step: one interface, whichever way the ranks hold
// AdamW's state.
//
//   ReplicatedAdamW (below)       every rank holds the whole state (plain data parallelism, as
//                                 PyTorch DDP): a GradBucketer averages the gradients over the
//                                 ranks during the backward, then every rank runs the same AdamW.
//   ZeroAdamW (optim/zero_adamw.h) each rank holds 1/W of the state (ZeRO-1).
//
// A training step reads the same for both (apps/gpt2/train/trainer.cpp):
//
//   opt.zero_grad();
//   for each micro-batch: { auto hook = last ? opt.backward_hook() : nullptr; loss.backward(); }
//   double norm = opt.finish_gradients(scaler, clip, &readback);  // mean over ranks, unscaled, clipped
//   if (std::isfinite(norm)) opt.step(lr);
//
// or, where decides_on_device(), all of it without a read of the device:
//   opt.finish_step_on_device(scaler, clip, lr, readback, loss_slot, scale_slot);
//
// At world size 1 both are plain AdamW (the collectives return at once).
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "core/autograd.h"
#include "core/dist/comm.h"
#include "core/named_tensors.h"
#include "optim/adamw.h"
#include "optim/grad_bucketer.h"
#include "optim/loss_scaler.h"
#include "optim/step_readback.h"

namespace keel::optim {

class DataParallelOptimizer {
 public:
  virtual ~DataParallelOptimizer() = default;

  // Before the first backward of every step (AdamW::zero_grad: f32 buffers for bf16/f16 parameters).
  virtual void zero_grad() = 0;
  // Installed around the backward of a step's last micro-batch: gradients that are final start
  // their reduction while the backward goes on. Null when the optimizer reduces afterwards.
  virtual std::unique_ptr<GradReadyHookGuard> backward_hook() = 0;
  // Collective. After the last backward: every gradient becomes the mean over ranks (or this
  // rank's slice of it), divided by the loss scale, then clipped to max_norm (0 = no clipping):
  // ZeRO scales its slice; the replicated optimizer keeps the clip's factor for step(), which
  // applies it as AdamW reads each gradient (the same bits, one pass over the gradients fewer).
  // Returns the global L2 norm before clipping, summed in f64: inf or NaN exactly when some
  // gradient element is (which a step must not apply, and which f16's loss scaler backs off on).
  // With a readback, the step's other scalars come to the host in the same copy as the norm:
  // readback->read() has been called on return.
  virtual double finish_gradients(LossScaler& scaler, double max_norm, StepReadback* readback = nullptr) = 0;
  // Collective. AdamW with learning rate lr; the parameters end identical on every rank.
  virtual void step(double lr) = 0;

  // Whether finish_step_on_device can run: the host then never waits for the device between
  // steps, and reads the steps' scalars when it logs. False where the decision needs the host:
  // several ranks (each rank's loss is its own until the host averages them), ZeRO.
  virtual bool decides_on_device() const { return false; }
  // finish_gradients, step(lr) exactly when the norm and readback[loss_slot] are finite, and
  // scaler.update(norm not finite), with nothing read back: the sum of squares lands in
  // readback's kGradSumSq slot, the device takes the decision (AdamW::step_gated), and the new
  // loss scale lands in readback[scale_slot] (LossScaler::update_in_step; the scaler should keep
  // its state on the device, LossScaler::keep_on_device). Only where decides_on_device.
  virtual void finish_step_on_device(LossScaler& scaler, double max_norm, double lr, StepReadback& readback,
                                     int64_t loss_slot, int64_t scale_slot);

  // Collective: every rank calls it. The state to checkpoint (AdamW::state()'s names, whatever
  // the world size) where `keep` is true; elsewhere possibly empty, as a replicated state need
  // not be copied on ranks that do not write it.
  virtual NamedTensors gather_state(bool keep) const = 0;
  // AdamW::state()-shaped state, from any world size, with or without sharding.
  virtual void load_state(const NamedTensors& state) = 0;
  // One line for the run's start-up message ("" when there is nothing beyond AdamW to say).
  virtual std::string summary() const = 0;
};

class ReplicatedAdamW final : public DataParallelOptimizer {
 public:
  // params and comm as GradBucketer takes them; reduce_dtype: f32, or bf16 for half the bytes.
  ReplicatedAdamW(std::shared_ptr<Communicator> comm, NamedTensors params, AdamWOptions opt, DType reduce_dtype,
                  size_t bucket_bytes);
  ~ReplicatedAdamW() override;

  void zero_grad() override { adamw_.zero_grad(); }
  std::unique_ptr<GradReadyHookGuard> backward_hook() override;
  double finish_gradients(LossScaler& scaler, double max_norm, StepReadback* readback = nullptr) override;
  void step(double lr) override;  // AdamW with the clip's factor finish_gradients found
  bool decides_on_device() const override { return world_ == 1; }
  void finish_step_on_device(LossScaler& scaler, double max_norm, double lr, StepReadback& readback, int64_t loss_slot,
                             int64_t scale_slot) override;
  NamedTensors gather_state(bool keep) const override { return keep ? adamw_.state() : NamedTensors{}; }
  void load_state(const NamedTensors& state) override { adamw_.load_state(state); }
  std::string summary() const override { return ""; }

 private:
  // Both finishes' first part: every gradient reduced over the ranks and divided by the loss
  // scale, max_norm checked. Returns the parameters.
  std::vector<Tensor> reduce_and_unscale(LossScaler& scaler, double max_norm);

  AdamW adamw_;
  GradBucketer sync_;
  double clip_ = 1.0;  // the factor of the last finish_gradients' clip, applied by step()
  int world_;
};

// ZeRO stage 0 (ReplicatedAdamW) or 1 (ZeroAdamW); ConfigError for another stage.
std::unique_ptr<DataParallelOptimizer> make_data_parallel_adamw(std::shared_ptr<Communicator> comm,
                                                                NamedTensors params, AdamWOptions opt,
                                                                int64_t zero_stage, DType reduce_dtype,
                                                                size_t bucket_bytes);

}  // namespace keel::optim
