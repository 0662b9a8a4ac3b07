// Named barriers (bar.sync / bar.arrive id, count: core/cuda/ptx.cuh) on the emulated GPU: two
// warpgroups take turns through a pair of them (the ping-pong of attention_sm90_forward.cu) and
// see each other's writes in order; two warps hand a buffer back and forth with arrive on one
// side and sync on the other; and each way of getting them wrong is an error that names it: a
// missing first arrive (a deadlock naming the barrier and its count), counts that disagree
// within a phase, barrier 0 (which is __syncthreads'), a warp that exits before its last arrive
// (the deadlock names the exited threads).
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "core/cuda/check.h"
#include "core/cuda/launch.cuh"
#include "core/cuda/ptx.cuh"
#include "emu_test_helpers.h"

using keel::cuda::launch_kernel;
using keel::emu_test::device_array;
using keel::emu_test::error_of;
namespace ptx = keel::cuda::ptx;

namespace {

constexpr int kGroup = 128, kRounds = 5;

enum class Bug { none, no_first_arrive, counts_differ, barrier_zero };

// Two warpgroups, each in turn: wait for its turn (bar.sync on its own barrier, 256 threads:
// itself and the other's arrivals), fold its number into every acc element and log it, then give
// the turn away (bar.arrive on the other's). Warpgroup 1 hands warpgroup 0 the first turn and
// skips its last hand-over, so both barriers end with no phase open.
template <Bug kBug>
__global__ void turns_kernel(int* acc_out, int* log_out) {
  KEEL_SHARED(int[kGroup], acc);
  KEEL_SHARED(int[2 * kRounds], log);
  const int tid = static_cast<int>(threadIdx.x), c = tid / kGroup, i = tid % kGroup;
  const int own = kBug == Bug::barrier_zero ? 0 : 1 + c, other = 2 - c;
  if (c == 0) acc[i] = 0;
  __syncthreads();
  if (c == 1 && kBug != Bug::no_first_arrive) ptx::named_barrier_arrive(1, 2 * kGroup);
  for (int r = 0; r < kRounds; ++r) {
    ptx::named_barrier_sync(own, 2 * kGroup);
    acc[i] = acc[i] * 3 + c + 1;
    if (i == 0) log[2 * r + c] = c;
    if (c == 0 || r + 1 < kRounds)
      ptx::named_barrier_arrive(other, kBug == Bug::counts_differ && c == 1 ? kGroup : 2 * kGroup);
  }
  __syncthreads();
  if (c == 0) acc_out[i] = acc[i];
  if (tid < 2 * kRounds) log_out[tid] = log[tid];
}

// Warp 0 fills a buffer, warp 1 sums it, round after round through two barriers of 64 threads
// (the other two warps of the block take no part): `full` (warp 0 arrives, warp 1 syncs) and
// `empty` (the other way round; its first phase opens with warp 1's arrival).
__global__ void handover_kernel(int rounds, int* out, int filled) {
  KEEL_SHARED(int[32], buf);
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  constexpr int kFull = 3, kEmpty = 4, kTwoWarps = 64;
  if (warp == 0) {
    for (int r = 0; r < filled; ++r) {  // filled < rounds: a planted early exit
      if (r > 0) ptx::named_barrier_sync(kEmpty, kTwoWarps);
      buf[lane] = r * 100 + lane;
      ptx::named_barrier_arrive(kFull, kTwoWarps);
    }
  } else if (warp == 1) {
    int sum = 0;
    for (int r = 0; r < rounds; ++r) {
      ptx::named_barrier_sync(kFull, kTwoWarps);
      sum += buf[31 - lane];
      if (r + 1 < rounds) ptx::named_barrier_arrive(kEmpty, kTwoWarps);
    }
    out[lane] = sum;
  }
}

template <Bug kBug>
std::string run_turns(std::vector<int>& acc, std::vector<int>& log) {
  int* d_acc = device_array<int>(kGroup);
  int* d_log = device_array<int>(2 * kRounds);
  const std::string e = error_of([&] { launch_kernel(turns_kernel<kBug>, 1, 2 * kGroup, 0, nullptr, d_acc, d_log); });
  acc.assign(d_acc, d_acc + kGroup);
  log.assign(d_log, d_log + 2 * kRounds);
  cudaFree(d_acc), cudaFree(d_log);
  return e;
}

}  // namespace

TEST_CASE("emulated PTX: two warpgroups take turns through named barriers and see each other's writes in order") {
  std::vector<int> acc, log;
  REQUIRE(run_turns<Bug::none>(acc, log) == "(no error)");
  int want = 0;
  for (int r = 0; r < kRounds; ++r) want = (want * 3 + 1) * 3 + 2;  // warpgroup 0's turn, then 1's
  for (int i = 0; i < kGroup; ++i) CHECK(acc[i] == want);
  for (int k = 0; k < 2 * kRounds; ++k) CHECK(log[k] == k % 2);
}

TEST_CASE("emulated PTX: a barrier of two warps hands a buffer back and forth, arrive on one side, sync on the other") {
  for (int rounds : {1, 6}) {
    CAPTURE(rounds);
    int* out = device_array<int>(32);
    REQUIRE(error_of([&] { launch_kernel(handover_kernel, 1, 128, 0, nullptr, rounds, out, rounds); }) == "(no error)");
    for (int lane = 0; lane < 32; ++lane) {
      int want = 0;
      for (int r = 0; r < rounds; ++r) want += r * 100 + 31 - lane;
      CHECK(out[lane] == want);
    }
    cudaFree(out);
  }
}

TEST_CASE("emulated PTX: a missing arrive, counts that differ and barrier 0 are errors naming the barrier") {
  std::vector<int> acc, log;
  std::string e = run_turns<Bug::no_first_arrive>(acc, log);
  CHECK(e.find("deadlock at a named barrier") != std::string::npos);
  CHECK(e.find("named barrier 1 has its 256 threads; 128 have arrived") != std::string::npos);
  CHECK(e.find("test_named_barrier.cu") != std::string::npos);
  e = run_turns<Bug::counts_differ>(acc, log);
  CHECK(e.find("bar.arrive 1, 128") != std::string::npos);
  CHECK(e.find("while its phase counts 256 threads") != std::string::npos);
  e = run_turns<Bug::barrier_zero>(acc, log);
  CHECK(e.find("bar.sync 0 (") != std::string::npos);
  CHECK(e.find("named barriers are 1 to 15") != std::string::npos);
}

TEST_CASE("emulated PTX: a warp that exits before its last arrive is named in the deadlock") {
  int* out = device_array<int>(32);
  const std::string e = error_of([&] { launch_kernel(handover_kernel, 1, 128, 0, nullptr, 3, out, 2); });
  cudaFree(out);
  CHECK(e.find("named barrier 3 has its 64 threads; 32 have arrived") != std::string::npos);
  CHECK(e.find("threads 0..31, 64..127 have exited") != std::string::npos);
}
