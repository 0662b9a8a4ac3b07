#include "apps/gpt2/run/placement.h"

#include "core/cuda/runtime.h"
#include "core/error.h"
#include "core/factory.h"

namespace keel::app {

Device resolve_device(const std::string& name) {
  if (name == "auto") return cuda::is_available() ? Device::cuda(0) : Device::cpu();
  Device d = parse_device(name);
  if (d.is_cuda()) cuda::check_device(d.index, "--device");
  return d;
}

DType parse_dtype(const std::string& name) {
  if (name == "f32") return DType::f32;
  if (name == "bf16") return DType::bf16;
  if (name == "f16") return DType::f16;
  throw ConfigError("--dtype", "unknown dtype '" + name + "'", "use f32, bf16 or f16");
}

std::pair<Tensor, Tensor> batch_tensors(const data::Batch& b, Device device) {
  return {from_vector(b.inputs, {b.batch_size, b.seq_len}).to(device),
          from_vector(b.targets, {b.batch_size, b.seq_len}).to(device)};
}

}  // namespace keel::app
