#include "apps/gpt2/train/mfu.h"

#include <optional>
#include <string>

#include "core/cuda/runtime.h"

namespace keel::app {

double train_flops_per_token(const nn::GPT2Config& m, int64_t T) {
  const double C = double(m.n_embd), V = double(m.vocab_size), D = double(m.head_dim());
  // Per layer and token, forward: qkv projection, output projection, the 4x MLP (2 FLOPs per MAC).
  double per_layer = 2 * C * 3 * C + 2 * C * C + 2 * 2 * C * 4 * C;
  // Attention: q.k and p.v cost 2 * 2 * D per visible key; average the visible keys over positions.
  const AttentionSpec spec = m.attention_spec();
  for (int64_t h = 0; h < spec.heads(); ++h) {
    double keys = 0;
    for (int64_t i = 0; i < T; ++i) keys += double(spec.keys_seen(h, i));
    per_layer += 4 * D * keys / double(T);
  }
  double forward = double(m.n_layer) * per_layer + 2 * C * V;  // + the lm_head
  return 3 * forward;
}

double peak_flops_of(const std::string& name, DType dtype) {
  const bool half = dtype == DType::bf16 || dtype == DType::f16;
  auto has = [&](const char* s) { return name.find(s) != std::string::npos; };
  struct Peak {
    double half, f32;
  };
  // Dense data-sheet peaks in TFLOP/s: bf16/f16 on the tensor cores; f32 on the CUDA cores
  // (keel's f32 matmuls keep TF32 off). A MIG slice has a fraction of the GPU: no guess.
  std::optional<Peak> p;
  if (has("MIG")) return 0;
  if (has("H100") || has("H200")) {  // "NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe", "NVIDIA H200", "NVIDIA GH200 480GB"
    if (has("PCIe")) p = Peak{756, 51};
    else if (has("NVL")) p = Peak{835, 60};
    else if (has("H200") || has("HBM3") || has("SXM")) p = Peak{989, 67};
  } else if (has("A100")) {
    p = Peak{312, 19.5};
  }
  if (!p || !is_floating(dtype) || dtype == DType::f64) return 0;
  return (half ? p->half : p->f32) * 1e12;
}

double peak_flops(Device device, DType dtype) {
  if (!device.is_cuda()) return 0;
  return peak_flops_of(cuda::device_info(device.index).name, dtype);
}

}  // namespace keel::app
