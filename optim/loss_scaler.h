// Dynamic loss scaling for f16 training (torch.cuda.amp.GradScaler's algorithm).
//
// f16 gradients underflow to zero below ~6e-8, so the trainer multiplies the loss by scale()
// before backward (scale_loss: always in f32, since 2^16 times a loss of 10 is far above f16's
// 65504); gradients come out scale times larger. Then, per optimizer step:
//   bool finite = scaler.unscale_(params);  // grads /= scale; were they all finite?
//   if (finite) { clip; optimizer.step(lr); }  // else skip the step: the grads are garbage
//   scaler.update(!finite);                     // halve on overflow, double after a good run
// With bf16 or f32 the range is wide enough: the scaler is disabled, scale() is 1 and
// unscale_/update do nothing (unscale_ reports true), so the trainer needs no branches.
// A training step that does not read the device (AdamW::step_gated) uses the in-step calls
// below instead, with the state kept on the GPU.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "core/named_tensors.h"
#include "core/tensor.h"

namespace keel::optim {

struct LossScalerOptions {
  double init_scale = 65536.0;  // 2^16
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;  // consecutive finite steps before the scale grows
  double min_scale = 1.0;          // never back off below this (a scale < 1 only loses range)
  double max_scale = 16777216.0;   // 2^24: growth stops here, far above any useful scale
  void validate() const;           // ConfigError when inconsistent
};

class LossScaler {
 public:
  // Enabled only when the training dtype is f16.
  explicit LossScaler(DType compute_dtype, LossScalerOptions opt = {});

  bool enabled() const { return enabled_; }
  double scale() const;  // 1 when disabled

  // loss [] (any float dtype) -> loss * scale() * factor as an f32 scalar (f64 for an f64
  // loss), differentiable. The product is never formed in f16: cross_entropy already returns
  // f32, and a bf16/f16 loss is widened first. factor is the 1/accum of gradient accumulation.
  Tensor scale_loss(const Tensor& loss, double factor = 1.0) const;
  // The gradient the loss gets from scale_loss(loss, factor).backward(): scale() * factor, known
  // before the forward (GPT2::forward's loss_grad); none while the scale lives on the device,
  // where reading it would make the host wait.
  std::optional<double> loss_grad(double factor = 1.0) const;

  // Divides every defined gradient by scale() in place. Returns whether all of them are finite
  // afterwards (always true, and nothing is touched, when disabled).
  bool unscale_(const std::vector<Tensor>& params);
  bool unscale_(const NamedTensors& params) { return unscale_(tensors_of(params)); }

  // After each optimizer step (taken or skipped): backoff and count a skip on found_inf,
  // else count a good step and grow the scale after growth_interval of them.
  void update(bool found_inf);

  // A step decided on the device (AdamW::step_gated) must not read the scale back: an enabled
  // scaler on a GPU then keeps its state there (keep_on_device). scale_loss and
  // unscale_in_step read it on the device, update_in_step changes it there, and scale(),
  // state(), skipped_steps() and growth_tracker() read it back (a wait for the device).
  // Elsewhere (disabled, or on the CPU) the same calls do the host's arithmetic in place.
  void keep_on_device(Device device);
  bool on_device() const { return on_device_; }
  // grads <- grad / scale() in place: scale_all_(grads, 1 / scale())'s bits, the divisor read on
  // the device when the state is there. Nothing when disabled.
  void unscale_in_step(const std::vector<Tensor>& grads) const;
  // update(found_inf) with found_inf = sqrt(scalars[sumsq_slot]) is not finite (the unscaled
  // gradients' norm, as the step computed it), then scalars[scale_slot] = the new scale(), for
  // the log. scalars: (S) f64, a StepReadback's buffer. Nothing when disabled.
  void update_in_step(Tensor& scalars, int64_t sumsq_slot, int64_t scale_slot);

  int64_t skipped_steps() const;
  int64_t growth_tracker() const;  // good steps since the last change

  // "scale" (f64), "growth_tracker" (i64), "skipped_steps" (i64), all scalars.
  NamedTensors state() const;
  void load_state(const NamedTensors& state);  // ConfigError / ShapeError / ValueError on bad entries

 private:
  LossScalerOptions opt_;
  bool enabled_;
  double cur_scale_;
  int64_t tracker_ = 0;
  int64_t skipped_ = 0;
  bool on_device_ = false;
  Tensor device_state_;  // (3) f64 [scale, tracker, skipped] while on_device_
  std::vector<double> current() const;  // [scale, tracker, skipped]: the device's while on_device_
  void settle();         // the device's state back into the members, before the host changes them
};

}  // namespace keel::optim
