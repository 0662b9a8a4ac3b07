// Every kernel launch in keel goes through launch_kernel(), so that the same .cu source runs on
// a GPU (nvcc: the usual <<<grid, block, shared bytes, stream>>>) and on the emulated device
// (preset `emu`: the kernel is a host function and core/cuda/emu runs one host fiber per CUDA
// thread). This is the only place that knows which of the two builds it is in.
//
//   launch_kernel(kernel, grid, block, dynamic_shared_bytes, stream, args...)
//
// Check the launch with KEEL_CHECK_LAUNCH() afterwards, as after a <<<>>> launch: a bad
// configuration (too many threads, too much shared memory) is reported through
// cudaGetLastError() in both builds.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#include "core/cuda/counters.h"

#ifdef KEEL_CUDA_EMULATED
#include "core/cuda/emu/launch.h"
#endif

// A kernel's dynamic shared memory (sized by the launch's third argument) as `type* name`,
// aligned to `align` bytes: under nvcc the usual extern __shared__ array.
#ifdef KEEL_CUDA_EMULATED
#define KEEL_DYNAMIC_SHARED(type, name, align) \
  type* const name = reinterpret_cast<type*>(::keel::emu::dynamic_shared(align))
#else
#define KEEL_DYNAMIC_SHARED(type, name, align) extern __shared__ __align__(align) type name[]
#endif

namespace keel::cuda {

template <typename... Params, typename... Args>
void launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream,
                   Args&&... args) {
  detail::count_launch();
#ifdef KEEL_CUDA_EMULATED
  emu::launch(kernel, grid, block, shared_bytes, stream, std::forward<Args>(args)...);
#else
  kernel<<<grid, block, shared_bytes, stream>>>(std::forward<Args>(args)...);
#endif
}

}  // namespace keel::cuda
