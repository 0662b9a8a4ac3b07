// The blocks of a grid on the emulated GPU: the order they start in (index, reverse, shuffled),
// several resident at once taking turns at barriers, each with its own static shared memory, a
// block that waits on another's flag either running correctly or reported as a deadlock naming
// it and its kernel; and static shared memory counted with the dynamic bytes against the
// kernel's limit, as a GPU counts it.
#include <doctest/doctest.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "core/cuda/check.h"
#include "core/cuda/launch.cuh"
#include "core/cuda/ptx.cuh"
#include "core/cuda/runtime.h"
#include "core/error.h"
#include "shared_kernel.cuh"

using keel::cuda::BlockSchedule;
using keel::cuda::launch_kernel;
namespace ptx = keel::cuda::ptx;

namespace {

using keel::emu_test::shared_kernel;
using Order = BlockSchedule::Order;

template <typename T>
T* device_zeros(size_t n) {
  void* p = nullptr;
  KEEL_CHECK_CUDA(cudaMalloc(&p, n * sizeof(T)));
  KEEL_CHECK_CUDA(cudaMemset(p, 0, n * sizeof(T)));
  return static_cast<T*>(p);
}

// Sets the emulator's block schedule for one scope.
struct ScheduleGuard {
  BlockSchedule saved = keel::cuda::emulated_block_schedule();
  explicit ScheduleGuard(BlockSchedule s) { keel::cuda::set_emulated_block_schedule(s); }
  ~ScheduleGuard() { keel::cuda::set_emulated_block_schedule(saved); }
};

std::string error_of(void (*f)(), const std::function<void()>& g = {}) {
  try {
    if (f) f();
    if (g) g();
    KEEL_CHECK_LAUNCH();
  } catch (const keel::Error& e) {
    return e.what();
  }
  return "(no error)";
}
bool has(const std::string& s, const char* what) { return s.find(what) != std::string::npos; }

// log: each block's thread 0 appends 3 b + phase, for phases 0, 1, 2 between barriers.
__global__ void phases_kernel(int* count, int* log) {
  const int b = static_cast<int>(blockIdx.x + gridDim.x * blockIdx.y);
  for (int phase = 0; phase < 3; ++phase) {
    if (threadIdx.x == 0) log[atomicAdd(count, 1)] = 3 * b + phase;
    __syncthreads();
  }
}

// Each block keeps its index in static shared memory across a barrier (where resident blocks take
// turns) and writes what it reads back.
__global__ void own_shared_kernel(int* out) {
  KEEL_SHARED(int, mine);
  if (threadIdx.x == 0) mine = static_cast<int>(blockIdx.x);
  __syncthreads();
  if (threadIdx.x == 0) out[blockIdx.x] = mine;
}

// Block b appends b + 1 to *sum (as a decimal digit) when *flag reaches its turn, then passes
// the turn on. kTicket: turns in the order blocks start (an atomic ticket); else in reverse
// index order, so block 0 waits for every later block.
template <bool kTicket>
__global__ void handover_kernel(int* ticket, int* flag, int* sum) {
  KEEL_SHARED(int, turn);
  if (threadIdx.x == 0) turn = kTicket ? atomicAdd(ticket, 1) : static_cast<int>(gridDim.x - 1 - blockIdx.x);
  __syncthreads();  // resident blocks take turns here: several hold a ticket before any waits
  if (threadIdx.x == 0) {
    ptx::spin_wait_equal(flag, turn);
    *sum = *sum * 10 + turn + 1;
    ptx::red_release_gpu_add(flag, 1);
  }
}

// The same, never launched before the test that checks its first launch.
__global__ void shared_first_kernel(float* out, int n) {
  KEEL_SHARED(float[16], stats);
  KEEL_DYNAMIC_SHARED(float, buf, 16);
  if (threadIdx.x == 0) out[0] = stats[0] + buf[n - 1];
}

std::vector<int> start_order(BlockSchedule s, dim3 grid) {
  const ScheduleGuard guard(s);
  const int n = static_cast<int>(grid.x * grid.y);
  int* count = device_zeros<int>(1);
  int* log = device_zeros<int>(3 * n);
  launch_kernel(phases_kernel, grid, 64, 0, nullptr, count, log);
  KEEL_CHECK_LAUNCH();
  std::vector<int> out(log, log + 3 * n);
  cudaFree(count), cudaFree(log);
  return out;
}

}  // namespace

TEST_CASE("emulated blocks: start in index, reverse or shuffled order, one at a time by default") {
  const dim3 grid(4, 3);
  std::vector<int> index, reverse;
  for (int b = 0; b < 12; ++b)
    for (int phase = 0; phase < 3; ++phase) index.push_back(3 * b + phase), reverse.push_back(3 * (11 - b) + phase);
  CHECK(start_order({}, grid) == index);
  CHECK(start_order({Order::reverse, 0, 1}, grid) == reverse);
  const std::vector<int> a = start_order({Order::shuffle, 7, 1}, grid), b = start_order({Order::shuffle, 7, 1}, grid);
  CHECK(a != index);
  CHECK(a != b);  // a permutation per launch
  for (const std::vector<int>* s : {&a, &b}) {
    std::vector<int> sorted = *s;
    std::sort(sorted.begin(), sorted.end());
    CHECK(sorted == index);  // every block once, its phases in order
    for (size_t i = 0; i < s->size(); i += 3) CHECK((*s)[i + 2] == (*s)[i] + 2);
  }
}

TEST_CASE("emulated blocks: resident blocks take turns at every __syncthreads, each with its own shared memory") {
  // Two resident: block 0's phase 0, block 1's phase 0, block 0's phase 1, ...; then blocks 2, 3.
  CHECK(start_order({Order::index, 0, 2}, dim3(4)) == std::vector<int>{0, 3, 1, 4, 2, 5, 6, 9, 7, 10, 8, 11});
  for (int resident : {1, 3, 8}) {
    CAPTURE(resident);
    const ScheduleGuard guard({Order::shuffle, 3, resident});
    int* out = device_zeros<int>(8);
    launch_kernel(own_shared_kernel, 8, 64, 0, nullptr, out);
    KEEL_CHECK_LAUNCH();
    for (int b = 0; b < 8; ++b) CHECK(out[b] == b);
    cudaFree(out);
  }
}

TEST_CASE("emulated blocks: a block that waits for one that has not started is a deadlock, named, not a hang") {
  int* ticket = device_zeros<int>(1);
  int* flag = device_zeros<int>(1);
  int* sum = device_zeros<int>(1);
  auto run = [&](bool with_ticket) {
    KEEL_CHECK_CUDA(cudaMemset(ticket, 0, sizeof(int)));
    KEEL_CHECK_CUDA(cudaMemset(flag, 0, sizeof(int)));
    KEEL_CHECK_CUDA(cudaMemset(sum, 0, sizeof(int)));
    return error_of(nullptr, [&] {
      launch_kernel(with_ticket ? handover_kernel<true> : handover_kernel<false>, 4, 32, 0, nullptr, ticket, flag, sum);
    });
  };
  {  // Index order, one block resident: block 0 waits for block 3, which cannot start.
    const ScheduleGuard guard({});
    const std::string e = run(false);
    CHECK(has(e, "deadlock between blocks"));
    CHECK(has(e, "block (0,0,0) (thread (0,0,0)) waits at"));
    CHECK(has(e, "handover_kernel"));
    CHECK(has(e, "test_blocks.cu"));
    CHECK(has(e, "until the int at"));
    CHECK(has(e, "3 blocks have not started and at most 1 may be resident"));
  }
  for (const BlockSchedule& s : {BlockSchedule{Order::reverse, 0, 1}, BlockSchedule{Order::index, 0, 4}}) {
    // Where the later blocks start first, or all are resident, the same kernel runs.
    const ScheduleGuard guard(s);
    CHECK(run(false) == "(no error)");
    CHECK(*sum == 1234);
  }
  {  // Three of four resident: block 0 and 1 and 2 wait for block 3, and it cannot start.
    const ScheduleGuard guard({Order::index, 0, 3});
    const std::string e = run(false);
    CHECK(has(e, "block (2,0,0) (thread (0,0,0)) waits"));
    CHECK(has(e, "1 blocks have not started and at most 3 may be resident"));
  }
  // Turns taken from a ticket: correct under every schedule, in the order the blocks start.
  for (Order order : {Order::index, Order::reverse, Order::shuffle})
    for (int resident : {1, 2, 4}) {
      CAPTURE(static_cast<int>(order));
      CAPTURE(resident);
      const ScheduleGuard guard({order, 11, resident});
      CHECK(run(true) == "(no error)");
      CHECK(*sum == 1234);
      CHECK(*flag == 4);
    }
  cudaFree(ticket), cudaFree(flag), cudaFree(sum);
}

TEST_CASE("emulated blocks: static shared memory counts with the dynamic bytes against the kernel's limit") {
  const void* kernel = reinterpret_cast<const void*>(shared_kernel);
  float* out = device_zeros<float>(1);
  constexpr int kStatic = 16 * sizeof(float), kLimit = 48 << 10;
  // The first launch of a kernel over the limit stops where its block declares the static bytes.
  std::string e = error_of(nullptr, [&] {
    launch_kernel(shared_first_kernel, 1, 32, kLimit, nullptr, out, kLimit / 4);
  });
  CHECK(has(e, "shared memory above the kernel's limit: `stats` (64 bytes"));
  CHECK(has(e, "shared_first_kernel"));
  CHECK(has(e, "that is 49216, above the 49152"));
  // A launch within the limit runs, and the runtime then knows the static bytes.
  launch_kernel(shared_kernel, 2, 32, kLimit - kStatic, nullptr, out, (kLimit - kStatic) / 4);
  KEEL_CHECK_LAUNCH();
  CHECK(out[0] == 3.0f);
  cudaFuncAttributes a{};
  KEEL_CHECK_CUDA(cudaFuncGetAttributes(&a, kernel));
  CHECK(a.sharedSizeBytes == size_t(kStatic));
  CHECK(a.maxDynamicSharedSizeBytes == kLimit - kStatic);
  CHECK(keel::cuda::static_shared_of(kernel) == size_t(kStatic));
  // Now a launch over it is refused before it runs, and keel's own check names the kernel and bytes.
  (void)cudaGetLastError();
  launch_kernel(shared_kernel, 1, 32, kLimit, nullptr, out, 0);
  const cudaError_t err = cudaGetLastError();
  CHECK(err == cudaErrorInvalidValue);
  CHECK(has(cudaGetErrorString(err), "beside its 64 bytes of static shared memory"));
  e = error_of([] {
    keel::cuda::check_shared_memory(reinterpret_cast<const void*>(shared_kernel), kLimit, "test", "shared_kernel");
  });
  CHECK(has(e, "shared_kernel needs 64 bytes of static and 49152 bytes of dynamic shared memory"));
  CHECK(has(e, "its limit is 49152"));
  keel::cuda::check_shared_memory(kernel, kLimit - kStatic, "test", "shared_kernel");
  // The opt-in limit holds static and dynamic bytes together.
  int optin = 0;
  KEEL_CHECK_CUDA(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
  CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, optin - kStatic + 1) ==
        cudaErrorInvalidValue);
  (void)cudaGetLastError();
  KEEL_CHECK_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, optin - kStatic));
  launch_kernel(shared_kernel, 1, 32, optin - kStatic, nullptr, out, (optin - kStatic) / 4);
  KEEL_CHECK_LAUNCH();
  CHECK(out[0] == 3.0f);
  keel::cuda::check_shared_memory(kernel, optin - kStatic, "test", "shared_kernel");
  cudaFree(out);
}
