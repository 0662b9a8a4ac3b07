// Planted bugs of the classes a GPU rejects and the emulated GPU now catches by itself, in every
// emu preset, with their fixed twins (tests/emu/CMakeLists.txt runs them; planted_bugs.cu's main
// dispatches here):
//
//   shared-over         16 floats of static shared memory beside 48 KB of dynamic: over the
//                       48 KB a kernel has without cudaFuncSetAttribute -> the emulator stops the
//                       block at the declaration, naming the kernel, the variable and the bytes
//   shared-over-fixed   the dynamic bytes budgeted beside the static ones
//   wait-later          block b waits on a flag that block b + 1 sets: with blocks started in index
//                       order, one resident, block 0 waits for a block that cannot start
//                       -> a deadlock naming block (0,0,0) and the kernel
//   wait-earlier        block b waits on block b - 1 (a GPU starting blocks in index order never
//                       hangs on it; one starting them in reverse does) -> reported under the
//                       reverse order, naming the last block
//   wait-fixed          the turns taken from an atomic ticket: correct under every schedule
//   misaligned          a 16-byte load (ptx::load_16) 4 bytes past an aligned address
//                       -> cudaErrorMisalignedAddress naming the load and the kernel
//   misaligned-fixed    the load 16 bytes on
//   misaligned-raw      the same load through a raw uint4 pointer, which the emulator does not
//                       see -> UndefinedBehaviorSanitizer reports it (preset emu-asan)
//   device-rounding     the device branch of a host-and-device helper fuses a multiply-add the
//                       host rounds twice -> device and host results differ in bits
//   device-rounding-fixed  the device branch rounds twice too: the same bits
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include "core/cuda/check.h"
#include "core/cuda/launch.cuh"
#include "core/cuda/ptx.cuh"
#include "core/cuda/runtime.h"
#include "planted_rounding.h"
#include "shared_kernel.cuh"

namespace keel::planted {

namespace {

using cuda::BlockSchedule;
using cuda::launch_kernel;
namespace ptx = cuda::ptx;

// Block b records its index at *out's turn, then passes the turn on through *flag.
enum class Turn { later, earlier, ticket };
template <Turn kTurn>
__global__ void chain_kernel(int* ticket, int* flag, int* out) {
  if (threadIdx.x != 0) return;
  const int b = static_cast<int>(blockIdx.x), last = static_cast<int>(gridDim.x) - 1;
  const int turn = kTurn == Turn::later ? last - b : kTurn == Turn::earlier ? b : atomicAdd(ticket, 1);
  ptx::spin_wait_equal(flag, turn);
  out[turn] = b;
  ptx::red_release_gpu_add(flag, 1);
}

// out[t] = the sum of the 4 floats at in + offset + 4t, read as one 16-byte load.
template <bool kRaw>
__global__ void misaligned_load_kernel(const float* in, int offset, float* out) {
  const int t = threadIdx.x;
  const float4 v = kRaw ? *reinterpret_cast<const float4*>(in + offset + 4 * t)
                        : ptx::load_16<float4>(in + offset + 4 * t);
  out[t] = v.x + v.y + v.z + v.w;
}

template <bool kFused>
__global__ void mul_add_kernel(const float* a, const float* b, const float* c, float* out, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) out[i] = mul_add<kFused>(a[i], b[i], c[i]);
}

template <typename T>
T* device_array(size_t n, int byte = 0) {
  void* p = nullptr;
  KEEL_CHECK_CUDA(cudaMalloc(&p, n * sizeof(T)));
  KEEL_CHECK_CUDA(cudaMemset(p, byte, n * sizeof(T)));
  return static_cast<T*>(p);
}

void shared_over(bool fixed) {
  float* out = device_array<float>(1);
  const int floats = fixed ? (48 << 10) / 4 - 16 : (48 << 10) / 4;
  launch_kernel(emu_test::shared_kernel, 1, 64, floats * sizeof(float), nullptr, out, floats);
  KEEL_CHECK_LAUNCH();
  KEEL_CHECK_CUDA(cudaFree(out));
}

// The chain over 4 blocks; every schedule of `schedules` must give the order the turns promise.
void wait(Turn turn, std::initializer_list<BlockSchedule> schedules) {
  int* ticket = device_array<int>(1);
  int* flag = device_array<int>(1);
  int* out = device_array<int>(4);
  const BlockSchedule saved = cuda::emulated_block_schedule();
  for (const BlockSchedule& s : schedules) {
    cuda::set_emulated_block_schedule(s);
    KEEL_CHECK_CUDA(cudaMemset(ticket, 0, sizeof(int)));
    KEEL_CHECK_CUDA(cudaMemset(flag, 0, sizeof(int)));
    auto kernel = turn == Turn::later     ? chain_kernel<Turn::later>
                  : turn == Turn::earlier ? chain_kernel<Turn::earlier>
                                          : chain_kernel<Turn::ticket>;
    try {
      launch_kernel(kernel, 4, 32, 0, nullptr, ticket, flag, out);
      KEEL_CHECK_LAUNCH();
    } catch (...) {
      cuda::set_emulated_block_schedule(saved);
      throw;
    }
    if (*flag != 4) throw CudaError("planted_bugs", "the chain stopped at turn " + std::to_string(*flag));
  }
  cuda::set_emulated_block_schedule(saved);
  KEEL_CHECK_CUDA(cudaFree(ticket));
  KEEL_CHECK_CUDA(cudaFree(flag));
  KEEL_CHECK_CUDA(cudaFree(out));
}

void misaligned(bool fixed, bool raw) {
  float* in = device_array<float>(4 * 33);
  float* out = device_array<float>(32);
  launch_kernel(raw ? misaligned_load_kernel<true> : misaligned_load_kernel<false>, 1, 32, 0, nullptr,
                static_cast<const float*>(in), fixed ? 4 : 1, out);
  KEEL_CHECK_LAUNCH();
  KEEL_CHECK_CUDA(cudaFree(in));
  KEEL_CHECK_CUDA(cudaFree(out));
}

// The device's mul_add against the host's, bit for bit, on values where one rounding and two differ.
bool device_rounding(bool fixed) {
  constexpr int n = 256;
  float* a = device_array<float>(n);
  float* b = device_array<float>(n);
  float* c = device_array<float>(n);
  float* out = device_array<float>(n);
  for (int i = 0; i < n; ++i) {
    a[i] = 1.0f + static_cast<float>(i + 1) * 0x1p-12f;
    b[i] = 1.0f - static_cast<float>(3 * i + 1) * 0x1p-13f;
    c[i] = -1.0f;
  }
  launch_kernel(fixed ? mul_add_kernel<false> : mul_add_kernel<true>, 1, n, 0, nullptr, static_cast<const float*>(a),
                static_cast<const float*>(b), static_cast<const float*>(c), out, n);
  KEEL_CHECK_LAUNCH();
  int differ = 0, first = -1;
  for (int i = 0; i < n; ++i)
    if (const float host = host_mul_add(a[i], b[i], c[i]); std::memcmp(&out[i], &host, sizeof(float)) != 0) {
      if (first < 0) first = i;
      ++differ;
    }
  if (differ)
    std::printf("device code rounds differently from the host: %d of %d elements, the first %d: device %a, host %a\n",
                differ, n, first, out[first], host_mul_add(a[first], b[first], c[first]));
  for (float* p : {a, b, c, out}) KEEL_CHECK_CUDA(cudaFree(p));
  return differ == 0;
}

}  // namespace

// -1: not one of these modes; else the exit status (errors propagate to main, which reports them).
int run_planted_class(const std::string& mode) {
  using O = BlockSchedule::Order;
  const std::initializer_list<BlockSchedule> every = {{O::index, 0, 1}, {O::reverse, 0, 1}, {O::shuffle, 1, 1},
                                                      {O::index, 0, 4}, {O::shuffle, 2, 3}};
  if (mode == "shared-over" || mode == "shared-over-fixed") shared_over(mode == "shared-over-fixed");
  else if (mode == "wait-later") wait(Turn::later, {{O::index, 0, 1}});
  else if (mode == "wait-earlier") wait(Turn::earlier, {{O::reverse, 0, 1}});
  else if (mode == "wait-fixed") wait(Turn::ticket, every);
  else if (mode == "misaligned" || mode == "misaligned-fixed") misaligned(mode == "misaligned-fixed", false);
  else if (mode == "misaligned-raw") misaligned(false, true);
  else if (mode == "device-rounding" || mode == "device-rounding-fixed") {
    if (!device_rounding(mode == "device-rounding-fixed")) return 1;
  } else {
    return -1;
  }
  return 0;
}

}  // namespace keel::planted
