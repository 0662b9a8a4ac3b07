#include "apps/gpt2/run/placement.h"

#include "core/cuda/runtime.h"
#include "core/error.h"
#include "core/factory.h"
#include "ops/shape.h"

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

// b's B x T inputs and targets -> ids (B, T), targets (B, T): two views of one (2, B, T) upload,
// since every copy from host memory makes the host wait for a GPU.
Tensor batch_tensor(const data::Batch& b, Device device) {
  std::vector<int32_t> both;
  both.reserve(b.inputs.size() + b.targets.size());
  both.insert(both.end(), b.inputs.begin(), b.inputs.end());
  both.insert(both.end(), b.targets.begin(), b.targets.end());
  return from_vector(both, {2, b.batch_size, b.seq_len}).to(device);
}

std::pair<Tensor, Tensor> split_batch(const Tensor& t) {
  const Shape bt{t.size(1), t.size(2)};
  return {reshape(slice(t, 0, 0, 1), bt), reshape(slice(t, 0, 1, 2), bt)};
}

std::pair<Tensor, Tensor> batch_tensors(const data::Batch& b, Device device) {
  return split_batch(batch_tensor(b, device));
}

}  // namespace keel::app
