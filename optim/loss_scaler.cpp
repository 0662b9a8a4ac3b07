#include "optim/loss_scaler.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "core/autograd.h"
#include "core/copy.h"
#include "core/factory.h"
#include "ops/arith.h"
#include "ops/op_costs.h"
#include "ops/shape.h"
#include "optim/cuda/grad_math.h"
#include "optim/cuda/loss_scaler.h"
#include "optim/grad_math.h"

namespace keel::optim {

void LossScalerOptions::validate() const {
  auto fail = [](const std::string& msg) { throw ConfigError("LossScaler", msg); };
  if (!(init_scale > 0) || !std::isfinite(init_scale)) fail("init_scale must be a positive finite number");
  if (!(growth_factor > 1) || !std::isfinite(growth_factor)) fail("growth_factor must be > 1");
  if (!(backoff_factor > 0 && backoff_factor < 1)) fail("backoff_factor must lie in (0, 1)");
  if (growth_interval < 1) fail("growth_interval must be >= 1");
  if (!(min_scale > 0) || !(max_scale >= min_scale) || !std::isfinite(max_scale))
    fail("need 0 < min_scale <= max_scale < inf");
  if (init_scale < min_scale || init_scale > max_scale) fail("init_scale must lie in [min_scale, max_scale]");
}

LossScaler::LossScaler(DType compute_dtype, LossScalerOptions opt)
    : opt_(opt), enabled_(compute_dtype == DType::f16), cur_scale_(opt.init_scale) {
  opt_.validate();
}

namespace {
// y = x * float(state[0] * factor) for an f32 scalar x, the scale read on the device: mul(x,
// scale * factor)'s bits, forward and backward.
struct ScaleByStateBackward : Node {
  Tensor state;
  double factor = 1;
  const char* name() const override { return "MulScalarBackward"; }
  std::vector<Tensor> backward(const Tensor& g) override {
    Tensor out = empty({}, {DType::f32, g.device()});
    cuda::scale_by_state(g.to(DType::f32).contiguous(), state, factor, out);
    return {out};
  }
};

Tensor scale_by_state(const Tensor& x, const Tensor& state, double factor) {
  profiler::Scope prof("mul");
  if (prof) prof.cost(op_costs::elementwise({&x}, x.shape(), x.dtype(), 1));
  Tensor y = empty({}, {DType::f32, x.device()});
  cuda::scale_by_state(x.detach().contiguous(), state, factor, y);
  if (needs_grad({x})) {
    auto n = std::make_shared<ScaleByStateBackward>();
    n->state = state, n->factor = factor;
    connect(y, n, {x});
  }
  return y;
}
}  // namespace

std::vector<double> LossScaler::current() const {
  if (on_device_) return device_state_.to_vector<double>();
  return {cur_scale_, double(tracker_), double(skipped_)};
}

double LossScaler::scale() const { return enabled_ ? current()[0] : 1.0; }
int64_t LossScaler::growth_tracker() const { return static_cast<int64_t>(current()[1]); }
int64_t LossScaler::skipped_steps() const { return static_cast<int64_t>(current()[2]); }

void LossScaler::keep_on_device(Device device) {
  if (!enabled_ || !device.is_cuda()) return;
  const Tensor host = from_vector<double>(current(), {3});
  // Into the same buffer when there is one: a captured CUDA graph reads the scale at its address.
  if (device_state_.defined() && device_state_.device() == device) copy_(device_state_, host);
  else device_state_ = host.to(device);
  on_device_ = true;
}

void LossScaler::settle() {
  if (!on_device_) return;
  const std::vector<double> v = current();
  cur_scale_ = v[0], tracker_ = static_cast<int64_t>(v[1]), skipped_ = static_cast<int64_t>(v[2]);
  on_device_ = false;
}

void LossScaler::unscale_in_step(const std::vector<Tensor>& grads) const {
  if (!enabled_ || grads.empty()) return;
  if (on_device_) cuda::unscale_inplace_multi(grads, device_state_);
  else if (cur_scale_ != 1.0) scale_all_(grads, 1.0 / cur_scale_);
}

void LossScaler::update_in_step(Tensor& scalars, int64_t sumsq_slot, int64_t scale_slot) {
  if (!enabled_) return;
  if (scalars.dtype() != DType::f64 || scalars.dim() != 1 || sumsq_slot < 0 || sumsq_slot >= scalars.numel() ||
      scale_slot < 0 || scale_slot >= scalars.numel())
    throw ShapeError("LossScaler::update_in_step", "the step's scalars must be (S) f64 and hold both slots");
  if (on_device_ && scalars.device() == device_state_.device()) {
    cuda::update_state(device_state_, opt_, scalars, sumsq_slot, scale_slot);
    return;
  }
  settle();
  update(!std::isfinite(std::sqrt(scalars.to_vector<double>()[size_t(sumsq_slot)])));
  Tensor slot = slice(scalars, 0, scale_slot, scale_slot + 1);
  fill_(slot, cur_scale_);
}

Tensor LossScaler::scale_loss(const Tensor& loss, double factor) const {
  if (loss.numel() != 1)
    throw ShapeError("LossScaler::scale_loss", "the loss must be a scalar, got shape " + shape_str(loss.shape()));
  if (!is_floating(loss.dtype()))
    throw DTypeError("LossScaler::scale_loss", std::string("the loss must be floating, got ") + dtype_name(loss.dtype()));
  const Tensor wide = loss.dtype() == DType::f64 || loss.dtype() == DType::f32 ? loss : loss.to(DType::f32);
  if (on_device_ && wide.dtype() == DType::f32 && wide.device() == device_state_.device())
    return scale_by_state(wide, device_state_, factor);
  return mul(wide, scale() * factor);
}

std::optional<double> LossScaler::loss_grad(double factor) const {
  if (enabled_ && on_device_) return std::nullopt;
  return scale() * factor;  // scale_loss's constant; the backward of mul(loss, c) gives c
}

bool LossScaler::unscale_(const std::vector<Tensor>& params) {
  if (!enabled_) return true;
  settle();
  // Multiplying by the inverse is exact: the scale is a power of two with the default factors.
  const double inv = 1.0 / cur_scale_;
  std::vector<Tensor> grads;
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    optim::scale_(g, inv);
    grads.push_back(g);
  }
  if (grads.empty()) return true;
  // A sum of squares in f64 cannot overflow from finite f32 values, so it is finite exactly
  // when every element is; one sum over all gradients is one read of the device.
  Tensor sum = zeros({1}, {DType::f64, grads.front().device()});
  sum_of_squares_into(grads, sum, 0);
  return std::isfinite(sum.to_vector<double>()[0]);
}

void LossScaler::update(bool found_inf) {
  if (!enabled_) return;
  settle();
  if (found_inf) {
    cur_scale_ = std::max(opt_.min_scale, cur_scale_ * opt_.backoff_factor);
    tracker_ = 0;
    ++skipped_;
    return;
  }
  if (++tracker_ >= opt_.growth_interval) {
    cur_scale_ = std::min(opt_.max_scale, cur_scale_ * opt_.growth_factor);
    tracker_ = 0;
  }
}

NamedTensors LossScaler::state() const {
  const std::vector<double> v = current();  // one read when the state is on the device
  return {{"scale", from_vector<double>({v[0]}, {})},
          {"growth_tracker", from_vector<int64_t>({static_cast<int64_t>(v[1])}, {})},
          {"skipped_steps", from_vector<int64_t>({static_cast<int64_t>(v[2])}, {})}};
}

void LossScaler::load_state(const NamedTensors& state) {
  std::map<std::string, Tensor> by_name(state.begin(), state.end());
  auto get = [&](const char* key) {
    auto it = by_name.find(key);
    if (it == by_name.end()) throw ConfigError("LossScaler::load_state", std::string("state entry '") + key + "' is missing");
    if (it->second.numel() != 1)
      throw ShapeError("LossScaler::load_state", std::string("state entry '") + key + "' must be a scalar, got shape " +
                                                     shape_str(it->second.shape()));
    return it->second.item();
  };
  double scale = get("scale"), tracker = get("growth_tracker"), skipped = get("skipped_steps");
  if (by_name.size() != 3) throw ConfigError("LossScaler::load_state", "unexpected entries besides scale, growth_tracker, skipped_steps");
  // The counters become int64: anything at or past 2^62 (or not finite) is corrupt, and casting
  // it would be undefined behaviour.
  if (!(scale > 0) || !std::isfinite(scale) || !(tracker >= 0 && tracker < 0x1p62) || !(skipped >= 0 && skipped < 0x1p62))
    throw ValueError("LossScaler::load_state", "invalid values: scale " + std::to_string(scale) + ", growth_tracker " +
                                                   std::to_string(tracker) + ", skipped_steps " + std::to_string(skipped));
  cur_scale_ = scale;
  tracker_ = static_cast<int64_t>(tracker);
  skipped_ = static_cast<int64_t>(skipped);
  if (on_device_) {  // the loaded state replaces the device's
    on_device_ = false;
    keep_on_device(device_state_.device());
  }
}

}  // namespace keel::optim
