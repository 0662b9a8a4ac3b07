// Two deliberately broken kernels and their fixed twins, which prove that the sanitizer tiers
// of the emulated device catch what they promise (tests/emu/CMakeLists.txt runs them):
//
//   planted_bugs race        a missing __syncthreads: each thread reads its neighbour's shared
//                            slot, which nothing orders after the neighbour's write
//                            -> ThreadSanitizer (preset emu-tsan) reports a data race
//   planted_bugs race-fixed  the same with the barrier: no report
//   planted_bugs oob         an off-by-one store one element past a device buffer
//                            -> AddressSanitizer reports a heap-buffer-overflow
//   planted_bugs oob-fixed   the same within bounds: no report
//   planted_bugs oob-tensor  the off-by-one store into a keel tensor, whose block in the caching
//                            allocator is larger than the tensor: AddressSanitizer still reports it
#include <cstdio>
#include <cstring>

#include "core/cuda/check.h"
#include "core/cuda/launch.cuh"
#include "core/factory.h"

namespace {

constexpr int kThreads = 64;

// in, out (kThreads): out[t] = in[t] + in[t + 1 mod kThreads], staged in shared memory.
template <bool kBarrier>
__global__ void neighbour_sum_kernel(const float* in, float* out) {
  __shared__ float tile[kThreads];
  const int t = threadIdx.x;
  tile[t] = in[t];
  if (kBarrier) __syncthreads();
  out[t] = tile[t] + tile[(t + 1) % kThreads];
}

// out (n): out[i] = i for i < n, or, with the planted bug, for i <= n.
template <bool kOffByOne>
__global__ void iota_kernel(float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (kOffByOne ? i <= n : i < n) out[i] = static_cast<float>(i);
}

}  // namespace

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "";
  float *in = nullptr, *out = nullptr;
  KEEL_CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&in), kThreads * sizeof(float)));
  KEEL_CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&out), kThreads * sizeof(float)));
  KEEL_CHECK_CUDA(cudaMemset(in, 0, kThreads * sizeof(float)));
  if (std::strcmp(mode, "race") == 0 || std::strcmp(mode, "race-fixed") == 0) {
    auto kernel = mode[4] ? neighbour_sum_kernel<true> : neighbour_sum_kernel<false>;
    keel::cuda::launch_kernel(kernel, 1, kThreads, 0, nullptr, in, out);
  } else if (std::strcmp(mode, "oob") == 0 || std::strcmp(mode, "oob-fixed") == 0) {
    auto kernel = mode[3] ? iota_kernel<false> : iota_kernel<true>;
    KEEL_CHECK_CUDA(cudaFree(out));
    KEEL_CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&out), 30 * sizeof(float)));
    keel::cuda::launch_kernel(kernel, 1, 32, 0, nullptr, out, 30);  // 30 elements, 32 threads
  } else if (std::strcmp(mode, "oob-tensor") == 0) {
    keel::Tensor t = keel::empty({30}, {keel::DType::f32, keel::Device::cuda(0)});
    keel::cuda::launch_kernel(iota_kernel<true>, 1, 32, 0, nullptr, static_cast<float*>(t.raw_data()), 30);
  } else {
    std::fprintf(stderr, "usage: planted_bugs race|race-fixed|oob|oob-fixed|oob-tensor\n");
    return 2;
  }
  KEEL_CHECK_LAUNCH();
  KEEL_CHECK_CUDA(cudaFree(in));
  KEEL_CHECK_CUDA(cudaFree(out));
  std::printf("planted_bugs %s: ran to the end\n", mode);
  return 0;
}
