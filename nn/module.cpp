#include "nn/module.h"

#include <map>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "core/autograd.h"
#include "core/copy.h"
#include "core/error.h"

namespace keel::nn {

template <typename F>
void Module::for_each_slot(const std::string& prefix, F&& f) const {
  for (const auto& [name, slot] : params_) f(prefix + name, slot);
  for (const auto& [name, child] : children_) child->for_each_slot(prefix + name + ".", f);
}

void Module::register_parameter(std::string name, Tensor* param) {
  if (!param || !param->defined())
    throw ValueError("Module::register_parameter", "parameter '" + name + "' is undefined");
  // A parameter is a leaf the optimizer owns; make it one even if built from an expression.
  if (!param->is_leaf()) *param = param->detach();
  param->set_requires_grad(true);
  params_.emplace_back(std::move(name), param);
}

void Module::register_module(std::string name, Module* child) { children_.emplace_back(std::move(name), child); }

NamedTensors Module::named_parameters() const {
  NamedTensors out;
  std::unordered_set<const TensorImpl*> seen;
  for_each_slot("", [&](const std::string& name, Tensor* slot) {
    if (seen.insert(slot->impl()).second) out.emplace_back(name, *slot);
  });
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_parameters()) out.push_back(t);
  return out;
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (auto& [name, t] : named_parameters()) n += t.numel();
  return n;
}

void Module::zero_grad() {
  for (auto& [name, t] : named_parameters()) t.zero_grad();
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

void Module::replace_parameters(bool to_device, Device device, DType dtype) {
  // Keyed by the old tensor so that a tensor behind two names gets one replacement, not two.
  std::unordered_map<const TensorImpl*, Tensor> done;
  NoGradGuard no_grad;
  for_each_slot("", [&](const std::string&, Tensor* slot) {
    auto it = done.find(slot->impl());
    if (it == done.end()) {
      const bool already = to_device ? slot->device() == device : slot->dtype() == dtype;
      Tensor fresh = *slot;  // already there: keep the very tensor (and its gradient)
      if (!already) {
        Tensor old = slot->detach();
        fresh = (to_device ? old.to(device) : old.to(dtype)).detach();
        fresh.set_requires_grad(true);
      }
      it = done.emplace(slot->impl(), fresh).first;
    }
    *slot = it->second;
  });
}

void Module::to(Device device) { replace_parameters(true, device, DType::f32); }
void Module::to(DType dtype) {
  if (!is_floating(dtype))
    throw DTypeError("Module::to", std::string("parameters must stay floating, asked for ") + dtype_name(dtype));
  replace_parameters(false, Device::cpu(), dtype);
}

NamedTensors Module::state() const {
  NamedTensors out = named_parameters();
  for (auto& [name, t] : out) t = t.detach();
  return out;
}

void Module::load_state(const NamedTensors& state) {
  static const char* kOp = "Module::load_state";
  std::map<std::string, const Tensor*> given;
  for (const auto& [name, t] : state) {
    if (!given.emplace(name, &t).second) throw ValueError(kOp, "tensor '" + name + "' appears twice in the state");
  }
  NamedTensors params = named_parameters();
  std::set<std::string> expected;
  for (const auto& [name, p] : params) {
    expected.insert(name);
    auto it = given.find(name);
    if (it == given.end())
      throw ValueError(kOp, "missing tensor '" + name + "'",
                       "the state must hold every parameter of the model (is it from a different config?)");
    if (!it->second->defined()) throw ValueError(kOp, "tensor '" + name + "' is undefined");
    // Integers relabelled as weights would be converted to garbage floats: refuse them.
    if (!is_floating(it->second->dtype()))
      throw DTypeError(kOp, "tensor '" + name + "' has dtype " + dtype_name(it->second->dtype()) +
                                ", a parameter must be floating-point (f32, bf16, f16)",
                       "the file is corrupt or not a model");
    if (it->second->shape() != p.shape())
      throw ShapeError(kOp, "tensor '" + name + "' has shape " + shape_str(it->second->shape()) +
                                ", the model's parameter is " + shape_str(p.shape()),
                       "the state comes from a model with a different config");
  }
  for (const auto& [name, t] : state)
    if (!expected.count(name))
      throw ValueError(kOp, "unexpected tensor '" + name + "'", "the state comes from a model with a different config");
  NoGradGuard no_grad;
  for (auto& [name, p] : params) {
    Tensor dst = p.detach();  // the same storage: the live parameter changes in place
    copy_(dst, *given[name]);
  }
}

}  // namespace keel::nn
