// The GPU models of the profiler's predictions (core/profiler_predict.h): one table, each
// figure with where it comes from.
#include "core/profiler_predict.h"

#include <algorithm>
#include <cctype>

#include "core/error.h"
#include "core/profiler.h"

namespace keel::profiler {

namespace {

// Measured on an NVIDIA H100 (docs/gpu-benchmarks.md, "NVIDIA H100, keel 9cbaf08"):
// - matmul 680: bench_ops, cuBLAS bf16 at GPT-2's shapes, 625-722 TFLOP/s (640-740 on an H200);
// - unaligned 125: bench_ops, 8192 x 768 -> 50257 (N not a multiple of 8), 127.7 TFLOP/s;
// - attention forward 200, backward 85: keel's mma kernels, bf16; the forward 180 TFLOP/s in
//   gpt2-124m's profiled step (D 64, T 1024), 230-300 at T 2048-8192; the backward 81 in that
//   step, 98 at D 64, T 2048 (FlashAttention-2 comparison, forward+backward minus forward);
// - bandwidth 2500 GB/s: element-wise kernels in bench_ops and the profiled step reach
//   2.5-2.9 TB/s (gelu 2528, layernorm 2860, adamw 2587, add 2560), 75% of the 3.35 TB/s peak;
// - host 6.9 us per stream operation: on an H200 a decode step of ~91 operations took 0.63 ms,
//   host-bound.
// The H200 is an H100 with faster memory (design.md section 8): the compute rates carry over,
// and its bandwidth is 0.67 x 4.8 TB/s from its own measurement (gelu and layernorm at 62-71%
// of the peak). Estimates, not measured by keel: f32 matmul at 75% of the 67 TFLOP/s FP32
// datasheet peak (no TF32), f32 attention 15, and 2 us of device time per launch (a small
// kernel's launch and tail). With these figures gpt2-124m's step at B 16 x T 1024 is predicted
// at 0.81x the H100's measured 45.5 ms: the backward GEMMs ran at 320-850 TFLOP/s, not 680
// (docs/gpu-benchmarks.md, "Predicted step").
const std::vector<GpuModel>& models() {
  static const std::vector<GpuModel> m{
      {"H100", 680, 125, 50, 200, 85, 15, 2500, 2.0, 6.9, "H100 measurements (docs/gpu-benchmarks.md)"},
      {"H200", 680, 125, 50, 200, 85, 15, 3216, 2.0, 6.9,
       "H100 compute rates, H200 bandwidth measured (docs/gpu-benchmarks.md)"},
  };
  return m;
}

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

const GpuModel& gpu_model(const std::string& name) {
  for (const GpuModel& g : models())
    if (lower(g.name) == lower(name)) return g;
  throw ConfigError("profiler", "unknown GPU model '" + name + "' for predicted times", "use H100 or H200");
}

double predict_us(const GpuModel& gpu, const Cost& cost, const cuda::Counters& counts) {
  double tflops = gpu.matmul_tflops;
  if (cost.kind == Kind::matmul)
    tflops = !cost.half ? gpu.matmul_f32_tflops : cost.aligned ? gpu.matmul_tflops : gpu.matmul_unaligned_tflops;
  else if (cost.kind == Kind::attention || cost.kind == Kind::attention_backward)
    tflops = !cost.half                               ? gpu.attention_f32_tflops
             : cost.kind == Kind::attention_backward ? gpu.attention_bwd_tflops
                                                      : gpu.attention_tflops;
  else if (!cost.half)
    tflops = gpu.matmul_f32_tflops;  // element-wise arithmetic: the SIMT rate; memory bounds it anyway
  const double compute_us = cost.flops / (tflops * 1e6);
  const double memory_us = cost.bytes / (gpu.bandwidth_gbs * 1e3);
  // A cuBLAS call launches at least one kernel; a copy or memset is one device operation too.
  const double launches = double(counts.launches + counts.library_calls + counts.copies);
  return std::max(compute_us, memory_us) + launches * gpu.launch_us;
}

}  // namespace keel::profiler
