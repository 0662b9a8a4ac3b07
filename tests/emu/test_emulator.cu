// The emulated CUDA device itself (core/cuda/emu): that kernels compute what CUDA says they
// compute (shared memory, barriers, shuffles, votes, atomics), and that every CUDA rule
// the emulator enforces turns into a clear error instead of a hang. Built only in the emulated
// presets: on a real GPU the rule-breaking kernels here would hang or return garbage.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/cuda/check.h"
#include "core/cuda/launch.cuh"
#include "core/error.h"

using keel::cuda::launch_kernel;

namespace {

// Device buffers are host memory on the emulated device, but tests still go through the API.
template <typename T> T* device_array(size_t n) {
  void* p = nullptr;
  KEEL_CHECK_CUDA(cudaMalloc(&p, n * sizeof(T)));
  return static_cast<T*>(p);
}

// in (n) -> out (1): a block sums its share through shared memory, warp shuffles and one atomic.
__global__ void sum_kernel(const float* in, int n, float* out) {
  KEEL_SHARED(float[32], partial);
  const int tid = threadIdx.x + threadIdx.y * blockDim.x, threads = blockDim.x * blockDim.y;
  const int block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  float v = 0;
  for (int i = block * threads + tid; i < n; i += threads * gridDim.x * gridDim.y * gridDim.z) v += in[i];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (tid % 32 == 0) partial[tid / 32] = v;
  __syncthreads();
  if (tid < 32) {
    v = tid < threads / 32 ? partial[tid] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    if (tid == 0) atomicAdd(out, v);
  }
}

// Each lane records what the shuffles and votes give it.
__global__ void shuffle_kernel(int* out) {
  const int lane = threadIdx.x;
  out[0 * 32 + lane] = __shfl_sync(0xffffffffu, lane * 10, 31 - lane);
  out[1 * 32 + lane] = __shfl_up_sync(0xffffffffu, lane * 10, 3, 8);
  out[2 * 32 + lane] = __shfl_down_sync(0xffffffffu, lane * 10, 5, 16);
  out[3 * 32 + lane] = __shfl_xor_sync(0xffffffffu, lane * 10, 9, 32);
  out[4 * 32 + lane] = static_cast<int>(__ballot_sync(0xffffffffu, lane % 3 == 0));
  out[5 * 32 + lane] = __all_sync(0xffffffffu, lane < 32) + 2 * __any_sync(0xffffffffu, lane == 7);
}

// ---- kernels that break a rule ----
__global__ void early_return_kernel(float* out) {
  if (threadIdx.x >= 48) return;  // threads 48..63 leave; the others then wait at the barrier
  __syncthreads();
  out[threadIdx.x] = 1;
}
__global__ void divergent_barrier_kernel(float* out) {
  if (threadIdx.x < 32) __syncthreads();  // only the first warp ever gets here
  out[threadIdx.x] = 1;
}
__global__ void shuffle_exited_lane_kernel(float* out) {
  if (threadIdx.x == 5) return;
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
}
__global__ void mask_without_caller_kernel(float* out) {
  out[threadIdx.x] = __shfl_xor_sync(0x0000ffffu, 1.0f, 1);  // lanes 16..31 are not in their own mask
}
__global__ void partial_warp_kernel(float* out) {  // a block of 40 threads: lanes 8..31 of warp 1 do not exist
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
}
__global__ void dynamic_shared_kernel(float* out, int n) {
  KEEL_DYNAMIC_SHARED(float, buf, 16);
  out[threadIdx.x] = buf[threadIdx.x];  // never written: the emulator fills it with NaN
  (void)n;
}
__global__ void noop_kernel() {}

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const keel::CudaError& e) {
    return e.what();
  }
  return "(no error)";
}

bool launch_error_is(cudaError_t want, const char* words) {
  const cudaError_t got = cudaGetLastError();
  const std::string text = cudaGetErrorString(got);
  INFO("cudaGetErrorString: " << text);
  return got == want && text.find(words) != std::string::npos;
}

}  // namespace

TEST_CASE("emulated device: a 3-D grid of 2-D blocks reduces through shared memory, shuffles and atomics") {
  const int n = 100003;
  std::vector<float> host(n);
  double want = 0;
  for (int i = 0; i < n; ++i) host[i] = static_cast<float>(i % 7) - 3.0f, want += host[i];
  float* in = device_array<float>(n);
  float* out = device_array<float>(1);
  KEEL_CHECK_CUDA(cudaMemcpy(in, host.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  KEEL_CHECK_CUDA(cudaMemset(out, 0, sizeof(float)));
  launch_kernel(sum_kernel, dim3(3, 2, 2), dim3(32, 4), 0, nullptr, in, n, out);
  KEEL_CHECK_LAUNCH();
  float got = 0;
  KEEL_CHECK_CUDA(cudaMemcpy(&got, out, sizeof(float), cudaMemcpyDeviceToHost));
  CHECK(got == doctest::Approx(want));
  KEEL_CHECK_CUDA(cudaFree(in));
  KEEL_CHECK_CUDA(cudaFree(out));
}

TEST_CASE("emulated device: shuffles follow CUDA's lane arithmetic, widths included, and votes count lanes") {
  int* out = device_array<int>(6 * 32);
  launch_kernel(shuffle_kernel, 1, 32, 0, nullptr, out);
  KEEL_CHECK_LAUNCH();
  for (int l = 0; l < 32; ++l) {
    CAPTURE(l);
    CHECK(out[l] == (31 - l) * 10);
    CHECK(out[32 + l] == (l % 8 < 3 ? l : l - 3) * 10);         // up by 3 within groups of 8
    CHECK(out[64 + l] == (l % 16 + 5 >= 16 ? l : l + 5) * 10);  // down by 5 within groups of 16
    CHECK(out[96 + l] == (l ^ 9) * 10);
    CHECK(static_cast<unsigned>(out[128 + l]) == 0x49249249u);  // lanes 0, 3, 6, ...
    CHECK(out[160 + l] == 3);
  }
  KEEL_CHECK_CUDA(cudaFree(out));
}

TEST_CASE("emulated device: fresh device memory and unwritten shared memory read as NaN") {
  float* out = device_array<float>(64);
  CHECK(std::isnan(out[17]));
  launch_kernel(dynamic_shared_kernel, 1, 64, 64 * sizeof(float), nullptr, out, 64);
  KEEL_CHECK_LAUNCH();
  CHECK(std::isnan(out[3]));
  KEEL_CHECK_CUDA(cudaFree(out));
}

TEST_CASE("emulated device: a barrier that only part of a block reaches is an error, not a hang") {
  float* out = device_array<float>(64);
  std::string e = error_of([&] { launch_kernel(early_return_kernel, 1, 64, 0, nullptr, out); });
  CHECK(e.find("__syncthreads") != std::string::npos);
  CHECK(e.find("test_emulator.cu") != std::string::npos);  // the kernel's own line is named
  CHECK(e.find("thread (48,0,0) exited") != std::string::npos);
  e = error_of([&] { launch_kernel(divergent_barrier_kernel, 1, 64, 0, nullptr, out); });
  CHECK(e.find("exited while") != std::string::npos);
  KEEL_CHECK_CUDA(cudaFree(out));
}

TEST_CASE("emulated device: shuffles that name an exited, absent or uninvolved lane are errors") {
  float* out = device_array<float>(64);
  std::string e = error_of([&] { launch_kernel(shuffle_exited_lane_kernel, 1, 32, 0, nullptr, out); });
  CHECK(e.find("__shfl_xor_sync") != std::string::npos);
  CHECK(e.find("lane 5") != std::string::npos);
  e = error_of([&] { launch_kernel(mask_without_caller_kernel, 1, 32, 0, nullptr, out); });
  CHECK(e.find("does not name the caller") != std::string::npos);
  e = error_of([&] { launch_kernel(partial_warp_kernel, 1, 40, 0, nullptr, out); });
  CHECK(e.find("does not exist") != std::string::npos);
  KEEL_CHECK_CUDA(cudaFree(out));
}

TEST_CASE("emulated device: launch limits are CUDA's, reported by cudaGetLastError") {
  (void)cudaGetLastError();
  launch_kernel(noop_kernel, 1, 1025, 0, nullptr);
  CHECK(launch_error_is(cudaErrorInvalidConfiguration, "at most 1024"));
  launch_kernel(noop_kernel, 1, dim3(1, 1, 65), 0, nullptr);
  CHECK(launch_error_is(cudaErrorInvalidConfiguration, "z <= 64"));
  launch_kernel(noop_kernel, dim3(1, 65536), 32, 0, nullptr);
  CHECK(launch_error_is(cudaErrorInvalidConfiguration, "65535"));
  launch_kernel(noop_kernel, 0, 32, 0, nullptr);
  CHECK(launch_error_is(cudaErrorInvalidConfiguration, "empty"));
  // Dynamic shared memory: 48 KB unless the kernel's limit is raised, never above the GPU's.
  float* out = device_array<float>(64);
  launch_kernel(dynamic_shared_kernel, 1, 64, 49 * 1024, nullptr, out, 64);
  CHECK(launch_error_is(cudaErrorInvalidValue, "cudaFuncSetAttribute"));
  KEEL_CHECK_CUDA(cudaFuncSetAttribute(reinterpret_cast<const void*>(dynamic_shared_kernel),
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, 100 * 1024));
  launch_kernel(dynamic_shared_kernel, 1, 64, 100 * 1024, nullptr, out, 64);
  CHECK(cudaGetLastError() == cudaSuccess);
  int optin = 0;
  KEEL_CHECK_CUDA(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
  CHECK(cudaFuncSetAttribute(reinterpret_cast<const void*>(dynamic_shared_kernel),
                             cudaFuncAttributeMaxDynamicSharedMemorySize, optin + 1) == cudaErrorInvalidValue);
  (void)cudaGetLastError();
  KEEL_CHECK_CUDA(cudaFree(out));
  // The message KEEL_CHECK_LAUNCH gives names the launch site and the rule.
  launch_kernel(noop_kernel, 1, 2048, 0, nullptr);
  const std::string e = error_of([] { KEEL_CHECK_LAUNCH(); });
  CHECK(e.find("cudaErrorInvalidConfiguration") != std::string::npos);
  CHECK(e.find("2048 threads") != std::string::npos);
  CHECK(e.find("test_emulator.cu") != std::string::npos);
}

TEST_CASE("emulated device: the properties are the emulated GPU's (KEEL_EMU_GPU picks it)") {
  cudaDeviceProp p{};
  KEEL_CHECK_CUDA(cudaGetDeviceProperties(&p, 0));
  const char* which = std::getenv("KEEL_EMU_GPU");
  const bool a100 = which && (std::strcmp(which, "a100") == 0 || std::strcmp(which, "A100") == 0);
  const bool h200 = which && (std::strcmp(which, "h200") == 0 || std::strcmp(which, "H200") == 0);
  CHECK(p.multiProcessorCount == (a100 ? 108 : 132));
  CHECK(p.sharedMemPerBlock == size_t(48) * 1024);
  CHECK(p.sharedMemPerBlockOptin == size_t(a100 ? 163 : 227) * 1024);
  CHECK(p.major == (a100 ? 8 : 9));
  CHECK(std::string(p.name).find(a100 ? "A100" : h200 ? "H200" : "H100") != std::string::npos);
  int n = 0;
  KEEL_CHECK_CUDA(cudaGetDeviceCount(&n));
  CHECK(n >= 1);
}
