#include "ops/sample.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/factory.h"
#include "core/random.h"
#include "ops/cuda/sample.h"

namespace keel {

int64_t sample_top_k_host(const float* logits, int64_t V, double temperature, int64_t top_k, float u) {
  if (V <= 0) throw ValueError("sample", "empty logits");
  if (temperature < 0 || !std::isfinite(temperature))
    throw ValueError("sample", "temperature " + std::to_string(temperature) + " must be >= 0");
  if (temperature == 0) return std::max_element(logits, logits + V) - logits;
  std::vector<int32_t> order(static_cast<size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  const int64_t k = top_k > 0 ? std::min(top_k, V) : V;
  // The k largest logits, ties broken by the smaller id so the choice is deterministic.
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  const double top = logits[order[0]];
  std::vector<double> p(static_cast<size_t>(k));
  double total = 0;
  for (int64_t i = 0; i < k; ++i) total += p[i] = std::exp((logits[order[i]] - top) / temperature);
  const double target = u * total;
  double acc = 0;
  for (int64_t i = 0; i < k; ++i)
    if ((acc += p[i]) >= target) return order[i];
  return order[k - 1];
}

// logits (..., V) with one row -> (1) i64
Tensor sample_top_k(const Tensor& logits, double temperature, int64_t top_k, uint64_t key, uint64_t base) {
  Tensor out = empty({1}, {DType::i64, logits.defined() ? logits.device() : Device::cpu()});
  sample_top_k_into(logits, temperature, top_k, key, base, out);
  return out;
}

// logits (..., V) with one row -> out (1) i64
void sample_top_k_into(const Tensor& logits, double temperature, int64_t top_k, uint64_t key, uint64_t base,
                       Tensor& out) {
  constexpr const char* kOp = "sample_top_k";
  if (!logits.defined() || logits.dim() == 0 || logits.numel() != logits.size(-1))
    throw ShapeError(kOp, "logits must be one row (..., V), got " +
                              (logits.defined() ? shape_str(logits.shape()) : std::string("undefined")));
  const int64_t V = logits.size(-1);
  if (V == 0) throw ValueError(kOp, "empty logits");
  if (temperature < 0 || !std::isfinite(temperature))
    throw ValueError(kOp, "temperature " + std::to_string(temperature) + " must be >= 0");
  if (!out.defined() || out.dtype() != DType::i64 || out.numel() != 1 || !out.is_contiguous() ||
      out.device() != logits.device())
    throw ShapeError(kOp, "out must be one contiguous i64 element on the logits' device (" + logits.device().str() + ")");
  const float u = philox_uniform(key, base, 0);
  if (!logits.device().is_cuda()) {
    const std::vector<float> l = logits.to(DType::f32).to_vector<float>();
    out.data<int64_t>()[0] = sample_top_k_host(l.data(), V, temperature, top_k, u);
    return;
  }
  const int64_t k = sample_candidates(V, temperature, top_k);
  if (k > kMaxDeviceTopK)
    throw ValueError(kOp, "top_k " + std::to_string(k) + " is more than the CUDA draw keeps (" +
                              std::to_string(kMaxDeviceTopK) + ")",
                     "draw from the logits on the CPU");
  cuda::sample_top_k(logits.contiguous(), V, temperature, k, key, base, out);
}

}  // namespace keel
