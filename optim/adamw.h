// AdamW (Loshchilov & Hutter; PyTorch's torch.optim.AdamW), the optimizer of GPT-2 training.
//
// - Decoupled weight decay on matrices only: parameters with dim >= 2 (Linear and Embedding
//   weights) decay, vectors (biases, LayerNorm gains and shifts) do not, as in nanoGPT.
// - Moments m, v are f32 (f64 for f64 parameters, which only tests use).
// - Mixed precision: a bf16/f16 parameter gets an f32 master copy; the update runs on the
//   master and the parameter receives the rounded master. An f32/f64 parameter is its own master.
//   Its gradient is f32 too (an f32 "master gradient"): zero_grad() gives it an f32 buffer, the
//   first backward writes its bf16/f16 gradient into it, widened, and the next ones add in f32. So
//   gradient accumulation over micro-batches, loss unscaling and clipping all run in f32, and
//   grad-accum 8 equals one 8x batch within f32 rounding (a bf16 sum would drop every
//   micro-batch's contribution below 1/256 of the running total).
// - Bias correction uses each parameter's own step count, which advances only on steps where
//   that parameter had a gradient (PyTorch's per-parameter "step" state).
// - On CUDA the whole update is one fused kernel (optim/cuda/adamw.cu); on the CPU a loop over
//   chunks on keel's threads (core/parallel.h). Both call the per-element update in optim/adamw_math.h.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/named_tensors.h"
#include "core/tensor.h"
#include "optim/cuda/adamw.h"
#include "optim/defaults.h"

namespace keel::optim {

struct AdamWOptions {
  double lr = kDefaultLr;
  double beta1 = kDefaultBeta1;
  double beta2 = kDefaultBeta2;
  double eps = kDefaultEps;
  double weight_decay = kDefaultWeightDecay;
  void validate() const;  // ConfigError on lr < 0, betas outside [0, 1), eps < 0, weight_decay < 0
};

// bf16 and f16: the dtypes whose parameters get an f32 master copy and an f32 gradient buffer.
inline bool is_half(DType t) { return t == DType::bf16 || t == DType::f16; }

// What zero_grad() does to one parameter, for AdamW and ZeroAdamW alike: its gradient becomes
// undefined, and a bf16/f16 parameter gets grad32 (made here on first use, then kept from step
// to step) as the buffer its next backward writes into, widened, and the following ones add to
// (Tensor::set_grad_buffer): nothing is zeroed or allocated per step.
void clear_gradient(Tensor& param, Tensor& grad32);

class AdamW {
 public:
  // params: distinct, named, contiguous floating tensors (any device). Throws ConfigError on an
  // empty list or a repeated name or tensor, ValueError on a non-contiguous tensor.
  explicit AdamW(NamedTensors params, AdamWOptions opt = {});

  // One update of every parameter that has a gradient; the others are left alone.
  void step() { step_scaled(1.0); }
  void step(double lr) {  // the learning rate the schedule gives for this step
    set_lr(lr);
    step_scaled(1.0);
  }
  // The same with every gradient read times grad_scale, rounded as scale_ would leave it
  // (AdamWScalars::grad_scale): step(lr, c) takes the very step that scale_all_(grads, c) and
  // step(lr) take, without that pass over the gradients (which it leaves as they are).
  void step(double lr, double grad_scale) {
    set_lr(lr);
    step_scaled(grad_scale);
  }
  // The step of a training loop that does not wait for the device: scalars (S) f64 holds the
  // step's gradient sum of squares at sumsq_slot and its loss at loss_slot (a StepReadback).
  // Takes step(lr, clip_coefficient(norm, max_norm)) (max_norm 0: no clipping), norm =
  // sqrt(sum of squares), exactly when norm and loss are finite, and nothing otherwise. With
  // every parameter on one GPU the device decides (optim/adamw_gated.cpp): the step counts live
  // there while such steps run, and nothing here reads the device. Elsewhere the host reads the
  // two values and decides.
  void step_gated(double lr, double max_norm, const Tensor& scalars, int64_t sumsq_slot, int64_t loss_slot);
  void set_lr(double lr);  // ValueError when negative or not finite
  double lr() const { return opt_.lr; }
  // Starts the next gradient from zero: every parameter drops its gradient, and a bf16/f16 one
  // keeps an f32 buffer (made once, reused from step to step) that its next backward writes
  // into and the following ones add to (Tensor::set_grad_buffer). Call it before the first
  // backward of every optimizer step; such a parameter then counts as having a gradient: one
  // that no backward reached has a zero gradient at step() (zero_unreached_gradients).
  void zero_grad();
  // The bf16/f16 parameters that zero_grad() gave a buffer and no backward has reached since get
  // that buffer, zeroed, as their gradient (step() does it first; a data-parallel optimizer
  // before averaging over ranks, where another rank may have reached them).
  void zero_unreached_gradients();

  int64_t step_count() const { return step_counts().back(); }  // applied steps
  const AdamWOptions& options() const { return opt_; }
  const NamedTensors& params() const { return params_; }
  std::vector<Tensor> param_tensors() const { return tensors_of(params_); }
  bool is_decayed(const std::string& name) const;  // ValueError for an unknown name
  std::vector<std::string> decayed_names() const;
  std::vector<std::string> undecayed_names() const;

  // The state a resumed run needs to continue bit-exactly, as named tensors (clones):
  //   "<name>.m", "<name>.v"  moments, shape of the parameter, f32 (f64 for f64 params)
  //   "<name>.master"         f32 master weights (bf16/f16 parameters only)
  //   "<name>.step"           i64 scalar: that parameter's update count (bias correction)
  //   "step"                  i64 scalar: calls to step()
  NamedTensors state() const;
  // Restores state() output (from any device). Every expected name must be present with its
  // shape and dtype (ShapeError / DTypeError / ConfigError for missing or unknown names), so a
  // checkpoint of another model cannot load silently, and its values must be usable
  // (check_state_values). Hyper-parameters are not part of state.
  void load_state(const NamedTensors& state);

 private:
  void step_scaled(double grad_scale);
  struct Slot {
    Tensor m, v, master;  // master undefined unless the parameter is bf16/f16
    Tensor grad32;        // the f32 gradient buffer of a bf16/f16 parameter (made by zero_grad)
    bool decay = false;
    int64_t steps = 0;
  };
  cuda::AdamWTensors prepare(const std::string& name, Tensor& param, const Tensor& grad, const Slot& slot) const;
  // The two denominators of step t's bias correction (from 1): 1 - b1^t and sqrt(1 - b2^t), in
  // f64 on the host. The host's step divides by them, and so does the gated step's table.
  std::pair<double, double> bias_denominators(int64_t t) const;
  void set_bias_correction(AdamWScalars& s, int64_t t) const;

  // step_gated on a GPU keeps the step counts on the device, where the decision to apply a step
  // is taken (optim/adamw_gated.cpp). While `live`, those are the counts and the host's are stale.
  struct DeviceSteps {
    Tensor counts;                      // (P + 1) i64: each slot's steps, then steps_
    Tensor stepped;                     // (P + 1) i32: which of them a step advances
    std::vector<int32_t> stepped_host;  // what `stepped` holds, uploaded again only on a change
    Tensor control;                     // (2) f64: the decision (cuda::AdamWGate)
    Tensor bc1, bc2_sqrt;               // (L) f64: the bias corrections of t < L
    int64_t bound = 0;                  // no count exceeds it
    bool live = false;
  };
  // Each slot's step count, then steps_: the device's when they live there (a read of it).
  std::vector<int64_t> step_counts() const;
  void settle();  // the device's counts back into slots_ and steps_, before the host steps again

  NamedTensors params_;
  std::vector<Slot> slots_;
  AdamWOptions opt_;
  int64_t steps_ = 0;
  DeviceSteps device_steps_;
};

// ValueError naming `op` and the state entry `key` (a "<name>.m", ".v" or ".master" of
// AdamW::state()) when its tensor t holds a NaN or an inf, or a second moment (".v") a negative
// value. Such a state passes every shape and dtype check, and the first update after it is
// loaded turns the parameter into NaN (a negative v through its square root).
void check_state_values(const Tensor& t, const std::string& key, const char* op);

}  // namespace keel::optim
