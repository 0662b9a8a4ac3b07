// The op shape (docs/ops.md): the CPU and CUDA kernels of an op are interchangeable functions,
// a build without CUDA answers every CUDA entry point with DeviceError and the way out, and the
// shared pieces (dtype dispatch, the attention band, the ignore index) are one definition each.
#include <doctest/doctest.h>

#include <string>
#include <type_traits>

#include "core/cuda/runtime.h"
#include "core/factory.h"
#include "ops/attention_band.h"
#include "ops/cpu/add_layernorm.h"
#include "ops/cpu/arith.h"
#include "ops/cpu/attention.h"
#include "ops/cpu/cross_entropy.h"
#include "ops/cpu/decode_attention.h"
#include "ops/cpu/dropout.h"
#include "ops/cpu/embedding.h"
#include "ops/cpu/gelu.h"
#include "ops/cpu/layernorm.h"
#include "ops/cpu/linear_gelu.h"
#include "ops/cpu/matmul.h"
#include "ops/cpu/reduce.h"
#include "ops/cpu/softmax.h"
#include "ops/cross_entropy.h"
#include "ops/cuda/add_layernorm.h"
#include "ops/cuda/add_layernorm_linear.h"
#include "ops/cuda/arith.h"
#include "ops/cuda/attention.h"
#include "ops/cuda/cross_entropy.h"
#include "ops/cuda/decode_attention.h"
#include "ops/cuda/dropout.h"
#include "ops/cuda/embedding.h"
#include "ops/cuda/gelu.h"
#include "ops/cuda/layernorm.h"
#include "ops/cuda/linear_gelu.h"
#include "ops/cuda/matmul.h"
#include "ops/cuda/reduce.h"
#include "ops/cuda/softmax.h"
#include "ops/shape.h"

using namespace keel;

// Same name, same type: the front ends may pick either with `is_cuda() ? cuda::f : cpu::f`.
#define SAME_SIGNATURE(f) static_assert(std::is_same_v<decltype(cpu::f), decltype(cuda::f)>, #f)
SAME_SIGNATURE(binary);
SAME_SIGNATURE(unary);
SAME_SIGNATURE(relu_backward);
SAME_SIGNATURE(attention_forward);
SAME_SIGNATURE(attention_backward);
SAME_SIGNATURE(decode_attention_forward);
SAME_SIGNATURE(cross_entropy_forward);
SAME_SIGNATURE(cross_entropy_backward);
SAME_SIGNATURE(dropout_mask);
SAME_SIGNATURE(embedding_forward);
SAME_SIGNATURE(embedding_backward);
SAME_SIGNATURE(gelu_forward);
SAME_SIGNATURE(gelu_backward);
SAME_SIGNATURE(layernorm_forward);
SAME_SIGNATURE(layernorm_backward);
SAME_SIGNATURE(add_layernorm_forward);
SAME_SIGNATURE(linear_gelu);
SAME_SIGNATURE(linear_grad_x_dgelu);
SAME_SIGNATURE(matmul);
SAME_SIGNATURE(matmul_grad_a);
SAME_SIGNATURE(matmul_grad_b);
SAME_SIGNATURE(linear);
SAME_SIGNATURE(linear_grad_x);
SAME_SIGNATURE(linear_grad_weight);
SAME_SIGNATURE(linear_grad_bias);
SAME_SIGNATURE(reduce_dim);
SAME_SIGNATURE(scatter_max_grad);
SAME_SIGNATURE(softmax_forward);
SAME_SIGNATURE(softmax_backward);
#undef SAME_SIGNATURE

namespace {
// Runs f, which must raise DeviceError whose message gives the way out.
template <typename F>
void check_no_cuda(const char* what, F&& f) {
  CAPTURE(what);
  try {
    f();
    FAIL("no error");
  } catch (const DeviceError& e) {
    CHECK(std::string(e.what()).find("rebuild with the `cuda` preset") != std::string::npos);
  }
}
}  // namespace

TEST_CASE("without CUDA, every CUDA kernel of ops raises DeviceError with the way out") {
  if (cuda::built_with_cuda()) {
    MESSAGE("keel was built with CUDA: the stubs are not linked, nothing to check");
    return;
  }
  Tensor t = zeros({2, 2}), o = zeros({2, 2}), m, r, l, x;
  const std::vector<int64_t> w = {0};
  check_no_cuda("binary", [&] { cuda::binary(BinaryOp::add, t, t, o); });
  check_no_cuda("unary", [&] { cuda::unary(UnaryOp::exp, t, o); });
  check_no_cuda("relu_backward", [&] { cuda::relu_backward(t, t); });
  check_no_cuda("attention_forward", [&] { cuda::attention_forward(t, t, t, w, 1, 0, o, m, r, x); });
  check_no_cuda("attention_backward", [&] { cuda::attention_backward(t, t, t, t, t, t, w, 1, 0, o, m, r); });
  check_no_cuda("decode_attention_forward",
                [&] { cuda::decode_attention_forward(t, t, t, {t, t, t, t}, w, 0, 1, 0, o); });
  check_no_cuda("cross_entropy_forward", [&] { cuda::cross_entropy_forward(t, t, 1, kIgnoreIndex, l, l); });
  check_no_cuda("cross_entropy_backward", [&] { cuda::cross_entropy_backward(t, t, t, 1, kIgnoreIndex, t, t); });
  check_no_cuda("dropout_mask", [&] { cuda::dropout_mask(o, 1, 0, 0.5f, 2.0); });
  check_no_cuda("embedding_forward", [&] { cuda::embedding_forward(t, t, o); });
  check_no_cuda("embedding_backward", [&] { cuda::embedding_backward(t, t, o); });
  check_no_cuda("gelu_forward", [&] { cuda::gelu_forward(t); });
  check_no_cuda("gelu_backward", [&] { cuda::gelu_backward(t, t); });
  check_no_cuda("layernorm_forward", [&] { cuda::layernorm_forward(t, t, t, 1e-5, m, r); });
  check_no_cuda("layernorm_backward", [&] { cuda::layernorm_backward(t, t, t, t, t, true, true, true, o, m, r); });
  check_no_cuda("matmul", [&] { cuda::matmul(t, t); });
  check_no_cuda("matmul_grad_a", [&] { cuda::matmul_grad_a(t, t, {2, 2}); });
  check_no_cuda("matmul_grad_b", [&] { cuda::matmul_grad_b(t, t, {2, 2}); });
  check_no_cuda("linear", [&] { cuda::linear(t, t, Tensor()); });
  check_no_cuda("linear_grad_x", [&] { cuda::linear_grad_x(t, t); });
  check_no_cuda("linear_grad_weight", [&] { cuda::linear_grad_weight(t, t); });
  check_no_cuda("linear_grad_bias", [&] { cuda::linear_grad_bias(t); });
  check_no_cuda("linear_gelu", [&] { cuda::linear_gelu(t, t, Tensor(), nullptr); });
  check_no_cuda("linear_gelu backward", [&] { cuda::linear_grad_x_dgelu(t, t, t); });
  check_no_cuda("add_layernorm_linear",
                [&] { cuda::add_layernorm_linear(t, Tensor(), t, Tensor(), 1e-5, t, Tensor(), false, x); });
  CHECK_FALSE(cuda::add_layernorm_linear_fits(1, 2, DType::f32));  // the front end composes instead
  check_no_cuda("reduce_dim", [&] { cuda::reduce_dim(Reduce::sum, t, 1, 2, 2, o); });
  check_no_cuda("scatter_max_grad", [&] { cuda::scatter_max_grad(t, t, 1, 2, 2, o); });
  check_no_cuda("softmax_forward", [&] { cuda::softmax_forward(t, 1, false); });
  check_no_cuda("softmax_backward", [&] { cuda::softmax_backward(t, t, 1, true); });
}

TEST_CASE("visit_dtype calls the kernel for the tensor's type and refuses a dtype outside its set") {
  CHECK(visit_dtype<CpuFloat>(DType::f64, "k", []<typename T>() { return sizeof(T); }) == 8);
  CHECK(visit_dtype<IndexDType>(DType::i32, "k", []<typename T>() { return std::is_same_v<T, int32_t>; }));
  CHECK(visit_dtype<FloatDType>(DType::bf16, "k", []<typename T>() { return std::is_same_v<T, bf16>; }));
  CHECK(visit_dtype(DType::i64, []<typename T>() { return std::is_same_v<T, int64_t>; }));
  try {
    visit_dtype<CpuFloat>(DType::bf16, "mykernel", []<typename T>() {});
    FAIL("no error");
  } catch (const DTypeError& e) {
    const std::string m = e.what();
    CHECK(m.find("mykernel") != std::string::npos);
    CHECK(m.find("expected f32 or f64, got bf16") != std::string::npos);
    CHECK(m.find(".to(DType::f32)") != std::string::npos);
  }
  CHECK_THROWS_AS(visit_dtype<IndexDType>(DType::f32, "ids", []<typename T>() {}), DTypeError);
  CHECK_THROWS_AS(visit_dtype<FloatDType>(DType::i64, "grad", []<typename T>() {}), DTypeError);
  // A CPU kernel refuses a half dtype through it, naming itself.
  Tensor h = zeros({3}, {DType::bf16});
  CHECK_THROWS_AS(cpu::gelu_forward(h), DTypeError);
}

TEST_CASE("band_start is the first key a query sees: w = 0 full causal, else the last w keys") {
  for (int64_t i = 0; i < 40; ++i)
    for (int64_t w : {0, 1, 2, 3, 7, 39, 40, 41, 1000}) {
      int64_t first = 0;  // the spec: the smallest j <= i with w == 0 or j > i - w
      while (!(w == 0 || first > i - w)) ++first;
      CHECK(band_start(i, w) == first);
      CHECK(band_start(static_cast<int>(i), static_cast<int>(w)) == first);  // the kernels' int form
    }
  static_assert(band_start(5, 3) == 3 && band_start(5, 0) == 0 && band_start(1, 10) == 0);
}

TEST_CASE("the ignore index is Hugging Face's -100, and cross_entropy's default") {
  CHECK(kIgnoreIndex == -100);
  Tensor logits = from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3}, {DType::f64});
  Tensor only_first = from_vector<int64_t>({2, kIgnoreIndex}, {2});
  CHECK(cross_entropy(logits, only_first).item() ==
        doctest::Approx(cross_entropy(slice(logits, 0, 0, 1), from_vector<int64_t>({2}, {1})).item()));
}
