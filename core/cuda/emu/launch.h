// A kernel launch on the emulated GPU: check the configuration as the CUDA runtime does, then
// run every thread of every block (block.h) with its own copy of the arguments.
//
// A bad configuration does not run the kernel; it becomes the error that the next
// cudaGetLastError() returns (KEEL_CHECK_LAUNCH turns it into a CudaError naming the launch
// site), exactly as on a GPU. Rules checked: at most 1024 threads per block (x, y <= 1024,
// z <= 64), grid.x < 2^31 and grid.y, grid.z <= 65535, no empty grid or block, and static plus
// dynamic shared memory within the kernel's limit: 48 KB unless cudaFuncSetAttribute raised it,
// never above the emulated GPU's per-block maximum. The static bytes are the ones a block of the
// kernel has declared (KEEL_SHARED); before its first block ran they are checked as the block
// declares them (shared_memory.cpp). On a stream that is capturing a graph (graph.h) the launch
// is recorded after the same checks, and runs at each replay.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>

#include "core/cuda/emu/block.h"
#include "core/cuda/emu/graph.h"

namespace keel::emu {

// Records the launch error and returns false when the configuration breaks a CUDA rule; else
// sets launch.max_dynamic_attribute to the kernel's cudaFuncSetAttribute limit (-1: never set).
bool check_launch(Launch& launch, cudaStream_t stream);

// The static shared memory the blocks of `kernel` have declared so far (0 before one ran), and
// the runtime's note of a larger amount (shared_memory.cpp).
size_t known_static_shared(const void* kernel);
void learn_static_shared(const void* kernel, size_t bytes);

template <typename... Params, typename... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t dynamic_shared_bytes, cudaStream_t stream,
            Args&&... args) {
  Launch l;
  l.kernel = reinterpret_cast<const void*>(kernel);
  l.grid = grid;
  l.block = block;
  l.dynamic_shared = dynamic_shared_bytes;
  if (!check_launch(l, stream)) return;
  // Converted once, as a launch converts the arguments to the parameter types; each thread then
  // gets its own copy, as each CUDA thread gets the parameters by value.
  using Tuple = std::tuple<std::decay_t<Params>...>;
  struct Call {
    void (*kernel)(Params...);
    const Tuple* params;
    static void body(const void* c) {
      const Call& k = *static_cast<const Call*>(c);
      std::apply(k.kernel, *k.params);
    }
  };
  l.body = &Call::body;
  if (is_capturing(stream)) {
    // A graph node: the converted arguments as they are now, the kernel at every replay.
    auto params = std::make_shared<const Tuple>(std::forward<Args>(args)...);
    capture(stream, [kernel, l, params] {
      const Call call{kernel, params.get()};
      Launch run = l;
      run.ctx = &call;
      run_grid(run);
    });
    return;
  }
  const Tuple params(std::forward<Args>(args)...);
  const Call call{kernel, &params};
  l.ctx = &call;
  run_grid(l);
}

}  // namespace keel::emu
