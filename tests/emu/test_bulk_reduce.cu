// Bulk reductions (cp.reduce.async.bulk .add.f32: ptx::bulk_reduce_add_f32, core/cuda/ptx_sm90.cuh)
// on the emulated GPU: blocks add a shared-memory vector into one global vector, each float an
// atomic add, in bulk groups that a thread commits and waits for (bulk_wait_group, the writes
// done); and the mistakes are errors naming them: a size that is not a multiple of 16 bytes, the
// shared memory changed before the wait (by the issuing thread, or by another that nothing held
// back), a thread that exits with a reduction no wait covered.
#include <doctest/doctest.h>

#include <string>

#include "core/cuda/check.h"
#include "core/cuda/launch.cuh"
#include "core/cuda/ptx_sm90.cuh"
#include "emu_test_helpers.h"

using keel::cuda::launch_kernel;
using keel::emu_test::device_array;
using keel::emu_test::error_of;
namespace ptx = keel::cuda::ptx;

namespace {

constexpr int kN = 64;

enum class Bug { none, odd_size, write_before_wait, other_writes, no_wait };

// Each block stages block + i / 64 in shared memory and adds it into sum twice, in two groups:
// wait_group<1> leaves the second in flight, wait_group<0> finishes it. seen[block] is sum[0] as
// the issuing thread reads it after its last wait: its own adds are in it.
template <Bug kBug>
__global__ void reduce_kernel(float* sum, float* seen) {
  KEEL_SHARED_ALIGNED(16, float[kN], part);
  for (int i = static_cast<int>(threadIdx.x); i < kN; i += static_cast<int>(blockDim.x))
    part[i] = static_cast<float>(blockIdx.x) + static_cast<float>(i) / 64.0f;
  ptx::fence_proxy_async();
  __syncthreads();
  // Another warp's thread reusing the buffer with nothing holding it back until thread 0's wait:
  // it runs after thread 0 has issued, as on a GPU it may before the copy engine has read.
  if (kBug == Bug::other_writes && threadIdx.x == 32) part[7] = -1.0f;
  if (threadIdx.x != 0) return;
  const uint32_t bytes = kBug == Bug::odd_size ? 20 : kN * 4;
  ptx::bulk_reduce_add_f32(sum, part, bytes);
  ptx::bulk_commit_group();
  ptx::bulk_reduce_add_f32(sum, part, bytes);
  ptx::bulk_commit_group();
  if (kBug == Bug::write_before_wait) part[3] = -1.0f;
  ptx::bulk_wait_group<1>();
  if (kBug == Bug::no_wait) return;
  ptx::bulk_wait_group<0>();
  seen[blockIdx.x] = sum[0];
}

}  // namespace

TEST_CASE("emulated PTX: bulk reductions add shared memory into global memory, float by float, by group") {
  constexpr int kBlocks = 5;
  float* sum = device_array<float>(kN);
  float* seen = device_array<float>(kBlocks);
  for (int i = 0; i < kN; ++i) sum[i] = 0.5f;
  REQUIRE(error_of([&] { launch_kernel(reduce_kernel<Bug::none>, kBlocks, 64, 0, nullptr, sum, seen); }) ==
          "(no error)");
  for (int i = 0; i < kN; ++i) {
    float want = 0.5f;
    for (int b = 0; b < kBlocks; ++b) want += 2.0f * (static_cast<float>(b) + static_cast<float>(i) / 64.0f);
    CHECK(sum[i] == doctest::Approx(want).epsilon(1e-6));
  }
  for (int b = 0; b < kBlocks; ++b) CHECK(seen[b] >= 0.5f + 2.0f * static_cast<float>(b));  // its own adds landed
  cudaFree(sum), cudaFree(seen);
}

TEST_CASE("emulated PTX: a bulk reduction of 20 bytes, changed before its wait (by its thread or another), or "
          "never waited for, is an error") {
  float* sum = device_array<float>(kN);
  float* seen = device_array<float>(1);
  std::string e = error_of([&] { launch_kernel(reduce_kernel<Bug::odd_size>, 1, 64, 0, nullptr, sum, seen); });
  CHECK(e.find("cp.reduce.async.bulk of 20 bytes") != std::string::npos);
  e = error_of([&] { launch_kernel(reduce_kernel<Bug::write_before_wait>, 1, 64, 0, nullptr, sum, seen); });
  CHECK(e.find("that the cp.reduce.async.bulk issued at") != std::string::npos);
  CHECK(e.find("cp.async.bulk.wait_group at") != std::string::npos);
  CHECK(e.find("test_bulk_reduce.cu") != std::string::npos);
  e = error_of([&] { launch_kernel(reduce_kernel<Bug::other_writes>, 1, 64, 0, nullptr, sum, seen); });
  CHECK(e.find("that the cp.reduce.async.bulk issued at") != std::string::npos);  // in the window, not before it
  e = error_of([&] { launch_kernel(reduce_kernel<Bug::no_wait>, 1, 64, 0, nullptr, sum, seen); });
  CHECK(e.find("exited with 1 bulk copy that no cp.async.bulk.wait_group covered, the first a "
               "cp.reduce.async.bulk") != std::string::npos);
  cudaFree(sum), cudaFree(seen);
}
