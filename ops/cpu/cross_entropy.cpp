// CPU kernels of the fused cross-entropy: one row of V logits at a time, rows in parallel.
#include <cmath>
#include <limits>
#include <string>

#include "core/factory.h"
#include "ops/cpu/cross_entropy.h"

namespace keel::cpu {

namespace {
// Below this many logits the threads cost more than they save.
constexpr int64_t kParallelMin = int64_t{1} << 15;

// targets (N) -> the same values as int64, each checked to be in [0, V) or ignore_index.
// Checked up front and serially: an exception must not escape an OpenMP region.
std::vector<int64_t> checked_targets(const Tensor& targets, int64_t V, int64_t ignore_index) {
  std::vector<int64_t> t = targets.to_vector<int64_t>();
  for (size_t i = 0; i < t.size(); ++i)
    if (t[i] != ignore_index && (t[i] < 0 || t[i] >= V))
      throw IndexError("cross_entropy",
                       "target " + std::to_string(t[i]) + " at position " + std::to_string(i) +
                           " is out of range for V = " + std::to_string(V) + " classes",
                       "targets must be in [0, V) or equal ignore_index (" + std::to_string(ignore_index) + ")");
  return t;
}
}  // namespace

// logits (N, Vp), targets (N) -> loss [], lse (N)
Tensor cross_entropy_forward(const Tensor& logits, const Tensor& targets, int64_t V, int64_t ignore_index, Tensor& lse,
                             Tensor& count, Tensor* dlogits, float grad) {
  const int64_t N = logits.size(0), Vp = logits.size(1);
  std::vector<int64_t> t = checked_targets(targets, V, ignore_index);
  lse = empty({N}, {logits.dtype()});
  Tensor loss = empty({}, {logits.dtype()});
  visit_dtype<CpuFloat>(logits.dtype(), "cross_entropy", [&]<typename T>() {
    const T* px = logits.data<T>();
    T* pl = lse.data<T>();
    double total = 0;
    int64_t n = 0;
#pragma omp parallel for schedule(static) reduction(+ : total, n) if (N * Vp >= kParallelMin)
    for (int64_t r = 0; r < N; ++r) {
      const T* row = px + r * Vp;
      T m = -std::numeric_limits<T>::infinity();
      for (int64_t v = 0; v < V; ++v) m = std::max(m, row[v]);
      double s = 0;
      for (int64_t v = 0; v < V; ++v) s += std::exp(static_cast<double>(row[v] - m));
      double l = m + std::log(s);
      pl[r] = static_cast<T>(l);
      if (t[r] == ignore_index) continue;
      total += l - row[t[r]];
      ++n;
    }
    count = full({}, static_cast<double>(n), {DType::i64});
    loss.data<T>()[0] = static_cast<T>(n > 0 ? total / n : 0.0);
  });
  // The CPU saves nothing by it (its backward is the same loop), but keeps the contract.
  if (dlogits)
    *dlogits = cross_entropy_backward(logits, targets, lse, V, ignore_index, count, full({}, grad, {logits.dtype()}));
  return loss;
}

// logits (N, Vp), targets (N), lse (N), grad [], ready (N, Vp) or none -> dlogits (N, Vp)
Tensor cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse, int64_t V,
                              int64_t ignore_index, const Tensor& count_t, const Tensor& grad, const Tensor& ready,
                              float expected) {
  if (ready.defined() && grad.item() == static_cast<double>(expected)) return ready;
  const int64_t N = logits.size(0), Vp = logits.size(1);
  std::vector<int64_t> t = targets.to_vector<int64_t>();  // checked by the forward
  Tensor dx = empty({N, Vp}, {logits.dtype()});
  const int64_t count = static_cast<int64_t>(count_t.item());
  double scale = count > 0 ? grad.item() / count : 0.0;
  visit_dtype<CpuFloat>(logits.dtype(), "cross_entropy", [&]<typename T>() {
    const T *px = logits.data<T>(), *pl = lse.data<T>();
    T* pd = dx.data<T>();
#pragma omp parallel for schedule(static) if (N * Vp >= kParallelMin)
    for (int64_t r = 0; r < N; ++r) {
      const T* row = px + r * Vp;
      T* out = pd + r * Vp;
      std::fill(out + V, out + Vp, T(0));  // padding: no class, no gradient
      if (t[r] == ignore_index) {
        std::fill(out, out + V, T(0));
        continue;
      }
      double l = pl[r];
      for (int64_t v = 0; v < V; ++v) out[v] = static_cast<T>(std::exp(row[v] - l) * scale);
      out[t[r]] = static_cast<T>(out[t[r]] - scale);
    }
  });
  return dx;
}

}  // namespace keel::cpu
