// The CUDA kernels of every op in a build without CUDA (presets `cpu`, `debug`, `fuzz`): each
// raises DeviceError with the way out, so the front ends dispatch on the device with no `#if`,
// and a CUDA tensor reaching an op fails with one clear message. CMake compiles this file
// instead of ops/cuda/*.cu when KEEL_CUDA is OFF; the signatures are those of ops/cuda/*.h.
#include "core/error.h"
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
#include "ops/cuda/sample.h"
#include "ops/cuda/softmax.h"

namespace keel::cuda {

namespace {
[[noreturn]] void no_cuda(const char* op) {
  throw DeviceError(op, "a CUDA tensor reached keel built without CUDA",
                    "rebuild with the `cuda` preset on a machine with nvcc, or move the tensors to the CPU");
}
}  // namespace

void binary(BinaryOp, const Tensor&, const Tensor&, Tensor&) { no_cuda("binary"); }
void unary(UnaryOp, const Tensor&, Tensor&, double) { no_cuda("unary"); }
Tensor relu_backward(const Tensor&, const Tensor&) { no_cuda("relu backward"); }

void set_attention_kernel(AttentionKernel) { no_cuda("attention (kernel choice)"); }
AttentionKernel attention_kernel() { return AttentionKernel::mma; }
void attention_forward(const Tensor&, const Tensor&, const Tensor&, const std::vector<int64_t>&, double, double,
                       Tensor&, Tensor&, Tensor&, Tensor&) {
  no_cuda("attention");
}
void attention_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                        const std::vector<int64_t>&, double, double, Tensor&, Tensor&, Tensor&) {
  no_cuda("attention backward");
}

void decode_attention_forward(const Tensor&, const Tensor&, const Tensor&, const DecodeCache&, const std::vector<int64_t>&,
                              int64_t, double, double, Tensor&) {
  no_cuda("decode_attention");
}

Tensor cross_entropy_forward(const Tensor&, const Tensor&, int64_t, int64_t, Tensor&, Tensor&, Tensor*, float, double,
                             Tensor*) {
  no_cuda("cross_entropy");
}
Tensor cross_entropy_backward(const Tensor&, const Tensor&, const Tensor&, int64_t, int64_t, const Tensor&,
                              const Tensor&, const Tensor&, float, double) {
  no_cuda("cross_entropy backward");
}

void dropout_mask(Tensor&, uint64_t, uint64_t, float, double) { no_cuda("dropout"); }

void embedding_forward(const Tensor&, const Tensor&, Tensor&) { no_cuda("embedding"); }
void embedding_backward(const Tensor&, const Tensor&, Tensor&) { no_cuda("embedding backward"); }

Tensor gelu_forward(const Tensor&) { no_cuda("gelu"); }
Tensor gelu_backward(const Tensor&, const Tensor&) { no_cuda("gelu backward"); }

Tensor linear_gelu(const Tensor&, const Tensor&, const Tensor&, Tensor*) { no_cuda("linear_gelu"); }
bool add_layernorm_linear_fits(int64_t, int64_t, DType) { return false; }
Tensor add_layernorm_linear(const Tensor&, const Tensor&, const Tensor&, const Tensor&, double, const Tensor&,
                            const Tensor&, bool, Tensor&) {
  no_cuda("add_layernorm_linear");
}
Tensor linear_grad_x_dgelu(const Tensor&, const Tensor&, const Tensor&) { no_cuda("linear_gelu backward"); }

Tensor layernorm_forward(const Tensor&, const Tensor&, const Tensor&, double, Tensor&, Tensor&) {
  no_cuda("layernorm");
}
void layernorm_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, bool, bool, bool,
                        Tensor&, Tensor&, Tensor&, const Tensor&) {
  no_cuda("layernorm backward");
}
Tensor add_layernorm_forward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, double, Tensor&, Tensor&,
                             Tensor&) {
  no_cuda("add_layernorm");
}

Tensor matmul(const Tensor&, const Tensor&) { no_cuda("matmul"); }
Tensor matmul_grad_a(const Tensor&, const Tensor&, const Shape&) { no_cuda("matmul backward"); }
Tensor matmul_grad_b(const Tensor&, const Tensor&, const Shape&) { no_cuda("matmul backward"); }
Tensor linear(const Tensor&, const Tensor&, const Tensor&) { no_cuda("linear"); }
Tensor linear_grad_x(const Tensor&, const Tensor&) { no_cuda("linear backward"); }
Tensor linear_grad_weight(const Tensor&, const Tensor&) { no_cuda("linear backward"); }
Tensor linear_grad_bias(const Tensor&) { no_cuda("linear backward"); }

void reduce_dim(Reduce, const Tensor&, int64_t, int64_t, int64_t, Tensor&, Tensor*) { no_cuda("reduce"); }
void scatter_max_grad(const Tensor&, const Tensor&, int64_t, int64_t, int64_t, Tensor&) { no_cuda("max backward"); }
void sample_top_k(const Tensor&, int64_t, double, int64_t, uint64_t, uint64_t, Tensor&) { no_cuda("sample_top_k"); }

Tensor softmax_forward(const Tensor&, int64_t, bool) { no_cuda("softmax"); }
Tensor softmax_backward(const Tensor&, const Tensor&, int64_t, bool) { no_cuda("softmax backward"); }

}  // namespace keel::cuda
