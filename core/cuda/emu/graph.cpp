// CUDA graphs on the emulated GPU: stream capture records closures (core/cuda/emu/graph.h), a
// graph is their list, and a launch of its executable form runs them in order on the calling
// thread. The entry points have the signatures of CUDA's cuda_runtime_api.h and answer with its
// error codes, so keel's graph code (core/cuda/graph.cpp) runs here unchanged.
//
// What a GPU enforces, enforced here too: only a created (non-legacy) stream can capture, and
// only once at a time; a host wait on the capturing stream, or a call that may synchronise the
// device (cudaMalloc, cudaFree, a synchronous copy or memset) while a capture in global mode is in
// progress, fails with cudaErrorStreamCaptureUnsupported and invalidates the capture, whose end
// then fails with cudaErrorStreamCaptureInvalidated; a global or thread-local capture ends on the
// thread that began it.
#include <cuda_runtime.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "core/cuda/emu/graph.h"

using Ops = std::vector<std::function<void()>>;

struct CUgraph_st {
  Ops ops;
};
struct CUgraphExec_st {
  // Shared with the closure that a launch inside another capture records: the executable may be
  // destroyed before that graph replays.
  std::shared_ptr<const Ops> ops;
};

namespace {

struct Capture {
  cudaStreamCaptureMode mode;
  std::thread::id thread;
  bool invalidated = false;
  std::string why;  // what invalidated it
  Ops ops;
};

struct Captures {
  std::mutex mu;
  std::map<cudaStream_t, Capture> by_stream;
};
Captures& captures() {
  static Captures* c = new Captures;  // never destroyed: streams may outlive static destructors
  return *c;
}
// Captures in progress: without one (the common case) a launch pays one atomic load.
std::atomic<int> g_active{0};

void run(const Ops& ops) {
  for (const auto& op : ops) op();
}

}  // namespace

namespace keel::emu {

bool is_capturing(cudaStream_t stream) {
  if (g_active.load(std::memory_order_acquire) == 0 || !stream) return false;
  Captures& c = captures();
  std::lock_guard<std::mutex> lock(c.mu);
  return c.by_stream.count(stream) > 0;
}

void capture(cudaStream_t stream, std::function<void()> op) {
  Captures& c = captures();
  std::lock_guard<std::mutex> lock(c.mu);
  auto it = c.by_stream.find(stream);
  if (it != c.by_stream.end() && !it->second.invalidated) it->second.ops.push_back(std::move(op));
}

cudaError_t capture_forbids(cudaStream_t stream, const char* what) {
  if (g_active.load(std::memory_order_acquire) == 0) return cudaSuccess;
  Captures& c = captures();
  std::lock_guard<std::mutex> lock(c.mu);
  Capture* hit = nullptr;
  if (stream) {
    auto it = c.by_stream.find(stream);
    if (it != c.by_stream.end()) hit = &it->second;
  } else {
    for (auto& [s, cap] : c.by_stream)
      if (cap.mode == cudaStreamCaptureModeGlobal ||
          (cap.mode == cudaStreamCaptureModeThreadLocal && cap.thread == std::this_thread::get_id()))
        hit = &cap;
  }
  if (!hit) return cudaSuccess;
  if (!hit->invalidated) hit->why = what;
  hit->invalidated = true;
  return set_error(cudaErrorStreamCaptureUnsupported,
                   fmt::format("{} while a stream is capturing a graph (the capture is now invalidated)", what));
}

}  // namespace keel::emu

using keel::emu::set_error;

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
  if (!stream) return set_error(cudaErrorStreamCaptureUnsupported, "the legacy default stream cannot capture");
  Captures& c = captures();
  std::lock_guard<std::mutex> lock(c.mu);
  if (c.by_stream.count(stream)) return set_error(cudaErrorIllegalState, "the stream is capturing already");
  c.by_stream.emplace(stream, Capture{mode, std::this_thread::get_id(), false, {}, {}});
  g_active.fetch_add(1, std::memory_order_release);
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* pGraph) {
  if (!pGraph) return set_error(cudaErrorInvalidValue, "cudaStreamEndCapture: pGraph is null");
  *pGraph = nullptr;
  Capture cap;
  {
    Captures& c = captures();
    std::lock_guard<std::mutex> lock(c.mu);
    auto it = c.by_stream.find(stream);
    if (it == c.by_stream.end()) return set_error(cudaErrorIllegalState, "the stream is not capturing");
    if (it->second.mode != cudaStreamCaptureModeRelaxed && it->second.thread != std::this_thread::get_id())
      return set_error(cudaErrorStreamCaptureWrongThread, "the capture began on another thread");
    cap = std::move(it->second);
    c.by_stream.erase(it);
    g_active.fetch_sub(1, std::memory_order_release);
  }
  if (cap.invalidated)
    return set_error(cudaErrorStreamCaptureInvalidated, fmt::format("the capture was invalidated by {}", cap.why));
  *pGraph = new CUgraph_st{std::move(cap.ops)};
  return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* pCaptureStatus) {
  if (!pCaptureStatus) return set_error(cudaErrorInvalidValue, "cudaStreamIsCapturing: pCaptureStatus is null");
  *pCaptureStatus = cudaStreamCaptureStatusNone;
  if (!stream) return cudaSuccess;
  Captures& c = captures();
  std::lock_guard<std::mutex> lock(c.mu);
  auto it = c.by_stream.find(stream);
  if (it != c.by_stream.end())
    *pCaptureStatus = it->second.invalidated ? cudaStreamCaptureStatusInvalidated : cudaStreamCaptureStatusActive;
  return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* pGraphExec, cudaGraph_t graph, unsigned long long) {
  if (!pGraphExec || !graph) return set_error(cudaErrorInvalidValue, "cudaGraphInstantiate: null graph or pGraphExec");
  // A copy: the executable graph stays valid after its graph is destroyed, as in CUDA.
  *pGraphExec = new CUgraphExec_st{std::make_shared<const Ops>(graph->ops)};
  return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream) {
  if (!graphExec) return set_error(cudaErrorInvalidValue, "cudaGraphLaunch: null graphExec");
  if (keel::emu::is_capturing(stream)) {  // a graph launched into a capture becomes one of its nodes
    keel::emu::capture(stream, [ops = graphExec->ops] { run(*ops); });
    return cudaSuccess;
  }
  run(*graphExec->ops);
  return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t graphExec) {
  delete graphExec;
  return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  delete graph;
  return cudaSuccess;
}
