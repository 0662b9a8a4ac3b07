// Deliberately broken kernels and their fixed twins, which prove that the sanitizer tiers
// of the emulated device catch what they promise (tests/emu/CMakeLists.txt runs them):
//
//   planted_bugs race        a missing __syncthreads: each thread reads its neighbour's shared
//                            slot, which nothing orders after the neighbour's write
//                            -> ThreadSanitizer (preset emu-tsan) reports a data race
//   planted_bugs race-fixed  the same with the barrier: no report
//   planted_bugs cp-race     the same through cp.async (core/cuda/ptx.cuh): each thread waits
//                            for its own copy, then reads its neighbour's without a barrier
//                            -> ThreadSanitizer reports a data race with the landing copy
//   planted_bugs cp-race-fixed  with the barrier after the wait: no report
//   planted_bugs ldmatrix-race  a warp reads a tile with ldmatrix, then stages new values over it
//                            in the mma accumulator layout without a __syncwarp: each lane writes
//                            only elements it received, but rows that other lanes named
//                            -> ThreadSanitizer reports a data race with those lanes' reads
//   planted_bugs ldmatrix-race-fixed  with the __syncwarp before the stores: no report
//   planted_bugs mbarrier-race  a bulk copy (core/cuda/ptx_sm90.cuh) fills a tile that every
//                            thread reads without waiting on the copy's mbarrier
//                            -> ThreadSanitizer reports a data race with the copy
//   planted_bugs mbarrier-race-fixed  with the wait on the barrier's phase: no report
//   planted_bugs wgmma-race  a warpgroup's wgmma (core/cuda/wgmma.cuh) reads a tile that its
//                            threads overwrite before waiting for the wgmma
//                            -> ThreadSanitizer reports a data race with the wgmma's read
//   planted_bugs wgmma-race-fixed  the overwrite after the wait and a barrier: no report
//   planted_bugs oob         an off-by-one store one element past a device buffer
//                            -> AddressSanitizer reports a heap-buffer-overflow
//   planted_bugs oob-fixed   the same within bounds: no report
//   planted_bugs oob-tensor  the off-by-one store into a keel tensor, whose block in the caching
//                            allocator is larger than the tensor: AddressSanitizer still reports it
//   planted_bugs shared-oob  a store one byte past a launch's dynamic shared memory
//                            -> AddressSanitizer reports a heap-buffer-overflow
//   planted_bugs shared-oob-fixed  the store into its last byte: no report
// and the classes the emulator catches by itself (planted_classes.cu): shared memory over the
// limit, a block waiting on a block that may not have started, a misaligned vector load, a device
// branch that rounds differently from the host. A CUDA error ends the program with its message.
#include <cstdint>
#include <cstdio>
#include <cstring>

#include <string>

#include "core/cuda/check.h"
#include "core/cuda/launch.cuh"
#include "core/cuda/ptx.cuh"
#include "core/cuda/ptx_sm90.cuh"
#include "core/cuda/wgmma.cuh"
#include "core/factory.h"

namespace {

constexpr int kThreads = 64;

// in, out (kThreads): out[t] = in[t] + in[t + 1 mod kThreads], staged in shared memory.
template <bool kBarrier>
__global__ void neighbour_sum_kernel(const float* in, float* out) {
  KEEL_SHARED(float[kThreads], tile);
  const int t = threadIdx.x;
  tile[t] = in[t];
  if (kBarrier) __syncthreads();
  out[t] = tile[t] + tile[(t + 1) % kThreads];
}

// The same sum with the tile filled by cp.async: a thread's wait makes only its own copy land.
template <bool kBarrier>
__global__ void async_neighbour_sum_kernel(const float* in, float* out) {
  KEEL_SHARED_ALIGNED(16, float[4 * kThreads], tile);
  const int t = threadIdx.x;
  keel::cuda::ptx::cp_async_16(tile + 4 * t, in + 4 * t, false);
  keel::cuda::ptx::cp_async_commit();
  keel::cuda::ptx::cp_async_wait<0>();
  if (kBarrier) __syncthreads();
  out[t] = tile[4 * t] + tile[4 * ((t + 1) % kThreads)];
}

// in (16 x 16 b16), out (32 lanes x 4): the warp's mma A fragment of the tile, by ldmatrix_x4
// (lanes 0-15 name rows 0-15 of columns 0-7, lanes 16-31 the same rows of columns 8-15); then
// the fragment is staged back over the tile, as attention_mma_forward.cu's epilogue stages its
// output over the Q tile. Lane (g, t) = (lane / 4, lane % 4) writes rows g and g + 8, columns
// 2t, 2t + 1 (+ 8): the elements it received, but in rows named by lanes g, g + 8, g + 16, g + 24.
template <bool kSyncwarp>
__global__ void ldmatrix_stage_kernel(const uint16_t* in, uint32_t* out) {
  KEEL_SHARED_ALIGNED(16, uint16_t[16 * 16], tile);
  const int lane = threadIdx.x, g = lane / 4, t = lane % 4;
  for (int e = lane; e < 16 * 16; e += 32) tile[e] = in[e];
  __syncwarp();
  uint32_t a[4];
  keel::cuda::ptx::ldmatrix_x4(a, tile + (lane % 16) * 16 + 8 * (lane / 16));
  if (kSyncwarp) __syncwarp();  // every lane's ldmatrix read is done before any lane stores
  for (int i = 0; i < 4; ++i)   // a[i] = rows g + 8 (i % 2), columns 2t + 8 (i / 2) ..
    std::memcpy(tile + (g + 8 * (i % 2)) * 16 + 2 * t + 8 * (i / 2), &a[i], 4);
  for (int i = 0; i < 4; ++i) out[4 * lane + i] = a[i];
}

// in (4 x kThreads), out (kThreads): out[t] = in[4t], the tile brought into shared memory by one
// bulk copy that completes on an mbarrier; each thread reads it after waiting on the barrier's
// phase 0, or, with the planted bug, without waiting.
template <bool kWait>
__global__ void bulk_copy_kernel(const float* in, float* out) {
  KEEL_SHARED_ALIGNED(16, float[4 * kThreads], tile);
  KEEL_SHARED_ALIGNED(8, uint64_t, full);
  const int t = threadIdx.x;
  if (t == 0) keel::cuda::ptx::mbarrier_init(&full, 1);
  keel::cuda::ptx::fence_proxy_async();
  __syncthreads();
  if (t == 0) {
    keel::cuda::ptx::mbarrier_arrive_expect_tx(&full, 4 * kThreads * sizeof(float));
    keel::cuda::ptx::bulk_copy_global_to_shared(tile, in, 4 * kThreads * sizeof(float), &full);
  }
  if (kWait) keel::cuda::ptx::mbarrier_wait_parity(&full, 0);
  out[t] = tile[4 * t];
}

// out (128): one accumulator of each thread of a warpgroup's 64 x 64 x 16 wgmma over tiles of
// ones (K-major, no swizzle: 8 x 8 core matrices, 128 bytes apart along k, 256 along the rows).
// Each thread then overwrites its 16 bytes of B: with the planted bug before the wait, when the
// wgmma may still be reading them; fixed, after the wait and a barrier.
template <bool kFixed>
__global__ void wgmma_overwrite_kernel(float* out) {
  namespace ptx = keel::cuda::ptx;
  KEEL_DYNAMIC_SHARED(uint16_t, tiles, 1024);  // A (64 x 16) then B (64 x 16), bf16
  const int t = threadIdx.x;
  for (int i = 0; i < 16; ++i) tiles[16 * t + i] = 0x3f80;  // 1.0
  __syncthreads();
  ptx::fence_proxy_async();
  const uint32_t at = ptx::shared_address(tiles);
  float d[32];
  ptx::wgmma_fence();
  ptx::wgmma_m64k16<64, __nv_bfloat16>(d, ptx::wgmma_descriptor(at, 128, 256, ptx::Swizzle::none),
                                       ptx::wgmma_descriptor(at + 2048, 128, 256, ptx::Swizzle::none), false);
  ptx::wgmma_commit_group();
  uint16_t* mine = tiles + 1024 + 8 * t;  // element stores: a memset of 16 bytes TSan would not see
  if (!kFixed)
    for (int i = 0; i < 8; ++i) mine[i] = 0;
  ptx::wgmma_wait_group<0>();
  if (kFixed) {
    __syncthreads();
    for (int i = 0; i < 8; ++i) mine[i] = 0;
  }
  out[t] = d[0];
}

// One byte stored into the launch's `bytes` of dynamic shared memory: its last, or with the
// planted bug the one past it.
template <bool kPastEnd>
__global__ void shared_oob_kernel(int bytes) {
  KEEL_DYNAMIC_SHARED(unsigned char, smem, 16);
  if (threadIdx.x == 0) smem[kPastEnd ? bytes : bytes - 1] = 1;
}

// out (n): out[i] = i for i < n, or, with the planted bug, for i <= n.
template <bool kOffByOne>
__global__ void iota_kernel(float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (kOffByOne ? i <= n : i < n) out[i] = static_cast<float>(i);
}

}  // namespace

namespace keel::planted {
int run_planted_class(const std::string& mode);
}

int main(int argc, char** argv) try {
  const char* mode = argc > 1 ? argv[1] : "";
  if (const int status = keel::planted::run_planted_class(mode); status >= 0) {
    if (status == 0) std::printf("planted_bugs %s: ran to the end\n", mode);
    return status;
  }
  float *in = nullptr, *out = nullptr;
  KEEL_CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&in), 4 * kThreads * sizeof(float)));
  KEEL_CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&out), kThreads * sizeof(float)));
  KEEL_CHECK_CUDA(cudaMemset(in, 0, 4 * kThreads * sizeof(float)));
  if (std::strcmp(mode, "race") == 0 || std::strcmp(mode, "race-fixed") == 0) {
    auto kernel = mode[4] ? neighbour_sum_kernel<true> : neighbour_sum_kernel<false>;
    keel::cuda::launch_kernel(kernel, 1, kThreads, 0, nullptr, in, out);
  } else if (std::strcmp(mode, "cp-race") == 0 || std::strcmp(mode, "cp-race-fixed") == 0) {
    auto kernel = mode[7] ? async_neighbour_sum_kernel<true> : async_neighbour_sum_kernel<false>;
    keel::cuda::launch_kernel(kernel, 1, kThreads, 0, nullptr, in, out);
  } else if (std::strcmp(mode, "ldmatrix-race") == 0 || std::strcmp(mode, "ldmatrix-race-fixed") == 0) {
    auto kernel = mode[13] ? ldmatrix_stage_kernel<true> : ldmatrix_stage_kernel<false>;
    KEEL_CHECK_CUDA(cudaFree(out));
    KEEL_CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&out), 32 * 4 * sizeof(uint32_t)));
    keel::cuda::launch_kernel(kernel, 1, 32, 0, nullptr, reinterpret_cast<const uint16_t*>(in),
                              reinterpret_cast<uint32_t*>(out));  // in: 1 KB, the tile needs 512 bytes
  } else if (std::strcmp(mode, "mbarrier-race") == 0 || std::strcmp(mode, "mbarrier-race-fixed") == 0) {
    auto kernel = mode[13] ? bulk_copy_kernel<true> : bulk_copy_kernel<false>;
    keel::cuda::launch_kernel(kernel, 1, kThreads, 0, nullptr, in, out);
  } else if (std::strcmp(mode, "wgmma-race") == 0 || std::strcmp(mode, "wgmma-race-fixed") == 0) {
    auto kernel = mode[10] ? wgmma_overwrite_kernel<true> : wgmma_overwrite_kernel<false>;
    keel::cuda::launch_kernel(kernel, 1, 128, 4096, nullptr, in);  // in: the 128 floats it writes
  } else if (std::strcmp(mode, "oob") == 0 || std::strcmp(mode, "oob-fixed") == 0) {
    auto kernel = mode[3] ? iota_kernel<false> : iota_kernel<true>;
    KEEL_CHECK_CUDA(cudaFree(out));
    KEEL_CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&out), 30 * sizeof(float)));
    keel::cuda::launch_kernel(kernel, 1, 32, 0, nullptr, out, 30);  // 30 elements, 32 threads
  } else if (std::strcmp(mode, "shared-oob") == 0 || std::strcmp(mode, "shared-oob-fixed") == 0) {
    auto kernel = mode[10] ? shared_oob_kernel<false> : shared_oob_kernel<true>;
    keel::cuda::launch_kernel(kernel, 1, 32, 100, nullptr, 100);  // 100 bytes of dynamic shared memory
  } else if (std::strcmp(mode, "oob-tensor") == 0) {
    keel::Tensor t = keel::empty({30}, {keel::DType::f32, keel::Device::cuda(0)});
    keel::cuda::launch_kernel(iota_kernel<true>, 1, 32, 0, nullptr, static_cast<float*>(t.raw_data()), 30);
  } else {
    std::fprintf(stderr,
                 "usage: planted_bugs race|race-fixed|cp-race|cp-race-fixed|ldmatrix-race|ldmatrix-race-fixed|"
                 "mbarrier-race|mbarrier-race-fixed|wgmma-race|wgmma-race-fixed|"
                 "oob|oob-fixed|oob-tensor|shared-oob|shared-oob-fixed|shared-over|shared-over-fixed|wait-later|wait-earlier|wait-fixed|"
                 "misaligned|misaligned-fixed|misaligned-raw|device-rounding|device-rounding-fixed\n");
    return 2;
  }
  KEEL_CHECK_LAUNCH();
  KEEL_CHECK_CUDA(cudaFree(in));
  KEEL_CHECK_CUDA(cudaFree(out));
  std::printf("planted_bugs %s: ran to the end\n", mode);
  return 0;
} catch (const keel::Error& e) {
  std::printf("planted_bugs %s: %s\n", argc > 1 ? argv[1] : "", e.what());
  return 1;
}
