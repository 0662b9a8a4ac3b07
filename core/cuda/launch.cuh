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
#include <source_location>

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

// A kernel's static shared memory, `type name;` in one block: type a scalar or array type
// (float[32], TileRange[8], unsigned), name its name. Under nvcc the usual __shared__ variable; on
// the emulated GPU each block's own, counted against the launch's shared-memory limit together with
// the dynamic bytes, as a GPU counts them (a plain __shared__ does not compile there).
// KEEL_SHARED_ALIGNED(align, type, name) aligns it to `align` bytes.
#ifdef KEEL_CUDA_EMULATED
#define KEEL_SHARED_ALIGNED(align, type, name)                                                          \
  static constexpr ::keel::emu::SharedSite keel_shared_site_##name{                                   \
      sizeof(type), alignof(type) > (align) ? alignof(type) : (align), #name,                          \
      std::source_location::current()};                                                                \
  auto& name = ::keel::emu::static_shared<type>(keel_shared_site_##name)
#define KEEL_SHARED(type, name) KEEL_SHARED_ALIGNED(1, type, name)
#else
#define KEEL_SHARED_ALIGNED(align, type, name) __shared__ __align__(align) ::keel::cuda::SharedType<type> name
#define KEEL_SHARED(type, name) __shared__ ::keel::cuda::SharedType<type> name
#endif

namespace keel::cuda {

template <typename T>
using SharedType = T;  // names an array type where a declaration wants the name before the extents

// Before a launch with `dynamic_bytes` of dynamic shared memory: the kernel's static shared memory
// (cudaFuncGetAttributes) and those bytes must fit the kernel's limit, else a CudaError naming `op`,
// `kernel_name` and the bytes, where the launch itself would fail with cudaErrorInvalidValue.
// On the emulated GPU the static bytes are known once a block of the kernel has run; before, the
// block's own declarations are checked as it runs (docs/emulation.md).
void check_shared_memory(const void* kernel, size_t dynamic_bytes, const char* op, const char* kernel_name);
// The kernel's static shared memory, as cudaFuncGetAttributes reports it.
size_t static_shared_of(const void* kernel);

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
