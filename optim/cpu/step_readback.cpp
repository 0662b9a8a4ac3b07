#include "optim/cpu/step_readback.h"

#include <type_traits>

#include "ops/nan_max.h"

namespace keel::optim::cpu {

namespace {
// The value as the host reads it (Tensor::item, to_vector<float>): 16-bit floats through f32.
template <typename T> double widen(T x) {
  if constexpr (std::is_same_v<T, double>) return x;
  else return static_cast<double>(static_cast<float>(x));
}
}  // namespace

// buf (S), x [] -> buf[slot]
void add_quotient(Tensor& buf, int64_t slot, const Tensor& x, double divisor) {
  visit_dtype<FloatDType>(x.dtype(), "StepReadback::add_quotient", [&]<typename T>() {
    buf.data<double>()[slot] += widen(x.data<T>()[0]) / divisor;
  });
}

// buf (S), v (N) -> buf[first, first + N)
void merge_max(Tensor& buf, int64_t first, const Tensor& v) {
  visit_dtype<FloatDType>(v.dtype(), "StepReadback::merge_max", [&]<typename T>() {
    double* b = buf.data<double>() + first;
    const T* p = v.data<T>();
    for (int64_t i = 0; i < v.numel(); ++i) b[i] = nan_max(b[i], widen(p[i]));
  });
}

}  // namespace keel::optim::cpu
