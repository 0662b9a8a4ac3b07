// CUDA graphs: GPU work recorded once (stream capture) and replayed with one launch.
//
// Generation at batch 1 is bound by the host: a decode step is ~50 small kernels and library
// calls, each costing the host a few microseconds to issue, while the GPU finishes each in about
// one. Captured once, the step replays with one cudaGraphLaunch, and the GPU runs its nodes
// back to back (docs/inference.md).
//
//   cuda::Graph graph(device);
//   step();                          // once eagerly first: the cache then holds the blocks it needs
//   graph.capture([&] { step(); });  // records what step enqueues on the device's compute stream
//   ... write the next inputs into the same device buffers ...
//   graph.replay();                  // the recorded work again, on what the buffers hold now
//
// What capture demands of the step (a GPU's rules; the emulated GPU keeps them too):
//  - no host wait: synchronize() and the host <-> device copies throw CudaError while capturing
//    (and invalidate the capture); a result is read after replay();
//  - memory from the graph's pool (caching_allocator.h): every block the step allocates must be
//    in the cache already, since cudaMalloc is not allowed while capturing;
//  - what the host passes to a kernel (sizes, positions, pointers, grids) is frozen at capture:
//    whatever changes from one replay to the next must live in device memory the kernels read;
//  - tensors made before the capture that the step reads or writes must outlive the graph.
// A replay counts as one launch in cuda::counters(). Not thread-safe; one capture per device at
// a time. Without CUDA, constructing a Graph raises DeviceError.
#pragma once

#include <cstdint>
#include <functional>

namespace keel::cuda {

class Graph {
 public:
  explicit Graph(int device);
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  // Replaces what the graph held with what `step` enqueues. When step throws, the capture is
  // abandoned, the graph left empty, and the exception goes on.
  void capture(const std::function<void()>& step);
  // Enqueues the captured work on the device's compute stream; does not wait for it.
  void replay();
  bool empty() const { return exec_ == nullptr; }
  int device() const { return device_; }
  // Destroys the captured work and gives its memory pool back to the cache.
  void reset();

 private:
  int device_;
  void* exec_ = nullptr;  // cudaGraphExec_t
  uint64_t pool_ = 0;     // its blocks in the caching allocator; 0: none
};

// Whether the compute stream of `device` is capturing a graph.
bool is_capturing(int device);

}  // namespace keel::cuda
