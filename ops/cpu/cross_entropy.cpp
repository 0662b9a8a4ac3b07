// CPU kernels of the fused cross-entropy: one row of V logits at a time, rows in parallel.
#include <cmath>
#include <limits>
#include <string>

#include "core/factory.h"
#include "ops/cpu/cross_entropy.h"
#include "ops/nan_max.h"

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

// lse (N), targets (N) -> (2) [mean lse, max |lse|] over the counted rows (0, 0 when none), in
// lse's dtype. One pass in row order, after the rows: the same bits for any thread count.
Tensor log_z_stats(const Tensor& lse, const std::vector<int64_t>& t, int64_t ignore_index) {
  Tensor out = empty({2}, {lse.dtype()});
  visit_dtype<CpuFloat>(lse.dtype(), "cross_entropy", [&]<typename T>() {
    const T* pl = lse.data<T>();
    double sum = 0, top = 0;
    int64_t n = 0;
    for (size_t r = 0; r < t.size(); ++r) {
      if (t[r] == ignore_index) continue;
      sum += pl[r];
      top = nan_max(top, std::abs(static_cast<double>(pl[r])));
      ++n;
    }
    out.data<T>()[0] = static_cast<T>(n > 0 ? sum / double(n) : 0.0);
    out.data<T>()[1] = static_cast<T>(top);
  });
  return out;
}
}  // namespace

// logits (N, Vp), targets (N) -> loss [], lse (N), and log_z (2) when asked
Tensor cross_entropy_forward(const Tensor& logits, const Tensor& targets, int64_t V, int64_t ignore_index, Tensor& lse,
                             Tensor& count, Tensor* dlogits, float grad, double z_loss, Tensor* log_z) {
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
      // z_loss 0 adds nothing, not 0 * l^2 (NaN for an infinite l): the loss keeps its bits.
      total += z_loss != 0 ? l - row[t[r]] + z_loss * l * l : l - row[t[r]];
      ++n;
    }
    count = full({}, static_cast<double>(n), {DType::i64});
    loss.data<T>()[0] = static_cast<T>(n > 0 ? total / n : 0.0);
  });
  if (log_z) *log_z = log_z_stats(lse, t, ignore_index);
  // The CPU saves nothing by it (its backward is the same loop), but keeps the contract.
  if (dlogits)
    *dlogits = cross_entropy_backward(logits, targets, lse, V, ignore_index, count, full({}, grad, {logits.dtype()}),
                                      {}, 1.0f, z_loss);
  return loss;
}

// logits (N, Vp), targets (N), lse (N), grad [], ready (N, Vp) or none -> dlogits (N, Vp)
Tensor cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse, int64_t V,
                              int64_t ignore_index, const Tensor& count_t, const Tensor& grad, const Tensor& ready,
                              float expected, double z_loss) {
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
      // The z-loss's share, 2 z_loss lse softmax, folded into the softmax's factor; exactly
      // `scale` without it, so the gradient keeps its bits.
      const double soft = z_loss != 0 ? scale * (1 + 2 * z_loss * l) : scale;
      for (int64_t v = 0; v < V; ++v) out[v] = static_cast<T>(std::exp(row[v] - l) * soft);
      out[t[r]] = static_cast<T>(out[t[r]] - scale);
    }
  });
  return dx;
}

}  // namespace keel::cpu
