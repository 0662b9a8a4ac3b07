#include "optim/grad_math.h"

#include <algorithm>
#include <type_traits>
#include <vector>

#include "core/copy.h"
#include "core/factory.h"
#ifdef KEEL_WITH_CUDA
#include "optim/cuda/grad_math.h"
#endif

namespace keel::optim {

namespace {
constexpr int64_t kChunk = int64_t{1} << 16;

void check_floating(const Tensor& t, const char* op) {
  if (!is_floating(t.dtype()))
    throw DTypeError(op, std::string("gradients must be floating, got ") + dtype_name(t.dtype()));
}

#ifndef KEEL_WITH_CUDA
[[noreturn]] void no_cuda(const char* op) {
  throw DeviceError(op, "a CUDA tensor reached a keel built without CUDA");
}
#endif

// The compute type of a storage type: f32 for the 16-bit floats.
template <typename T> using compute_t = std::conditional_t<std::is_same_v<T, double>, double, float>;
}  // namespace

double sum_of_squares(const Tensor& t_in) {
  check_floating(t_in, "sum_of_squares");
  Tensor t = t_in.detach().contiguous();
  if (t.numel() == 0) return 0.0;
  if (t.device().is_cuda()) {
#ifdef KEEL_WITH_CUDA
    return cuda::sum_of_squares(t);
#else
    no_cuda("sum_of_squares");
#endif
  }
  const int64_t n = t.numel(), chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(chunks, 0.0);
  visit_dtype(t.dtype(), [&]<typename T>() {
    if constexpr (std::is_floating_point_v<T> || std::is_same_v<T, bf16> || std::is_same_v<T, f16>) {
      const T* p = t.data<T>();
#pragma omp parallel for schedule(static)
      for (int64_t c = 0; c < chunks; ++c) {
        double s = 0;
        const int64_t end = std::min(n, (c + 1) * kChunk);
        for (int64_t i = c * kChunk; i < end; ++i) {
          double x = static_cast<double>(static_cast<compute_t<T>>(p[i]));
          s += x * x;
        }
        partial[c] = s;
      }
    }
  });
  double total = 0;
  for (double s : partial) total += s;
  return total;
}

void scale_(Tensor& t_in, double s) {
  check_floating(t_in, "scale_");
  Tensor t = t_in.detach();
  if (t.numel() == 0) return;
  if (!t.is_contiguous()) {  // scale a packed copy, then put it back where it came from
    Tensor packed = t.contiguous();
    scale_(packed, s);
    copy_(t, packed);
    return;
  }
  if (t.device().is_cuda()) {
#ifdef KEEL_WITH_CUDA
    return cuda::scale_inplace(t, s);
#else
    no_cuda("scale_");
#endif
  }
  visit_dtype(t.dtype(), [&]<typename T>() {
    if constexpr (std::is_floating_point_v<T> || std::is_same_v<T, bf16> || std::is_same_v<T, f16>) {
      using C = compute_t<T>;
      T* p = t.data<T>();
      const C k = static_cast<C>(s);
      const int64_t n = t.numel();
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(static_cast<C>(p[i]) * k);
    }
  });
}

}  // namespace keel::optim
