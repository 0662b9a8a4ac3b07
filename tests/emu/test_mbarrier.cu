// sm_90's mbarrier and bulk copy (core/cuda/ptx_sm90.cuh) on the emulated GPU: a producer/consumer
// pipeline through a ring of shared-memory slots computes the right sums, and each way of getting
// the barriers wrong shows: a read without a wait reads NaN, a wait on the wrong parity passes
// too early or never ends, bytes announced that never land leave the phase waiting forever,
// bytes that were not announced are an error at once, and so is a barrier used before its init.
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "core/cuda/check.h"
#include "core/cuda/launch.cuh"
#include "core/cuda/ptx_sm90.cuh"
#include "core/cuda/runtime.h"
#include "core/error.h"
#include "emu_test_helpers.h"

using keel::cuda::launch_kernel;
using keel::emu_test::device_array;
using keel::emu_test::error_of;
namespace ptx = keel::cuda::ptx;

namespace {

// Under ThreadSanitizer (preset emu-tsan) a read that does not wait is the data race it reports
// (planted_bugs mbarrier-race); the cases that read without waiting run in the other presets.
#if defined(__SANITIZE_THREAD__)
constexpr bool kThreadSanitizer = true;
#else
constexpr bool kThreadSanitizer = false;
#endif

constexpr int kTile = 256;      // floats a slot holds: 1 KB, one bulk copy
constexpr int kSlots = 2;       // slots of the ring
constexpr int kConsumers = 64;  // threads 32..95; each sums 4 floats of a tile
constexpr int kThreads = 32 + kConsumers;

enum class Bug { none, no_wait, wrong_parity, short_expect, long_expect, no_init };

// Thread 0 produces: it copies tile t of src into slot t % kSlots once the consumers have emptied
// it. Threads 32..95 consume: each adds its 4 floats of every tile into out[thread - 32].
template <Bug kBug>
__global__ void pipeline_kernel(const float* src, int tiles, float* out) {
  KEEL_SHARED_ALIGNED(16, float[kSlots * kTile], ring);
  KEEL_SHARED_ALIGNED(8, uint64_t[kSlots], full);
  KEEL_SHARED_ALIGNED(8, uint64_t[kSlots], empty);
  const int tid = static_cast<int>(threadIdx.x);
  if (tid == 0 && kBug != Bug::no_init)
    for (int s = 0; s < kSlots; ++s) ptx::mbarrier_init(&full[s], 1), ptx::mbarrier_init(&empty[s], kConsumers);
  ptx::fence_proxy_async();
  __syncthreads();
  constexpr uint32_t kBytes = kTile * sizeof(float);
  if (tid == 0) {
    for (int t = 0; t < tiles; ++t) {
      const int s = t % kSlots;
      const uint32_t round = uint32_t(t / kSlots);
      ptx::mbarrier_wait_parity(&empty[s], (round & 1) ^ 1);  // round 0 passes at once
      const uint32_t announced = kBug == Bug::short_expect ? kBytes - 16 : kBug == Bug::long_expect ? kBytes + 16 : kBytes;
      ptx::mbarrier_arrive_expect_tx(&full[s], announced);
      ptx::bulk_copy_global_to_shared(&ring[s * kTile], src + int64_t(t) * kTile, kBytes, &full[s]);
    }
  } else if (tid >= 32) {
    const int c = tid - 32;
    float sum = 0.0f;
    for (int t = 0; t < tiles; ++t) {
      const int s = t % kSlots;
      const uint32_t round = uint32_t(t / kSlots);
      if (kBug != Bug::no_wait) ptx::mbarrier_wait_parity(&full[s], kBug == Bug::wrong_parity ? (round & 1) ^ 1 : round & 1);
      for (int i = 0; i < 4; ++i) sum += ring[s * kTile + 4 * c + i];
      ptx::mbarrier_arrive(&empty[s]);
    }
    out[c] = sum;
  }
}

struct Run {
  float* src;
  float* out;
  int tiles;
};

Run make_run(int tiles) {
  Run r{device_array<float>(size_t(tiles) * kTile), device_array<float>(kConsumers), tiles};
  for (int i = 0; i < tiles * kTile; ++i) r.src[i] = static_cast<float>(i % 97);
  return r;
}

float want(const Run& r, int c) {
  float sum = 0.0f;
  for (int t = 0; t < r.tiles; ++t)
    for (int i = 0; i < 4; ++i) sum += r.src[t * kTile + 4 * c + i];
  return sum;
}

}  // namespace

TEST_CASE("emulated PTX: a bulk-copy pipeline over mbarriers sums every tile, through many rounds of the ring") {
  for (int tiles : {1, 2, 7}) {
    CAPTURE(tiles);
    Run r = make_run(tiles);
    launch_kernel(pipeline_kernel<Bug::none>, 1, kThreads, 0, nullptr, r.src, tiles, r.out);
    KEEL_CHECK_LAUNCH();
    for (int c = 0; c < kConsumers; ++c) CHECK(r.out[c] == want(r, c));
    cudaFree(r.src), cudaFree(r.out);
  }
}

TEST_CASE("emulated PTX: a slot read without waiting on its barrier reads NaN, and a wrong parity waits too little or forever") {
  if (kThreadSanitizer) return;
  Run r = make_run(2);  // each slot used once: nothing else can go wrong
  std::string e = error_of([&] { launch_kernel(pipeline_kernel<Bug::no_wait>, 1, kThreads, 0, nullptr, r.src, r.tiles, r.out); });
  CHECK(e == "(no error)");
  for (int c = 0; c < kConsumers; ++c) CHECK(std::isnan(r.out[c]));  // the copies had not landed
  r = make_run(4);
  e = error_of([&] { launch_kernel(pipeline_kernel<Bug::wrong_parity>, 1, kThreads, 0, nullptr, r.src, r.tiles, r.out); });
  int nan = 0;
  for (int c = 0; c < kConsumers; ++c) nan += std::isnan(r.out[c]);
  CHECK((nan > 0 || e.find("deadlock on an mbarrier") != std::string::npos));
  cudaFree(r.src), cudaFree(r.out);
}

TEST_CASE("emulated PTX: bytes announced that never land leave the phase waiting: a deadlock naming the wait") {
  Run r = make_run(2);
  const std::string e =
      error_of([&] { launch_kernel(pipeline_kernel<Bug::long_expect>, 1, kThreads, 0, nullptr, r.src, r.tiles, r.out); });
  CHECK(e.find("deadlock on an mbarrier") != std::string::npos);
  CHECK(e.find("completes its phase of parity 0") != std::string::npos);
  CHECK(e.find("test_mbarrier.cu") != std::string::npos);
  cudaFree(r.src), cudaFree(r.out);
}

TEST_CASE("emulated PTX: bytes landing past what expect_tx announced, and a barrier never initialized, are errors") {
  Run r = make_run(2);
  std::string e =
      error_of([&] { launch_kernel(pipeline_kernel<Bug::short_expect>, 1, kThreads, 0, nullptr, r.src, r.tiles, r.out); });
  CHECK(e.find("landed 16 bytes more") != std::string::npos);
  e = error_of([&] { launch_kernel(pipeline_kernel<Bug::no_init>, 1, kThreads, 0, nullptr, r.src, r.tiles, r.out); });
  CHECK(e.find("mbarrier.init has not initialized") != std::string::npos);
  cudaFree(r.src), cudaFree(r.out);
}
