// What a training run derives from its config: the model it asks for and the FLOP counts behind
// MFU. (Device and dtype names and batch tensors: apps/gpt2/run/placement.h.)
#pragma once

#include <cstdint>
#include <string>

#include "apps/gpt2/run/placement.h"
#include "apps/gpt2/train/train_config.h"
#include "core/device.h"
#include "core/dtype.h"
#include "nn/config.h"

namespace keel::app {

// The model a TrainConfig describes for a dataset with `vocab_size` tokens.
nn::GPT2Config model_config(const TrainConfig& cfg, uint32_t vocab_size);

// Training FLOPs per token (forward + backward = 3 x forward): every matmul, plus attention
// counted only over the keys each head's window lets a query see.
double train_flops_per_token(const nn::GPT2Config& m, int64_t seq_len);
// Dense peak FLOP/s of the device for the dtype, 0 when unknown (MFU is then not reported).
double peak_flops(Device device, DType dtype);
// The same from the CUDA device name (cudaDeviceProp::name): H100 SXM and H200 989 TFLOP/s
// bf16/f16 (67 f32), H100 PCIe 756 (51), H100/H200 NVL 835 (60), A100 312 (19.5). An unknown
// GPU, a MIG slice or f64 gives 0: no MFU rather than a wrong one.
double peak_flops_of(const std::string& device_name, DType dtype);

}  // namespace keel::app
