#include "optim/adamw.h"

#include <cmath>
#include <map>
#include <set>

#include "core/copy.h"
#include "core/factory.h"
#include "ops/op_costs.h"
#include "optim/adamw_math.h"
#include "optim/cpu/adamw.h"
#include "optim/cuda/adamw.h"

namespace keel::optim {

namespace {

DType moment_dtype(DType param) { return param == DType::f64 ? DType::f64 : DType::f32; }

void check_option(bool ok, const std::string& what, double value, const char* hint) {
  if (!ok) throw ConfigError("AdamW", what + ", got " + std::to_string(value), hint);
}

}  // namespace

void AdamWOptions::validate() const {
  check_option(lr >= 0 && std::isfinite(lr), "lr must be a finite number >= 0", lr, "the paper uses 6e-4");
  check_option(beta1 >= 0 && beta1 < 1, "beta1 must lie in [0, 1)", beta1, "GPT-2 training uses 0.9");
  check_option(beta2 >= 0 && beta2 < 1, "beta2 must lie in [0, 1)", beta2, "GPT-2 training uses 0.95");
  check_option(eps >= 0 && std::isfinite(eps), "eps must be a finite number >= 0", eps, "the usual value is 1e-8");
  check_option(weight_decay >= 0 && std::isfinite(weight_decay), "weight_decay must be a finite number >= 0",
               weight_decay, "the paper uses 0.1");
}

AdamW::AdamW(NamedTensors params, AdamWOptions opt) : params_(std::move(params)), opt_(opt) {
  opt_.validate();
  if (params_.empty()) throw ConfigError("AdamW", "got an empty parameter list", "pass model.named_parameters()");
  std::set<std::string> names;
  std::set<const void*> impls;
  for (auto& [name, p] : params_) {
    if (!p.defined()) throw ConfigError("AdamW", "parameter '" + name + "' is an undefined tensor");
    if (!names.insert(name).second) throw ConfigError("AdamW", "parameter name '" + name + "' appears twice");
    if (!impls.insert(p.impl()).second)
      throw ConfigError("AdamW", "parameter '" + name + "' is a tensor already in the list",
                        "list a shared (tied) parameter once");
    if (!is_floating(p.dtype()))
      throw DTypeError("AdamW", "parameter '" + name + "' has dtype " + dtype_name(p.dtype()) + ", not a float type");
    if (!p.is_contiguous())
      throw ValueError("AdamW", "parameter '" + name + "' is not contiguous", "parameters are updated in place");
    Slot s;
    Options o{moment_dtype(p.dtype()), p.device()};
    s.m = zeros(p.shape(), o);
    s.v = zeros(p.shape(), o);
    if (is_half(p.dtype())) s.master = p.detach().to(DType::f32);  // a fresh copy: to() converts
    s.decay = p.dim() >= 2;
    slots_.push_back(std::move(s));
  }
}

void AdamW::set_lr(double lr) {
  if (!(lr >= 0) || !std::isfinite(lr))
    throw ValueError("AdamW::set_lr", "lr must be a finite number >= 0, got " + std::to_string(lr));
  opt_.lr = lr;
}

void clear_gradient(Tensor& param, Tensor& grad32) {
  if (is_half(param.dtype())) {
    if (!grad32.defined()) grad32 = empty(param.shape(), {DType::f32, param.device()});
    param.set_grad_buffer(grad32);
  }
  param.zero_grad();
}

void AdamW::zero_grad() {
  profiler::Scope prof("zero_grad", profiler::Phase::optimizer);
  for (size_t i = 0; i < params_.size(); ++i) clear_gradient(params_[i].second, slots_[i].grad32);
}

void AdamW::zero_unreached_gradients() {
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& p = params_[i].second;
    Tensor& buffer = slots_[i].grad32;
    if (buffer.defined() && !p.grad().defined()) {
      fill_(buffer, 0.0);
      p.set_grad(buffer);
    }
  }
}

void AdamW::step_scaled(double grad_scale) {
  if (!(grad_scale > 0) || !std::isfinite(grad_scale))
    throw ValueError("AdamW::step", "grad_scale must be a positive finite number, got " + std::to_string(grad_scale));
  settle();
  zero_unreached_gradients();
  ++steps_;
  // The CUDA parameters go in one multi-tensor step: a launch per ~48 tensors rather than one
  // each, with the per-tensor kernel's bits (optim/cuda/adamw.h).
  std::vector<cuda::AdamWTensors> batch;
  profiler::Cost cost;
  for (size_t i = 0; i < params_.size(); ++i) {
    auto& [name, p] = params_[i];
    Tensor g = p.grad();
    if (!g.defined()) continue;
    cuda::AdamWTensors item = prepare(name, p, g, slots_[i]);
    set_bias_correction(item.s, ++slots_[i].steps);
    item.s.grad_scale = grad_scale;
    if (item.param.numel() == 0) continue;
    if (item.param.device().is_cuda()) {
      const profiler::Cost c = op_costs::adamw(double(item.param.numel()), p.dtype(), item.grad.dtype(), item.master.defined());
      if (batch.empty()) cost = c;
      else cost.flops += c.flops, cost.bytes += c.bytes;
      batch.push_back(std::move(item));
      continue;
    }
    profiler::Scope prof("adamw", profiler::Phase::optimizer);
    if (prof) prof.cost(op_costs::adamw(double(item.param.numel()), p.dtype(), item.grad.dtype(), item.master.defined()));
    cpu::adamw_step(item.param, item.grad, item.m, item.v, item.master, item.s);
  }
  if (batch.empty()) return;
  profiler::Scope prof("adamw", profiler::Phase::optimizer);
  if (prof) prof.cost(cost);
  cuda::adamw_step_multi(batch);
}

// param (N), grad (N), slot moments (N): one parameter's checks and its step's scalars but for
// the bias correction (set_bias_correction).
cuda::AdamWTensors AdamW::prepare(const std::string& name, Tensor& param, const Tensor& grad_in, const Slot& slot) const {
  if (grad_in.device() != param.device())
    throw DeviceError("AdamW::step", "gradient of '" + name + "' is on " + grad_in.device().str() +
                                         ", the parameter on " + param.device().str());
  if (grad_in.shape() != param.shape())
    throw ShapeError("AdamW::step", "gradient of '" + name + "' has shape " + shape_str(grad_in.shape()) +
                                        ", the parameter " + shape_str(param.shape()));
  if (!is_floating(grad_in.dtype()))
    throw DTypeError("AdamW::step", "gradient of '" + name + "' is " + dtype_name(grad_in.dtype()));
  cuda::AdamWTensors item{param.detach(), grad_in.detach().contiguous(), slot.m, slot.v, slot.master, {}};
  AdamWScalars& s = item.s;
  s.beta1 = opt_.beta1;
  s.beta2 = opt_.beta2;
  s.eps = opt_.eps;
  s.decay = slot.decay ? 1.0 - opt_.lr * opt_.weight_decay : 1.0;
  return item;
}

std::pair<double, double> AdamW::bias_denominators(int64_t t) const {
  return {1.0 - std::pow(opt_.beta1, double(t)), std::sqrt(1.0 - std::pow(opt_.beta2, double(t)))};
}

// The step size and bias correction of a parameter's step t (from 1).
void AdamW::set_bias_correction(AdamWScalars& s, int64_t t) const {
  const auto [bc1, bc2_sqrt] = bias_denominators(t);
  s.step_size = opt_.lr / bc1;
  s.bc2_sqrt = bc2_sqrt;
}

bool AdamW::is_decayed(const std::string& name) const {
  for (size_t i = 0; i < params_.size(); ++i)
    if (params_[i].first == name) return slots_[i].decay;
  throw ValueError("AdamW::is_decayed", "no parameter named '" + name + "'");
}

std::vector<std::string> AdamW::decayed_names() const {
  std::vector<std::string> out;
  for (size_t i = 0; i < params_.size(); ++i)
    if (slots_[i].decay) out.push_back(params_[i].first);
  return out;
}

std::vector<std::string> AdamW::undecayed_names() const {
  std::vector<std::string> out;
  for (size_t i = 0; i < params_.size(); ++i)
    if (!slots_[i].decay) out.push_back(params_[i].first);
  return out;
}

NamedTensors AdamW::state() const {
  const std::vector<int64_t> steps = step_counts();
  NamedTensors out;
  for (size_t i = 0; i < params_.size(); ++i) {
    const std::string& name = params_[i].first;
    const Slot& s = slots_[i];
    out.emplace_back(name + ".m", s.m.clone());
    out.emplace_back(name + ".v", s.v.clone());
    if (s.master.defined()) out.emplace_back(name + ".master", s.master.clone());
    out.emplace_back(name + ".step", from_vector<int64_t>({steps[i]}, {}));
  }
  out.emplace_back("step", from_vector<int64_t>({steps.back()}, {}));
  return out;
}

namespace {
template <typename T>
void check_values(const std::vector<T>& x, const std::string& key, const char* op) {
  const bool second_moment = key.ends_with(".v");
  for (size_t k = 0; k < x.size(); ++k) {
    if (std::isfinite(x[k]) && !(second_moment && x[k] < 0)) continue;
    const std::string value = std::isnan(x[k]) ? "NaN" : std::to_string(x[k]);  // to_string says "-nan"
    throw ValueError(op,
                     "state entry '" + key + "' holds " + value + " at element " + std::to_string(k) + ": " +
                         (second_moment ? "a second moment must be finite and non-negative" : "it must be finite"),
                     "the optimizer state is corrupt; delete the checkpoint to resume from the one before");
  }
}
}  // namespace

void check_state_values(const Tensor& t, const std::string& key, const char* op) {
  // Read at the state's own precision: f64 moments of f64 parameters, f32 otherwise.
  if (t.dtype() == DType::f64)
    check_values(t.to_vector<double>(), key, op);
  else
    check_values(t.to_vector<float>(), key, op);
}

void AdamW::load_state(const NamedTensors& state) {
  std::map<std::string, Tensor> by_name;
  for (const auto& [name, t] : state)
    if (!by_name.emplace(name, t).second) throw ConfigError("AdamW::load_state", "state entry '" + name + "' appears twice");
  // Check everything before changing anything: a failed load leaves the optimizer as it was.
  size_t used = 0;
  auto take = [&](const std::string& key, const Shape& shape, DType dtype) -> Tensor {
    auto it = by_name.find(key);
    if (it == by_name.end())
      throw ConfigError("AdamW::load_state", "state entry '" + key + "' is missing",
                        "the checkpoint belongs to another model or was written without optimizer state");
    const Tensor& t = it->second;
    if (t.shape() != shape)
      throw ShapeError("AdamW::load_state", "state entry '" + key + "' has shape " + shape_str(t.shape()) +
                                                ", expected " + shape_str(shape));
    if (t.dtype() != dtype)
      throw DTypeError("AdamW::load_state", "state entry '" + key + "' has dtype " + dtype_name(t.dtype()) +
                                                ", expected " + dtype_name(dtype));
    ++used;
    return t;
  };
  auto step_of = [&](const std::string& key) {
    int64_t v = take(key, {}, DType::i64).to_vector<int64_t>()[0];
    if (v < 0) throw ValueError("AdamW::load_state", "state entry '" + key + "' is negative: " + std::to_string(v));
    return v;
  };
  struct Loaded { Tensor m, v, master; int64_t steps; };
  std::vector<Loaded> loaded;
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto& [name, p] = params_[i];
    DType md = moment_dtype(p.dtype());
    Loaded l;
    l.m = take(name + ".m", p.shape(), md);
    l.v = take(name + ".v", p.shape(), md);
    if (slots_[i].master.defined()) l.master = take(name + ".master", p.shape(), DType::f32);
    check_state_values(l.m, name + ".m", "AdamW::load_state");
    check_state_values(l.v, name + ".v", "AdamW::load_state");
    if (l.master.defined()) check_state_values(l.master, name + ".master", "AdamW::load_state");
    l.steps = step_of(name + ".step");
    loaded.push_back(std::move(l));
  }
  int64_t steps = step_of("step");
  if (used != by_name.size()) {
    for (const auto& [key, t] : by_name) {
      bool known = key == "step";
      for (size_t i = 0; i < params_.size() && !known; ++i) {
        const std::string& n = params_[i].first;
        known = key == n + ".m" || key == n + ".v" || key == n + ".step" ||
                (slots_[i].master.defined() && key == n + ".master");
      }
      if (!known)
        throw ConfigError("AdamW::load_state", "state entry '" + key + "' matches no parameter of this optimizer",
                          "the checkpoint belongs to another model");
    }
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    Slot& s = slots_[i];
    copy_(s.m, loaded[i].m);
    copy_(s.v, loaded[i].v);
    if (s.master.defined()) {
      copy_(s.master, loaded[i].master);
      // The parameter must be the rounded master, or the next step would start elsewhere.
      Tensor p = params_[i].second.detach();
      copy_(p, s.master);
    }
    s.steps = loaded[i].steps;
  }
  steps_ = steps;
  device_steps_.live = false;  // the loaded counts replace the device's
}

}  // namespace keel::optim
