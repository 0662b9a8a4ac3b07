// StepReadback's arithmetic on the device, the host's to the bit: an f64 quotient added in f64
// (IEEE division and addition, correctly rounded on both), and nan_max (ops/nan_max.h), whose
// result is always one of its inputs. One thread for the scalar, one per element for the merge:
// a few hundred values at most.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "core/cuda/check.h"
#include "core/cuda/convert.cuh"
#include "core/cuda/launch.cuh"
#include "core/cuda/runtime.h"
#include "optim/cuda/step_readback.h"

namespace keel::optim::cuda {

namespace {
using ::keel::cuda::to_f32;

constexpr int kThreads = 256;

// What the host reads: f64 as it is, the others through f32 (Tensor::item, to_vector<float>).
__device__ double widen(double x) { return x; }
template <typename T> __device__ double widen(T x) { return static_cast<double>(to_f32(x)); }

// x [] -> slot[0]
template <typename T>
__global__ void add_quotient_kernel(double* __restrict__ slot, const T* __restrict__ x, double divisor) {
  slot[0] += widen(x[0]) / divisor;
}

// v (N) -> dst (N)
template <typename T>
__global__ void merge_max_kernel(double* __restrict__ dst, const T* __restrict__ v, int64_t n) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const double a = dst[i], b = widen(v[i]);
  dst[i] = (a != a || a >= b) ? a : b;  // a != a: a is NaN (no math header needed in either build)
}

void check(const Tensor& buf, const Tensor& t, const char* op) {
  if (!buf.device().is_cuda() || t.device() != buf.device() || !t.is_contiguous() || !buf.is_contiguous())
    throw DeviceError(op, "expected contiguous tensors on one GPU, got " + buf.device().str() + " and " + t.device().str());
}
}  // namespace

void add_quotient(Tensor& buf, int64_t slot, const Tensor& x, double divisor) {
  check(buf, x, "StepReadback::add_quotient");
  const int dev = buf.device().index;
  KEEL_CHECK_CUDA(cudaSetDevice(dev));
  cudaStream_t stream = ::keel::cuda::detail::stream(dev);
  double* dst = static_cast<double*>(buf.raw_data()) + slot;
  ::keel::cuda::visit_cuda_float</*AllowF64=*/true>(x.dtype(), "StepReadback::add_quotient", [&]<typename T>() {
    keel::cuda::launch_kernel(add_quotient_kernel<T>, 1, 1, 0, stream, dst, static_cast<const T*>(x.raw_data()), divisor);
    KEEL_CHECK_LAUNCH();
  });
}

void merge_max(Tensor& buf, int64_t first, const Tensor& v) {
  check(buf, v, "StepReadback::merge_max");
  const int64_t n = v.numel();
  if (n == 0) return;
  const int dev = buf.device().index;
  KEEL_CHECK_CUDA(cudaSetDevice(dev));
  cudaStream_t stream = ::keel::cuda::detail::stream(dev);
  double* dst = static_cast<double*>(buf.raw_data()) + first;
  const int blocks = static_cast<int>((n + kThreads - 1) / kThreads);
  ::keel::cuda::visit_cuda_float</*AllowF64=*/true>(v.dtype(), "StepReadback::merge_max", [&]<typename T>() {
    keel::cuda::launch_kernel(merge_max_kernel<T>, blocks, kThreads, 0, stream, dst, static_cast<const T*>(v.raw_data()), n);
    KEEL_CHECK_LAUNCH();
  });
}

}  // namespace keel::optim::cuda
