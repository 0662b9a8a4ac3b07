// CUDA's device functions on the emulated GPU: barriers, warp shuffles and votes, atomics and
// the math intrinsics keel's kernels use. Barriers and warp operations go to the block
// scheduler (block.h), which enforces CUDA's rules; the rest is plain host arithmetic.
//
// Each barrier and warp function takes the caller's source location as a defaulted last
// argument, so that a broken rule is reported at the line of the kernel that broke it.
#pragma once

#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <source_location>
#include <type_traits>

#include "core/cuda/emu/block.h"

inline constexpr int warpSize = 32;

// ---- barriers ----
inline void __syncthreads(std::source_location where = std::source_location::current()) {
  keel::emu::sync_block(where);
}
inline void __syncwarp(unsigned mask = 0xffffffffu, std::source_location where = std::source_location::current()) {
  keel::emu::warp_collective(keel::emu::Collective::syncwarp, mask, nullptr, nullptr, nullptr, nullptr, where);
}
// Memory fences order a thread's own accesses; with one fiber running at a time there is
// nothing to reorder.
inline void __threadfence() {}
inline void __threadfence_block() {}

// ---- warp shuffles ----
namespace keel::emu {
struct ShuffleIn {
  uint64_t bits;  // the caller's value
  int arg;        // source lane, delta or lane mask
  int width;
};
// Lane l's source lane for one shuffle kind, or -1 when CUDA returns l's own value.
int shuffle_source(Collective kind, int lane, int arg, int width);
void shuffle_combine(const void* kind, const void* const in[32], void* const out[32], unsigned mask);

template <typename T>
T shuffle(Collective kind, unsigned mask, T var, int arg, int width, const std::source_location& where) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8, "shuffles move values of at most 8 bytes");
  ShuffleIn in{0, arg, width};
  std::memcpy(&in.bits, &var, sizeof(T));
  uint64_t out = 0;
  static const Collective kinds[] = {Collective::syncwarp, Collective::shfl, Collective::shfl_up,
                                     Collective::shfl_down, Collective::shfl_xor};
  warp_collective(kind, mask, &in, &out, shuffle_combine, &kinds[static_cast<int>(kind)], where);
  T r;
  std::memcpy(&r, &out, sizeof(T));
  return r;
}
}  // namespace keel::emu

template <typename T>
T __shfl_sync(unsigned mask, T var, int src_lane, int width = warpSize,
              std::source_location where = std::source_location::current()) {
  return keel::emu::shuffle(keel::emu::Collective::shfl, mask, var, src_lane, width, where);
}
template <typename T>
T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = warpSize,
                 std::source_location where = std::source_location::current()) {
  return keel::emu::shuffle(keel::emu::Collective::shfl_up, mask, var, static_cast<int>(delta), width, where);
}
template <typename T>
T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = warpSize,
                   std::source_location where = std::source_location::current()) {
  return keel::emu::shuffle(keel::emu::Collective::shfl_down, mask, var, static_cast<int>(delta), width, where);
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = warpSize,
                  std::source_location where = std::source_location::current()) {
  return keel::emu::shuffle(keel::emu::Collective::shfl_xor, mask, var, lane_mask, width, where);
}

// ---- votes ----
namespace keel::emu {
void ballot_combine(const void*, const void* const in[32], void* const out[32], unsigned mask);
inline unsigned ballot(unsigned mask, int pred, const std::source_location& where) {
  const int in = pred != 0;
  unsigned out = 0;
  warp_collective(Collective::vote, mask, &in, &out, ballot_combine, nullptr, where);
  return out;
}
}  // namespace keel::emu
inline unsigned __ballot_sync(unsigned mask, int pred, std::source_location where = std::source_location::current()) {
  return keel::emu::ballot(mask, pred, where);
}
inline int __any_sync(unsigned mask, int pred, std::source_location where = std::source_location::current()) {
  return keel::emu::ballot(mask, pred, where) != 0;
}
inline int __all_sync(unsigned mask, int pred, std::source_location where = std::source_location::current()) {
  return keel::emu::ballot(mask, pred, where) == mask;
}
inline unsigned __activemask() { return keel::emu::active_lanes(); }

// ---- atomics: relaxed read-modify-writes, as CUDA's are ----
template <typename T> T atomicAdd(T* p, T v) {
  return std::atomic_ref<T>(*p).fetch_add(v, std::memory_order_relaxed);
}
template <typename T> T atomicSub(T* p, T v) {
  return std::atomic_ref<T>(*p).fetch_sub(v, std::memory_order_relaxed);
}
template <typename T> T atomicExch(T* p, T v) { return std::atomic_ref<T>(*p).exchange(v, std::memory_order_relaxed); }
template <typename T> T atomicCAS(T* p, T expected, T desired) {
  std::atomic_ref<T>(*p).compare_exchange_strong(expected, desired, std::memory_order_relaxed);
  return expected;  // the old value either way
}
template <typename T> T atomicMax(T* p, T v) {
  static_assert(std::is_integral_v<T>, "CUDA's atomicMax is for integers");
  std::atomic_ref<T> a(*p);
  T old = a.load(std::memory_order_relaxed);
  while (old < v && !a.compare_exchange_weak(old, v, std::memory_order_relaxed)) {
  }
  return old;
}
template <typename T> T atomicMin(T* p, T v) {
  static_assert(std::is_integral_v<T>, "CUDA's atomicMin is for integers");
  std::atomic_ref<T> a(*p);
  T old = a.load(std::memory_order_relaxed);
  while (old > v && !a.compare_exchange_weak(old, v, std::memory_order_relaxed)) {
  }
  return old;
}

// ---- bit casts and integer intrinsics ----
inline unsigned __float_as_uint(float x) { return std::bit_cast<unsigned>(x); }
inline float __uint_as_float(unsigned x) { return std::bit_cast<float>(x); }
inline int __float_as_int(float x) { return std::bit_cast<int>(x); }
inline float __int_as_float(int x) { return std::bit_cast<float>(x); }
inline long long __double_as_longlong(double x) { return std::bit_cast<long long>(x); }
inline double __longlong_as_double(long long x) { return std::bit_cast<double>(x); }
inline int __popc(unsigned x) { return std::popcount(x); }
inline int __popcll(unsigned long long x) { return std::popcount(x); }
inline int __clz(int x) { return std::countl_zero(static_cast<unsigned>(x)); }
inline int __ffs(int x) { return x == 0 ? 0 : std::countr_zero(static_cast<unsigned>(x)) + 1; }
inline unsigned __umulhi(unsigned a, unsigned b) { return static_cast<unsigned>((uint64_t(a) * b) >> 32); }
inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
  return static_cast<unsigned long long>((static_cast<unsigned __int128>(a) * b) >> 64);
}
template <typename T> T __ldg(const T* p) { return *p; }
template <typename T> T __ldcg(const T* p) { return *p; }

// CUDA's integer min and max overloads (device code calls them unqualified).
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline long max(long a, long b) { return a > b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
inline int min(int a, int b) { return a < b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline long min(long a, long b) { return a < b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline float max(float a, float b) { return fmaxf(a, b); }
inline float min(float a, float b) { return fminf(a, b); }
inline double max(double a, double b) { return fmax(a, b); }
inline double min(double a, double b) { return fmin(a, b); }

// ---- fast math: the hardware computes exp as ex2.approx(x * log2 e), with the relative error
// that grows with |x|; exp2f of the same product reproduces that construction (not its exact
// rounding, which only a GPU shows). ----
inline float __expf(float x) { return exp2f(x * 1.44269504088896341f); }
inline float __exp10f(float x) { return exp2f(x * 3.32192809488736235f); }
inline float __logf(float x) { return log2f(x) * 0.693147180559945309f; }
inline float __log2f(float x) { return log2f(x); }
inline float __sinf(float x) { return sinf(x); }
inline float __cosf(float x) { return cosf(x); }
inline float __tanhf(float x) { return tanhf(x); }
inline float __powf(float x, float y) { return powf(x, y); }
inline float __fdividef(float x, float y) { return x / y; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return sqrtf(x); }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : (x == x ? x : 0.0f)); }

// ---- IEEE operations with round-to-nearest-even, never fused: what device code spells out to
// pin its rounding (optim/adamw_math.h). The host compiler contracts a product and a sum into an
// FMA like nvcc (x86-64-v3 has FMA); the value passes through an empty asm, opaque to it, so each
// operation rounds on its own. ----
namespace keel::emu {
template <typename T>
inline T rounded(T x) {
#if defined(__x86_64__) || defined(__i386__)
  __asm__("" : "+x"(x));
#elif defined(__aarch64__)
  __asm__("" : "+w"(x));
#else
  volatile T v = x;
  x = v;
#endif
  return x;
}
}  // namespace keel::emu
inline float __fadd_rn(float a, float b) { return keel::emu::rounded(a + b); }
inline float __fsub_rn(float a, float b) { return keel::emu::rounded(a - b); }
inline float __fmul_rn(float a, float b) { return keel::emu::rounded(a * b); }
inline float __fdiv_rn(float a, float b) { return keel::emu::rounded(a / b); }
inline float __fmaf_rn(float a, float b, float c) { return keel::emu::rounded(fmaf(a, b, c)); }
inline double __dadd_rn(double a, double b) { return keel::emu::rounded(a + b); }
inline double __dsub_rn(double a, double b) { return keel::emu::rounded(a - b); }
inline double __dmul_rn(double a, double b) { return keel::emu::rounded(a * b); }
inline double __ddiv_rn(double a, double b) { return keel::emu::rounded(a / b); }
inline double __fma_rn(double a, double b, double c) { return keel::emu::rounded(fma(a, b, c)); }
