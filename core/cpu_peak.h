// What this CPU can do at most, measured: the roofline that `gpt2 train --profile` and
// apps/bench/bench_cpu.cpp hold keel's CPU kernels against.
//
// - fma_flops: fused multiply-adds from registers only, at the vector width keel's kernels are
//   compiled for (KEEL_CPU_ARCH: x86-64-v3 is AVX2 + FMA, 8 floats a vector), each thread a
//   dozen independent chains, all threads at once. It is the ceiling of a matrix product here; a
//   data sheet's number can be higher (a wider ISA than the build's, a turbo clock that one core
//   reaches alone) or lower (a laptop's clock under sustained load).
// - memory_bandwidth: streaming a buffer far larger than the last-level cache: reading it (a
//   sum), writing it (a fill) and copying it (bytes read plus bytes written), split over the
//   threads. The ceiling of an elementwise or row-wise kernel such as the cross-entropy.
// Each figure is the best of a few runs of a few tens of milliseconds, on plain std::threads
// started together, so the pool's scheduling (core/parallel.h) is not part of the machine's number.
#pragma once

#include <cstddef>
#include <string>

namespace keel::cpu_peak {

// f32 FLOP/s (2 per fused multiply-add) on `threads` threads at once.
double fma_flops(int threads);
// The kernel fma_flops runs: "AVX2 FMA, 8 floats", "AVX-512 FMA, 16 floats", ...
std::string fma_kernel();

struct Bandwidth {
  double read = 0;   // bytes/s read
  double write = 0;  // bytes/s written
  double copy = 0;   // bytes/s read plus written
};
// Streams `bytes` (at least 8x the last-level cache to mean memory) on `threads` threads.
Bandwidth memory_bandwidth(int threads, size_t bytes = size_t{256} << 20);

}  // namespace keel::cpu_peak
