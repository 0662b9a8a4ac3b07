// The gradient passes on the CPU: a sum of squares in fixed chunks (so the thread count never
// changes the result) and an in-place scale, both computed in f32 (f64 for f64 tensors).
#include "optim/cpu/grad_math.h"

#include <algorithm>
#include <type_traits>
#include <vector>

#include "core/parallel.h"

namespace keel::optim::cpu {

namespace {
constexpr int64_t kChunk = int64_t{1} << 16;
// Elements per chunk of scale_inplace (docs/benchmarks.md, "CPU threads").
constexpr int64_t kScaleGrain = int64_t{1} << 16;

// The compute type of a storage type: f32 for the 16-bit floats.
template <typename T> using compute_t = std::conditional_t<std::is_same_v<T, double>, double, float>;
}  // namespace

// t (N) -> sum of t^2 in f64: per-chunk partials, then summed in chunk order
double sum_of_squares(const Tensor& t) {
  const int64_t n = t.numel(), chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(chunks, 0.0);
  visit_dtype<FloatDType>(t.dtype(), "sum_of_squares", [&]<typename T>() {
    const T* p = t.data<T>();
    parallel::for_each_chunk(chunks, [&](int64_t c) {
      double s = 0;
      const int64_t end = std::min(n, (c + 1) * kChunk);
      for (int64_t i = c * kChunk; i < end; ++i) {
        double x = static_cast<double>(static_cast<compute_t<T>>(p[i]));
        s += x * x;
      }
      partial[c] = s;
    });
  });
  double total = 0;
  for (double s : partial) total += s;
  return total;
}

// ts (K tensors) -> out[slot]
void sum_of_squares_into(const std::vector<Tensor>& ts, Tensor& out, int64_t slot) {
  double total = 0;
  for (const Tensor& t : ts) total += sum_of_squares(t);
  out.data<double>()[slot] = total;
}

// t (N) <- t * s
void scale_inplace(Tensor& t, double s) {
  visit_dtype<FloatDType>(t.dtype(), "scale_", [&]<typename T>() {
    using C = compute_t<T>;
    T* p = t.data<T>();
    const C k = static_cast<C>(s);
    const int64_t n = t.numel();
    parallel::for_range(n, kScaleGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) p[i] = static_cast<T>(static_cast<C>(p[i]) * k);
    });
  });
}

}  // namespace keel::optim::cpu
