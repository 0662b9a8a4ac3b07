// Model FLOPs utilisation (MFU): the FLOPs a training step does per token, and the device's dense
// peak that the achieved FLOP/s are divided by. The trainer logs MFU with every step.
#pragma once

#include <cstdint>
#include <string>

#include "core/device.h"
#include "core/dtype.h"
#include "nn/config.h"

namespace keel::app {

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
