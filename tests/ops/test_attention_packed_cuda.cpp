// attention_packed on the GPU: the kernels read q, k, v and dout and write out and the gradient
// through strided views; the bits must be those of the split-and-copy path, in every dtype.
#include "attention_packed_check.h"
#include "cuda_test.h"

using namespace keel;
using namespace keel::attention_test;

TEST_CASE("CUDA attention_packed gives attention()'s bits: output, statistics, gradient") {
  KEEL_REQUIRE_CUDA();
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) check_packed_cases(Device::cuda(0), dt);
}
