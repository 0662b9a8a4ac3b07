// docs/ops.md, "gelu, file by file": a CPU kernel written once as a template and dispatched on
// the dtype with visit_dtype.
#include <doctest/doctest.h>

#include "core/factory.h"

TEST_CASE("docs/ops.md: visit_dtype runs the kernel for the tensor's dtype") {
  using namespace keel;
  for (DType dt : {DType::f32, DType::f64}) {
    Tensor x = from_vector<double>({1, -2, 3.5}, {3}).to(dt), y = empty({3}, {dt});
    // snippet-begin
    visit_dtype<CpuFloat>(x.dtype(), "twice", [&]<typename T>() {
      const T* px = x.data<T>();
      T* py = y.data<T>();
      for (int64_t i = 0; i < x.numel(); ++i) py[i] = px[i] + px[i];
    });
    // snippet-end
    CHECK(y.to_vector<double>() == std::vector<double>{2, -4, 7});
  }
  Tensor h = zeros({3}, {DType::bf16});
  CHECK_THROWS_AS(visit_dtype<CpuFloat>(h.dtype(), "twice", []<typename T>() {}), DTypeError);
}
