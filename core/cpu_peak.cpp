#include "core/cpu_peak.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#elif defined(__ARM_NEON)
#include <arm_neon.h>
#endif

namespace keel::cpu_peak {

namespace {

// One lane group of fused multiply-adds: the widest the build allows.
#if defined(__AVX512F__)
using Vec = __m512;
constexpr int kWidth = 16;
inline Vec vset(float x) { return _mm512_set1_ps(x); }
inline Vec vfma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
inline float vfirst(Vec a) { return _mm512_cvtss_f32(a); }
constexpr const char* kKernel = "AVX-512 FMA";
#elif defined(__AVX2__) && defined(__FMA__)
using Vec = __m256;
constexpr int kWidth = 8;
inline Vec vset(float x) { return _mm256_set1_ps(x); }
inline Vec vfma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
inline float vfirst(Vec a) { return _mm256_cvtss_f32(a); }
constexpr const char* kKernel = "AVX2 FMA";
#elif defined(__ARM_NEON)
using Vec = float32x4_t;
constexpr int kWidth = 4;
inline Vec vset(float x) { return vdupq_n_f32(x); }
inline Vec vfma(Vec a, Vec b, Vec c) { return vfmaq_f32(c, a, b); }
inline float vfirst(Vec a) { return vgetq_lane_f32(a, 0); }
constexpr const char* kKernel = "NEON FMA";
#else
using Vec = float;
constexpr int kWidth = 1;
inline Vec vset(float x) { return x; }
inline Vec vfma(Vec a, Vec b, Vec c) { return std::fma(a, b, c); }
inline float vfirst(Vec a) { return a; }
constexpr const char* kKernel = "scalar fma";
#endif

// Twelve independent chains: more than an FMA's latency times the units that issue them
// (4 cycles x 2 units on current x86 cores), so the units never wait.
constexpr int kChains = 12;

__attribute__((noinline)) float fma_chains(int64_t iterations) {
  Vec acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = vset(1.0f + 0.001f * float(i));
  const Vec b = vset(0.9999999f), c = vset(1e-7f);
  for (int64_t it = 0; it < iterations; ++it)
    for (int i = 0; i < kChains; ++i) acc[i] = vfma(acc[i], b, c);
  float s = 0;
  for (int i = 0; i < kChains; ++i) s += vfirst(acc[i]);
  return s;
}

// Seconds for f(t) on threads t = 0 .. threads-1 started together (the caller is thread 0).
double run_threads(int threads, const std::function<void(int)>& f) {
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  auto body = [&](int t) {
    ready.fetch_add(1);
    while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
    f(t);
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(body, t);
  while (ready.load() < threads - 1) std::this_thread::yield();
  const auto t0 = std::chrono::steady_clock::now();
  go.store(true, std::memory_order_release);
  f(0);
  for (std::thread& th : pool) th.join();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The best of `reps` runs of f on `threads` threads: what the machine does when nothing interferes.
double best_seconds(int threads, int reps, const std::function<void(int)>& f) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) best = std::min(best, run_threads(threads, f));
  return best;
}

// Sums x[0, n) with independent lanes (no reassociation needed, so it vectorizes).
__attribute__((noinline)) float stream_sum(const float* x, size_t n) {
  constexpr int kLanes = 64;
  float acc[kLanes] = {};
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) acc[j] += x[i + j];
  for (; i < n; ++i) acc[0] += x[i];
  float s = 0;
  for (float a : acc) s += a;
  return s;
}

}  // namespace

std::string fma_kernel() { return std::string(kKernel) + ", " + std::to_string(kWidth) + " floats"; }

double fma_flops(int threads) {
  threads = std::max(threads, 1);
  constexpr int64_t kIterations = 2'000'000;  // about 20 ms a thread at 3 GHz
  std::vector<float> sink(size_t(threads), 0.0f);
  (void)fma_chains(kIterations / 20);  // the clock up to speed
  const double s = best_seconds(threads, 3, [&](int t) { sink[size_t(t)] = fma_chains(kIterations); });
  return double(threads) * double(kIterations) * kChains * kWidth * 2 / s;
}

Bandwidth memory_bandwidth(int threads, size_t bytes) {
  threads = std::max(threads, 1);
  const size_t n = bytes / sizeof(float) / 2;  // two buffers of half the bytes each
  std::unique_ptr<float[]> a(new float[n]), b(new float[n]);
  std::fill_n(a.get(), n, 1.0f), std::fill_n(b.get(), n, 2.0f);  // touched: no page faults in the timing
  auto part = [&](int t, size_t& begin, size_t& len) {
    begin = n * size_t(t) / size_t(threads);
    len = n * size_t(t + 1) / size_t(threads) - begin;
  };
  std::vector<float> sink(size_t(threads), 0.0f);
  Bandwidth bw;
  const double bytes_each = double(n) * sizeof(float);
  bw.read = bytes_each / best_seconds(threads, 3, [&](int t) {
              size_t s, l;
              part(t, s, l);
              sink[size_t(t)] = stream_sum(a.get() + s, l);
            });
  bw.write = bytes_each / best_seconds(threads, 3, [&](int t) {
               size_t s, l;
               part(t, s, l);
               std::fill_n(b.get() + s, l, float(t));
             });
  bw.copy = 2 * bytes_each / best_seconds(threads, 3, [&](int t) {
              size_t s, l;
              part(t, s, l);
              std::memcpy(b.get() + s, a.get() + s, l * sizeof(float));
            });
  return bw;
}

}  // namespace keel::cpu_peak
