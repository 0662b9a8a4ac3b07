// TMA (core/cuda/tensor_map.h, tma_load in core/cuda/ptx_sm90.cuh) on the emulated GPU: a box
// lands in shared memory as the CUDA driver documents it (rows packed, 16-byte chunks swizzled
// within each 128-byte span by the row index, zeros outside the tensor), tiles a TMA writes are
// exactly what wgmma's descriptor of the same swizzle reads (the pipeline of Hopper's attention
// kernels, end to end), a store writes a box from shared memory back (the same layout, nothing
// outside the tensor), and a map the driver would refuse, a map it never made, a misaligned
// destination, a store's buffer changed before its wait and a store never waited for are errors.
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/cuda/check.h"
#include "core/cuda/launch.cuh"
#include "core/cuda/runtime.h"
#include "core/cuda/tensor_map.h"
#include "core/cuda/wgmma.cuh"
#include "core/error.h"
#include "emu_test_helpers.h"

using keel::DType;
using keel::cuda::launch_kernel;
using keel::cuda::tensor_map;
using keel::cuda::TmaSwizzle;
using keel::emu_test::device_array;
using keel::emu_test::error_of;
namespace ptx = keel::cuda::ptx;

namespace {

// One box at coords into shared memory (offset `at` from a 1024-aligned buffer), then its bytes
// out as they lie there.
template <int Rank>
__global__ void box_kernel(const __grid_constant__ CUtensorMap map, int c0, int c1, int c2, uint32_t bytes, int at,
                           unsigned char* out) {
  KEEL_DYNAMIC_SHARED(unsigned char, smem, 1024);
  KEEL_SHARED_ALIGNED(8, uint64_t, bar);
  if (threadIdx.x == 0) ptx::mbarrier_init(&bar, 1);
  ptx::fence_proxy_async();
  __syncthreads();
  if (threadIdx.x == 0) {
    const int32_t all[3] = {c0, c1, c2};
    int32_t c[Rank];
    for (int i = 0; i < Rank; ++i) c[i] = all[i];
    ptx::mbarrier_arrive_expect_tx(&bar, bytes);
    ptx::tma_load(smem + at, &map, c, &bar);
  }
  ptx::mbarrier_wait_parity(&bar, 0);
  for (uint32_t i = threadIdx.x; i < bytes; i += blockDim.x) out[i] = smem[at + int(i)];
}

uint16_t bf16_bits(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  return static_cast<uint16_t>(u >> 16);
}
float small(int i, int seed) { return float((i * 7 + seed * 13) % 9 - 4); }

// S (64 x 64) = Q (64 x 64) K^T (64 x 64): both tiles brought by TMA with the 128-byte swizzle
// (rows of 64 bf16), multiplied by four chained wgmmas whose descriptors step 32 bytes along k.
__global__ void tma_wgmma_kernel(const __grid_constant__ CUtensorMap q, const __grid_constant__ CUtensorMap k,
                                 float* out) {
  KEEL_DYNAMIC_SHARED(unsigned char, smem, 1024);  // Q at 0, K at 8192
  KEEL_SHARED_ALIGNED(8, uint64_t, bar);
  const int tid = static_cast<int>(threadIdx.x), w = tid / 32, g = tid % 32 / 4, t = tid % 4;
  if (tid == 0) ptx::mbarrier_init(&bar, 1);
  ptx::fence_proxy_async();
  __syncthreads();
  if (tid == 0) {
    const int32_t at[2] = {0, 0};
    ptx::mbarrier_arrive_expect_tx(&bar, 2 * 8192);
    ptx::tma_load(smem, &q, at, &bar);
    ptx::tma_load(smem + 8192, &k, at, &bar);
  }
  ptx::mbarrier_wait_parity(&bar, 0);
  const uint32_t base = ptx::shared_address(smem);
  float d[32];
  ptx::wgmma_fence();
  for (int s = 0; s < 4; ++s)
    ptx::wgmma_m64k16<64, __nv_bfloat16>(d, ptx::wgmma_descriptor(base + 32 * s, 16, 1024, ptx::Swizzle::b128),
                                         ptx::wgmma_descriptor(base + 8192 + 32 * s, 16, 1024, ptx::Swizzle::b128),
                                         s > 0);
  ptx::wgmma_commit_group();
  ptx::wgmma_wait_group<0>();
  for (int i = 0; i < 8; ++i)
    for (int h = 0; h < 2; ++h)
      for (int j = 0; j < 2; ++j) out[(16 * w + g + 8 * h) * 64 + 8 * i + 2 * t + j] = d[4 * i + 2 * h + j];
}

enum class StoreBug { none, write_before_wait, no_wait, no_commit };

// A 16 x 64 bf16 box written by the block's threads at the places the 128-byte swizzle gives
// (element (r, j) = r * 64 + j; chunk j / 8 of row r at chunk (j / 8) XOR (r % 8)), then stored
// by TMA at (c0, c1): one thread issues it after every writer's proxy fence and a barrier.
template <StoreBug kBug>
__global__ void store_kernel(const __grid_constant__ CUtensorMap map, int c0, int c1) {
  KEEL_DYNAMIC_SHARED(unsigned char, smem, 1024);
  auto* tile = reinterpret_cast<uint16_t*>(smem);
  for (int i = static_cast<int>(threadIdx.x); i < 16 * 64; i += static_cast<int>(blockDim.x)) {
    const int r = i / 64, j = i % 64;
    tile[r * 64 + ((j / 8) ^ (r % 8)) * 8 + j % 8] = static_cast<uint16_t>(r * 64 + j);
  }
  ptx::fence_proxy_async();
  __syncthreads();
  if (threadIdx.x == 0) {
    const int32_t c[2] = {c0, c1};
    ptx::tma_store(&map, c, smem);
    if (kBug != StoreBug::no_commit) ptx::bulk_commit_group();
    if (kBug == StoreBug::write_before_wait) tile[5] = 7;
    if (kBug != StoreBug::no_wait) ptx::bulk_wait_group_read<0>();
  }
}

}  // namespace

TEST_CASE("emulated TMA: a store writes the swizzled box into the tensor, nothing outside it") {
  // A 40 x 104 bf16 matrix (208-byte rows); one box inside it, one past both edges.
  constexpr int kRows = 40, kCols = 104;
  constexpr uint16_t kUntouched = 0xbeef;
  auto* m = device_array<uint16_t>(kRows * kCols);
  for (int i = 0; i < kRows * kCols; ++i) m[i] = kUntouched;
  const CUtensorMap map = tensor_map(m, DType::bf16, {kCols, kRows}, {kCols * 2}, {64, 16}, TmaSwizzle::b128);
  for (auto [c0, c1] : {std::pair{0, 0}, {64, 32}})
    CHECK(error_of([&] { launch_kernel(store_kernel<StoreBug::none>, 1, 64, 2048, nullptr, map, c0, c1); }) ==
          "(no error)");
  for (int row = 0; row < kRows; ++row)
    for (int col = 0; col < kCols; ++col) {
      CAPTURE(row);
      CAPTURE(col);
      const bool first = row < 16 && col < 64, second = row >= 32 && col >= 64;
      const int want = first ? row * 64 + col : second ? (row - 32) * 64 + (col - 64) : kUntouched;
      CHECK(m[row * kCols + col] == want);
    }
  cudaFree(m);
}

TEST_CASE("emulated TMA: a store's buffer written before its wait, and a store no wait covers, are errors") {
  auto* m = device_array<uint16_t>(16 * 64);
  const CUtensorMap map = tensor_map(m, DType::bf16, {64, 16}, {128}, {64, 16}, TmaSwizzle::b128);
  std::string e = error_of(
      [&] { launch_kernel(store_kernel<StoreBug::write_before_wait>, 1, 64, 2048, nullptr, map, 0, 0); });
  CHECK(e.find("that the TMA store issued at") != std::string::npos);
  CHECK(e.find("changed between the copy and the cp.async.bulk.wait_group.read") != std::string::npos);
  CHECK(e.find("test_tma.cu") != std::string::npos);
  e = error_of([&] { launch_kernel(store_kernel<StoreBug::no_wait>, 1, 64, 2048, nullptr, map, 0, 0); });
  CHECK(e.find("exited with 1 bulk copy that no cp.async.bulk.wait_group covered") != std::string::npos);
  e = error_of([&] { launch_kernel(store_kernel<StoreBug::no_commit>, 1, 64, 2048, nullptr, map, 0, 0); });
  CHECK(e.find("(never committed)") != std::string::npos);
  cudaFree(m);
}

TEST_CASE("emulated TMA: a box lands swizzled as the driver documents it, with zeros outside the tensor") {
  // A 100 x 200 bf16 matrix; the box of 16 rows x 64 columns at column 150, row 90 runs past both edges.
  constexpr int kRows = 100, kCols = 200;
  auto* m = device_array<uint16_t>(kRows * kCols);
  for (int i = 0; i < kRows * kCols; ++i) m[i] = uint16_t(i + 1);
  const CUtensorMap map = tensor_map(m, DType::bf16, {kCols, kRows}, {kCols * 2}, {64, 16}, TmaSwizzle::b128);
  auto* out = device_array<unsigned char>(2048);
  CHECK(error_of([&] { launch_kernel(box_kernel<2>, 1, 64, 4096, nullptr, map, 150, 90, 0, 2048u, 1024, out); }) ==
        "(no error)");
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 64; ++c) {
      // Chunk c / 8 of the row's 128-byte span goes to chunk (c / 8) XOR (row % 8).
      const int at = r * 128 + ((c / 8) ^ (r % 8)) * 16 + (c % 8) * 2;
      uint16_t got;
      std::memcpy(&got, out + at, 2);
      const int row = 90 + r, col = 150 + c;
      CHECK(got == (row < kRows && col < kCols ? m[row * kCols + col] : 0));
    }
  // 3-D, f32, no swizzle, a box starting before the tensor: rows packed, zeros where it is outside.
  auto* v = device_array<float>(4 * 8 * 32);
  for (int i = 0; i < 4 * 8 * 32; ++i) v[i] = float(i + 1);
  const CUtensorMap map3 = tensor_map(v, DType::f32, {32, 8, 4}, {128, 1024}, {8, 4, 2}, TmaSwizzle::none);
  CHECK(error_of([&] { launch_kernel(box_kernel<3>, 1, 64, 1024, nullptr, map3, -4, 6, 3, 256u, 0, out); }) ==
        "(no error)");
  for (int z = 0; z < 2; ++z)
    for (int y = 0; y < 4; ++y)
      for (int x = 0; x < 8; ++x) {
        float got;
        std::memcpy(&got, out + 4 * ((z * 4 + y) * 8 + x), 4);
        const int X = x - 4, Y = 6 + y, Z = 3 + z;
        CHECK(got == (X >= 0 && Y < 8 && Z < 4 ? v[(Z * 8 + Y) * 32 + X] : 0.0f));
      }
  cudaFree(m), cudaFree(v), cudaFree(out);
}

TEST_CASE("emulated TMA: tiles TMA writes with the 128-byte swizzle are what wgmma's 128-byte descriptors read") {
  auto* q = device_array<uint16_t>(64 * 64);
  auto* k = device_array<uint16_t>(64 * 64);
  for (int i = 0; i < 64 * 64; ++i) q[i] = bf16_bits(small(i, 1)), k[i] = bf16_bits(small(i, 2));
  const CUtensorMap qm = tensor_map(q, DType::bf16, {64, 64}, {128}, {64, 64}, TmaSwizzle::b128);
  const CUtensorMap km = tensor_map(k, DType::bf16, {64, 64}, {128}, {64, 64}, TmaSwizzle::b128);
  auto* out = device_array<float>(64 * 64);
  CHECK(error_of([&] { launch_kernel(tma_wgmma_kernel, 1, 128, 16384, nullptr, qm, km, out); }) == "(no error)");
  for (int r = 0; r < 64; ++r)
    for (int c = 0; c < 64; ++c) {
      float s = 0.0f;
      for (int j = 0; j < 64; ++j) s += small(r * 64 + j, 1) * small(c * 64 + j, 2);
      CHECK(out[r * 64 + c] == s);
    }
  cudaFree(q), cudaFree(k), cudaFree(out);
}

TEST_CASE("emulated TMA: a map the driver refuses, a map it never made and a misaligned destination are errors") {
  auto* m = device_array<uint16_t>(64 * 128);
  std::string e;
  try {
    (void)tensor_map(m, DType::bf16, {128, 64}, {256}, {128, 8}, TmaSwizzle::b128);  // 256-byte rows, 128-byte swizzle
  } catch (const keel::CudaError& err) {
    e = err.what();
  }
  CHECK(e.find("cuTensorMapEncodeTiled") != std::string::npos);
  CHECK(e.find("box [128 8]") != std::string::npos);
  CUtensorMap forged{};
  auto* out = device_array<unsigned char>(2048);
  e = error_of([&] { launch_kernel(box_kernel<2>, 1, 32, 4096, nullptr, forged, 0, 0, 0, 1024u, 0, out); });
  CHECK(e.find("did not encode") != std::string::npos);
  const CUtensorMap map = tensor_map(m, DType::bf16, {128, 64}, {256}, {64, 8}, TmaSwizzle::b128);
  e = error_of([&] { launch_kernel(box_kernel<2>, 1, 32, 4096, nullptr, map, 0, 0, 0, 1024u, 64, out); });
  CHECK(e.find("misaligned") != std::string::npos);
  cudaFree(m), cudaFree(out);
}
