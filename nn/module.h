// Module: the base of every layer, holding named parameters and named child modules.
//
// A module registers pointers to its own Tensor members (register_parameter) and to its
// children (register_module); names join with dots, so a GPT-2 parameter is reached as
// "transformer.h.0.attn.c_attn.weight", exactly the Hugging Face name. Because the registry
// stores addresses, modules are neither copyable nor movable: build them in place
// (std::make_unique for models held by pointer).
//
// One tensor may sit behind two names (tied embeddings: lm_head.weight IS transformer.wte.weight).
// named_parameters() lists it once, under the name met first, and to() keeps it shared.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/named_tensors.h"
#include "core/tensor.h"

namespace keel::nn {

class Module {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // The parameters of this module and all its descendants, depth first in registration order,
  // each distinct tensor once. These are the live leaves: an optimizer updates them in place.
  NamedTensors named_parameters() const;
  std::vector<Tensor> parameters() const;
  int64_t num_parameters() const;  // elements, counting a shared tensor once

  void zero_grad();  // drops every parameter's gradient

  // Training mode turns dropout on; evaluation turns it off. Applies to the whole subtree.
  void train(bool on = true);
  void eval() { train(false); }
  bool training() const { return training_; }

  // Replaces every parameter by a copy on `device` / in `dtype`, keeping it a leaf that requires
  // grad (its gradient is dropped) and keeping shared tensors shared. An optimizer built before
  // to() holds the old tensors: build it after.
  void to(Device device);
  void to(DType dtype);

  // A state dict: the parameters under their names, detached (they share storage with the live
  // parameters, so copy them if the model will change before they are used).
  NamedTensors state() const;
  // Copies `state` into the parameters in place (converting dtype and device), so optimizers
  // keep valid references. Strict: every parameter must appear exactly once with its exact shape,
  // and no unknown name may appear; otherwise ValueError / ShapeError naming the tensor.
  void load_state(const NamedTensors& state);

 protected:
  // `param` must be a member of this module that outlives it; it becomes a leaf requiring grad.
  void register_parameter(std::string name, Tensor* param);
  void register_module(std::string name, Module* child);

 private:
  // Visits (dotted name, parameter slot) for every registration, shared tensors included.
  template <typename F> void for_each_slot(const std::string& prefix, F&& f) const;
  void replace_parameters(bool to_device, Device device, DType dtype);

  std::vector<std::pair<std::string, Tensor*>> params_;
  std::vector<std::pair<std::string, Module*>> children_;
  bool training_ = true;
};

}  // namespace keel::nn
