// Predicted GPU times from an op's counts: a roofline with measured rates plus a cost per
// launch. What the emulated GPU profile reports instead of its (meaningless) times, so the
// structure of a GPU step, and a change's predicted effect, can be read on a laptop.
//
//   time = max(FLOPs / rate(kind, dtype, alignment), bytes / bandwidth) + launches x launch cost
//
// A prediction, not a measurement: it knows nothing of cache reuse, overlap of neighbouring
// kernels, occupancy or tails, and a kernel slower than the rates measured for it (or a new one)
// is predicted too fast. Compare it with a GPU profile of the same step when a GPU is at hand.
#pragma once

#include <string>
#include <vector>

#include "core/cuda/counters.h"

namespace keel::profiler {

struct Cost;

struct GpuModel {
  std::string name;
  double matmul_tflops = 0;            // bf16/f16 cuBLAS, dims multiples of 8
  double matmul_unaligned_tflops = 0;  // bf16/f16 cuBLAS, a dim that is not (vocab 50257)
  double matmul_f32_tflops = 0;        // f32 without TF32 (keel keeps TF32 off)
  double attention_tflops = 0;         // keel's fused attention forward, bf16/f16
  double attention_bwd_tflops = 0;     // its backward, bf16/f16
  double attention_f32_tflops = 0;     // keel's fused attention in f32
  double bandwidth_gbs = 0;            // achieved HBM bandwidth of an element-wise kernel
  double launch_us = 0;                // device time each launch costs beyond its roofline
  double host_op_us = 0;               // host time to issue one stream operation
  std::string source;                  // where the figures come from
};

// "H100" or "H200" (case-insensitive); ConfigError names the models for any other.
const GpuModel& gpu_model(const std::string& name);

double predict_us(const GpuModel& gpu, const Cost& cost, const cuda::Counters& counts);

}  // namespace keel::profiler
