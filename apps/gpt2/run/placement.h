// Where a run's tensors live: the device and dtype a user names, and a loader batch as tensors
// on that device. Shared by training, evaluation, sampling and the benchmarks.
#pragma once

#include <string>
#include <utility>

#include "core/device.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "data/loader.h"

namespace keel::app {

// "auto" -> cuda:0 when a GPU is there, else cpu. DeviceError for a GPU that is not there.
Device resolve_device(const std::string& name);
// "f32" | "bf16" | "f16"; ConfigError naming --dtype otherwise.
DType parse_dtype(const std::string& name);

// ids (B, T) and targets (B, T) of a loader batch, on the device. Padded targets are already
// cross_entropy's ignore index (data::kIgnoreTarget).
std::pair<Tensor, Tensor> batch_tensors(const data::Batch& b, Device device);
// The same as one (2, B, T) i32 tensor, ids then targets (one copy to a device), and its halves
// as (B, T) views.
Tensor batch_tensor(const data::Batch& b, Device device);
std::pair<Tensor, Tensor> split_batch(const Tensor& both);

}  // namespace keel::app
