// What keel has asked of its GPUs, counted: kernel launches, library calls, copies, host
// synchronisations and device allocations. These are the GPU-free proxies of speed for work
// that is bound by the host rather than the GPU (a decode step issues ~100 tiny operations; a
// training step should wait for the device at most once per logged step): on the emulated GPU
// they are exactly what a real GPU would be asked, so CI can hold them
// (tests/nn/test_decode_launches_cuda.cpp, tests/train/test_decode_counters.cpp) and a benchmark
// can print them per token or per step on any machine.
//
//   const cuda::Counters before = cuda::counters();
//   ... one decode step ...
//   const cuda::Counters step = cuda::counters() - before;  // step.launches, step.syncs, ...
//
// Counts are process-wide (every device and thread) and never reset; take differences. In a
// build without CUDA they stay zero.
#pragma once

#include <cstdint>
#include <string>

namespace keel::cuda {

struct Counters {
  uint64_t launches = 0;        // kernels keel launches itself (launch_kernel)
  uint64_t library_calls = 0;   // cuBLAS / cuBLASLt calls, each launching one or more kernels
  uint64_t copies = 0;          // device copies and memsets enqueued on a stream (no host wait)
  uint64_t syncs = 0;           // host waits for a device: synchronize, and copies to or from host memory
  uint64_t allocations = 0;     // device blocks handed out by the caching allocator
  uint64_t device_mallocs = 0;  // of those, the ones that had to call cudaMalloc (a cache miss)
  uint64_t tensor_maps = 0;     // TMA tensor maps encoded on the host (core/cuda/tensor_map.h)

  uint64_t operations() const { return launches + library_calls + copies; }  // stream operations
  Counters operator-(const Counters& o) const;
  // "12 launches, 4 library calls, 2 copies, 1 sync, 30 allocations" (", 3 tensor maps" when any)
  std::string summary() const;
};

Counters counters();

namespace detail {
void count_launch();
void count_library_call();
void count_copy();
void count_sync();
void count_allocation(bool device_malloc);
void count_tensor_map();
}  // namespace detail

}  // namespace keel::cuda
