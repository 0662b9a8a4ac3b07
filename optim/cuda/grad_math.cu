// Gradient passes for clipping and loss scaling: a deterministic f64 sum of squares (fixed
// grid, per-block partials, one-block final pass; no atomics, so no run-to-run jitter in the
// clip coefficient) and an in-place scale.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <type_traits>

#include "core/cuda/check.h"
#include "core/cuda/convert.cuh"
#include "core/cuda/launch.cuh"
#include "core/cuda/runtime.h"
#include "core/factory.h"
#include "optim/cuda/grad_math.h"

namespace keel::optim::cuda {

namespace {
using ::keel::cuda::from_f32;
using ::keel::cuda::to_f32;

constexpr int kThreads = 256;
constexpr int kMaxBlocks = 512;

// Blocks of the partial sums: enough for every thread to have an element, at most kMaxBlocks.
// A function of n only, so the summation order (and the result) depends on n only.
int blocks_for_sum(int64_t n) { return static_cast<int>(std::min<int64_t>(kMaxBlocks, (n + kThreads - 1) / kThreads)); }

__device__ double load_f64(double x) { return x; }
template <typename T> __device__ double load_f64(T x) { return static_cast<double>(to_f32(x)); }


// Tree sum of one value per thread within a block (blockDim.x == kThreads).
__device__ double block_sum(double x) {
  __shared__ double buf[kThreads];
  buf[threadIdx.x] = x;
  __syncthreads();
  for (unsigned s = kThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) buf[threadIdx.x] += buf[threadIdx.x + s];
    __syncthreads();
  }
  return buf[0];
}

// t (N) -> partial[blockIdx.x]
template <typename T>
__global__ void sumsq_partial(const T* __restrict__ t, int64_t n, double* __restrict__ partial) {
  double s = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    double x = load_f64(t[i]);
    s += x * x;
  }
  double b = block_sum(s);
  if (threadIdx.x == 0) partial[blockIdx.x] = b;
}

// partial (P) -> out[0], one block.
__global__ void sum_final(const double* __restrict__ partial, int p, double* __restrict__ out) {
  double s = 0;
  for (int i = threadIdx.x; i < p; i += blockDim.x) s += partial[i];
  double b = block_sum(s);
  if (threadIdx.x == 0) out[0] = b;
}

template <typename T, typename C>
__global__ void scale_kernel(T* __restrict__ t, int64_t n, C k) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    if constexpr (std::is_same_v<T, double>) t[i] = t[i] * k;
    else t[i] = from_f32<T>(to_f32(t[i]) * k);
  }
}

void check(const Tensor& t, const char* op) {
  if (!t.device().is_cuda() || !t.is_contiguous())
    throw DeviceError(op, "expected a contiguous CUDA tensor, got one on " + t.device().str());
}
}  // namespace

double sum_of_squares(const Tensor& t) {
  check(t, "sum_of_squares");
  const int64_t n = t.numel();
  if (n == 0) return 0.0;
  const int dev = t.device().index;
  KEEL_CHECK_CUDA(cudaSetDevice(dev));
  cudaStream_t stream = ::keel::cuda::detail::stream(dev);
  const int blocks = blocks_for_sum(n);
  Tensor partial = empty({blocks + 1}, {DType::f64, t.device()});  // the partials, then the total
  double* p = static_cast<double*>(partial.raw_data());
  ::keel::cuda::visit_cuda_float</*AllowF64=*/true>(t.dtype(), "sum_of_squares", [&]<typename T>() {
    keel::cuda::launch_kernel(sumsq_partial<T>, blocks, kThreads, 0, stream, static_cast<const T*>(t.raw_data()), n, p);
    KEEL_CHECK_LAUNCH();
  });
  keel::cuda::launch_kernel(sum_final, 1, kThreads, 0, stream, p, blocks, p + blocks);
  KEEL_CHECK_LAUNCH();
  double out = 0;
  ::keel::cuda::memcpy_device_to_host(&out, p + blocks, sizeof(double), dev);
  return out;
}

void scale_inplace(Tensor& t, double s) {
  check(t, "scale_inplace");
  const int64_t n = t.numel();
  if (n == 0) return;
  const int dev = t.device().index;
  KEEL_CHECK_CUDA(cudaSetDevice(dev));
  cudaStream_t stream = ::keel::cuda::detail::stream(dev);
  int64_t b = (n + kThreads - 1) / kThreads;
  int blocks = static_cast<int>(b < 65535 ? b : 65535);
  ::keel::cuda::visit_cuda_float</*AllowF64=*/true>(t.dtype(), "scale_inplace", [&]<typename T>() {
    using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
    keel::cuda::launch_kernel(scale_kernel<T, C>, blocks, kThreads, 0, stream, static_cast<T*>(t.raw_data()), n, static_cast<C>(s));
    KEEL_CHECK_LAUNCH();
  });
}

}  // namespace keel::optim::cuda
