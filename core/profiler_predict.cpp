// The GPU models of the profiler's predictions (core/profiler_predict.h): one table, each
// figure with where it comes from.
#include "core/profiler_predict.h"

#include <algorithm>
#include <cctype>

#include "core/error.h"
#include "core/profiler.h"

namespace keel::profiler {

namespace {

// Measured on an NVIDIA H200 (docs/gpu-benchmarks.md, "NVIDIA H200, keel 370fa32"):
// - matmul 680: bench_ops, cuBLAS bf16 at GPT-2's shapes, 640-740 TFLOP/s;
// - unaligned 125: bench_ops, 8192 x 768 -> 50257 (N not a multiple of 8), 124.8 TFLOP/s;
// - attention 70: keel's mma kernels, forward + backward at D = 64, 67-72 TFLOP/s (MHSA rows);
// - bandwidth: gelu and layernorm reach 62-71% of the HBM peak; 0.67 x 4.8 TB/s = 3.2 TB/s;
// - host 6.9 us per stream operation: a decode step of ~91 operations took 0.63 ms, host-bound.
// The H100 SXM has the H200's compute (design.md section 8; the H200 is an H100 with faster
// memory), so the compute rates carry over and the bandwidth is 0.67 x 3.35 TB/s. Estimates,
// not measured by keel: f32 matmul at 75% of the 67 TFLOP/s FP32 datasheet peak (no TF32), f32
// attention 15, and 2 us of device time per launch (a small kernel's launch and tail).
const std::vector<GpuModel>& models() {
  static const std::vector<GpuModel> m{
      {"H100", 680, 125, 50, 70, 15, 2245, 2.0, 6.9,
       "H200 measurements (docs/gpu-benchmarks.md), H100 SXM bandwidth 3.35 TB/s x 0.67"},
      {"H200", 680, 125, 50, 70, 15, 3216, 2.0, 6.9, "H200 measurements (docs/gpu-benchmarks.md)"},
  };
  return m;
}

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

std::vector<std::string> gpu_model_names() {
  std::vector<std::string> names;
  for (const GpuModel& g : models()) names.push_back(g.name);
  return names;
}

const GpuModel& gpu_model(const std::string& name) {
  for (const GpuModel& g : models())
    if (lower(g.name) == lower(name)) return g;
  throw ConfigError("profiler", "unknown GPU model '" + name + "' for predicted times", "use H100 or H200");
}

double predict_us(const GpuModel& gpu, const Cost& cost, const cuda::Counters& counts) {
  double tflops = gpu.matmul_tflops;
  if (cost.kind == Kind::matmul)
    tflops = !cost.half ? gpu.matmul_f32_tflops : cost.aligned ? gpu.matmul_tflops : gpu.matmul_unaligned_tflops;
  else if (cost.kind == Kind::attention)
    tflops = cost.half ? gpu.attention_tflops : gpu.attention_f32_tflops;
  else if (!cost.half)
    tflops = gpu.matmul_f32_tflops;  // element-wise arithmetic: the SIMT rate; memory bounds it anyway
  const double compute_us = cost.flops / (tflops * 1e6);
  const double memory_us = cost.bytes / (gpu.bandwidth_gbs * 1e3);
  // A cuBLAS call launches at least one kernel; a copy or memset is one device operation too.
  const double launches = double(counts.launches + counts.library_calls + counts.copies);
  return std::max(compute_us, memory_us) + launches * gpu.launch_us;
}

}  // namespace keel::profiler
