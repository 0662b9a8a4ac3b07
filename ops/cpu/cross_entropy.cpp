// CPU kernels of the fused cross-entropy: one row of V logits at a time, chunks of rows in
// parallel (core/parallel.h).
//
// A row is read from memory once, for its max, and then from the cache for its sum of
// exponentials (and, when the gradient is promised, once more for it); while one row's
// exponentials are summed, the next row is fetched into the cache, so its max does not wait on
// memory. The exponentials are in the logits' own dtype: exp_f32 (ops/cpu/exp_f32.h) for f32,
// Eigen's for f64. Each block of kBlock terms is summed in T and the blocks in double, and
// lse = max + log(sum) is formed in double. The backward computes each element as the fused
// forward does, from the logits and lse alone, so the two give the same bits.
#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/factory.h"
#include "core/parallel.h"
#include "ops/cpu/cross_entropy.h"
#include "ops/cpu/exp_f32.h"
#include "ops/nan_max.h"

namespace keel::cpu {

namespace {
// Logits per chunk of rows: about 50 us of one core's work at some 0.4 ns a logit, several times
// core/parallel.h's minimum ("Chunk sizes"), because a thread fetches ahead only the next row of
// its own chunk: the first row of each chunk waits on memory for its max.
constexpr int64_t kGrain = int64_t{1} << 17;
// Terms of the sum of exponentials added in T before the running double sum takes them.
constexpr int64_t kBlock = 256;

template <typename T>
using Arr = Eigen::Array<T, Eigen::Dynamic, 1>;

// row (V), next (V) or null -> lse = log(sum(exp(row))) in double: max, then the blocks' sums of
// exp(row - max), fetching `next` (the row after, with the same V) into the cache on the way.
// A NaN in the row makes lse NaN, as does a row of infinities of one sign (inf - inf).
template <typename T>
double row_lse(const T* row, int64_t V, const T* next) {
  // The largest number in the row, vectorized (a scalar running max is one dependent instruction
  // per logit). With a NaN in the row it may be any of its numbers or NaN: lse is NaN either way,
  // as exp(NaN - m) enters the sum.
  const T m = Eigen::Map<const Arr<T>>(row, V).maxCoeff();
  constexpr int64_t kLine = 64 / sizeof(T);  // elements per cache line
  alignas(64) T e[kBlock];
  double s = 0;
  for (int64_t i = 0; i < V; i += kBlock) {
    const int64_t n = std::min(kBlock, V - i);
    if (next)
      for (int64_t j = 0; j < n; j += kLine) __builtin_prefetch(next + i + j);
    exp_minus(row + i, n, m, e);
    s += static_cast<double>(Eigen::Map<const Arr<T>>(e, n).sum());
  }
  return static_cast<double>(m) + std::log(s);
}

// row (Vp), lse as stored (lse's dtype), target -> out (Vp): exp(row - lse) * soft over the V
// classes less `scale` at the target (soft: scale, times 1 + 2 z_loss lse with the z-loss), zero
// in the padding and in an ignored row. The backward and the fused forward both call it, from the
// same stored lse, so they write the same bits.
template <typename T>
void grad_row(const T* row, int64_t V, int64_t Vp, int64_t target, int64_t ignore_index, T lse, double scale,
              double z_loss, T* out) {
  std::fill(out + V, out + Vp, T(0));  // padding: no class, no gradient
  if (target == ignore_index) {
    std::fill(out, out + V, T(0));
    return;
  }
  const double l = lse;
  // The z-loss's share, 2 z_loss lse softmax, folded into the softmax's factor; exactly `scale`
  // without it, so the gradient keeps its bits.
  const double soft = z_loss != 0 ? scale * (1 + 2 * z_loss * l) : scale;
  exp_minus(row, V, lse, out);
  Eigen::Map<Arr<T>>(out, V) *= static_cast<T>(soft);
  out[target] = static_cast<T>(out[target] - scale);
}

// rows (N) of Vp logits -> the chunks of whole rows that hold about kGrain logits each.
int64_t rows_per_chunk(int64_t Vp) { return std::max<int64_t>(1, kGrain / std::max<int64_t>(Vp, 1)); }

// targets (N) -> the same values as int64, each checked to be in [0, V) or ignore_index.
// Checked up front and serially, before any chunk runs.
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
  const int64_t n = std::count_if(t.begin(), t.end(), [&](int64_t x) { return x != ignore_index; });
  count = full({}, static_cast<double>(n), {DType::i64});
  const double scale = n > 0 ? double(grad) / double(n) : 0.0;  // the promised gradient's
  if (dlogits) *dlogits = empty({N, Vp}, {logits.dtype()});
  // One partial loss per chunk, added in chunk order: the same bits for any thread count.
  const int64_t per = rows_per_chunk(Vp), chunks = parallel::chunks_of(N, per);
  std::vector<double> part(static_cast<size_t>(chunks), 0.0);
  visit_dtype<CpuFloat>(logits.dtype(), "cross_entropy", [&]<typename T>() {
    const T* px = logits.data<T>();
    T* pl = lse.data<T>();
    T* pd = dlogits ? dlogits->data<T>() : nullptr;
    parallel::for_each_chunk(chunks, [&](int64_t c) {
      for (int64_t r = c * per; r < std::min(N, (c + 1) * per); ++r) {
        const T* row = px + r * Vp;
        const double l = row_lse(row, V, r + 1 < std::min(N, (c + 1) * per) ? row + Vp : nullptr);
        pl[r] = static_cast<T>(l);
        // The promised gradient while the row is still in the cache: the logits are read once.
        if (pd) grad_row(row, V, Vp, t[r], ignore_index, pl[r], scale, z_loss, pd + r * Vp);
        if (t[r] == ignore_index) continue;
        // z_loss 0 adds nothing, not 0 * l^2 (NaN for an infinite l): the loss keeps its bits.
        part[c] += z_loss != 0 ? l - row[t[r]] + z_loss * l * l : l - row[t[r]];
      }
    });
    double total = 0;
    for (int64_t c = 0; c < chunks; ++c) total += part[c];
    loss.data<T>()[0] = static_cast<T>(n > 0 ? total / double(n) : 0.0);
  });
  if (log_z) *log_z = log_z_stats(lse, t, ignore_index);
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
    const int64_t per = rows_per_chunk(Vp);
    parallel::for_each_chunk(parallel::chunks_of(N, per), [&](int64_t c) {
      for (int64_t r = c * per; r < std::min(N, (c + 1) * per); ++r)
        grad_row(px + r * Vp, V, Vp, t[r], ignore_index, pl[r], scale, z_loss, pd + r * Vp);
    });
  });
  return dx;
}

}  // namespace keel::cpu
