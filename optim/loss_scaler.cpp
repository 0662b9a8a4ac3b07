#include "optim/loss_scaler.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "core/factory.h"
#include "ops/arith.h"
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

Tensor LossScaler::scale_loss(const Tensor& loss, double factor) const {
  if (loss.numel() != 1)
    throw ShapeError("LossScaler::scale_loss", "the loss must be a scalar, got shape " + shape_str(loss.shape()));
  if (!is_floating(loss.dtype()))
    throw DTypeError("LossScaler::scale_loss", std::string("the loss must be floating, got ") + dtype_name(loss.dtype()));
  const Tensor wide = loss.dtype() == DType::f64 || loss.dtype() == DType::f32 ? loss : loss.to(DType::f32);
  return mul(wide, scale() * factor);
}

bool LossScaler::unscale_(const std::vector<Tensor>& params) {
  if (!enabled_) return true;
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
  return {{"scale", from_vector<double>({cur_scale_}, {})},
          {"growth_tracker", from_vector<int64_t>({tracker_}, {})},
          {"skipped_steps", from_vector<int64_t>({skipped_}, {})}};
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
}

}  // namespace keel::optim
