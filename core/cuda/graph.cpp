// cuda::Graph on the CUDA runtime (on the emulated GPU, core/cuda/emu/graph.cpp answers).
#include "core/cuda/graph.h"

#include "core/cuda/caching_allocator.h"
#include "core/cuda/check.h"
#include "core/cuda/counters.h"
#include "core/cuda/runtime.h"

namespace keel::cuda {

Graph::Graph(int device) : device_(device) { check_device(device, "cuda graph"); }

Graph::~Graph() {
  if (exec_) (void)cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
  if (pool_) release_graph_pool(device_, pool_);
}

void Graph::reset() {
  // Blocks of the pool may go to other tensors at once: their work queues on the same stream
  // behind any replay still running.
  if (exec_) KEEL_CHECK_CUDA(cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_)));
  exec_ = nullptr;
  if (pool_) release_graph_pool(device_, pool_);
  pool_ = 0;
}

void Graph::capture(const std::function<void()>& step) {
  reset();
  KEEL_CHECK_CUDA(cudaSetDevice(device_));
  cudaStream_t s = detail::stream(device_);
  pool_ = begin_graph_pool(device_);
  cudaGraph_t graph = nullptr;
  try {
    // Global mode: any call in the process that could synchronise the device fails, so a stray
    // wait shows at once instead of as a graph that silently misses work.
    KEEL_CHECK_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    try {
      step();
    } catch (...) {
      if (cudaStreamEndCapture(s, &graph) == cudaSuccess && graph) (void)cudaGraphDestroy(graph);
      (void)cudaGetLastError();  // the capture's own error is not the one to report
      throw;
    }
    end_graph_pool(device_);
    KEEL_CHECK_CUDA(cudaStreamEndCapture(s, &graph));
    cudaGraphExec_t exec = nullptr;
    const cudaError_t err = cudaGraphInstantiate(&exec, graph, 0);
    (void)cudaGraphDestroy(graph);  // the executable form is independent of it
    KEEL_CHECK_CUDA(err);
    exec_ = exec;
  } catch (...) {
    end_graph_pool(device_);
    reset();
    throw;
  }
}

void Graph::replay() {
  if (!exec_) throw CudaError("cuda graph replay", "the graph holds nothing", "capture() a step first");
  detail::count_launch();
  KEEL_CHECK_CUDA(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), detail::stream(device_)));
}

bool is_capturing(int device) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  KEEL_CHECK_CUDA(cudaStreamIsCapturing(detail::stream(device), &status));
  return status != cudaStreamCaptureStatusNone;
}

}  // namespace keel::cuda
