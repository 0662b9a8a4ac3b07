// CUDA graphs (core/cuda/graph.h): a step captured once replays what it enqueued, on what its
// buffers hold at each replay; its memory stays the graph's; what a capture forbids (a host wait,
// a cudaMalloc) is a keel error that leaves the graph empty and the stream usable. On the emulated
// GPU also the runtime underneath: a capture records instead of running, and CUDA's error codes.
#include <doctest/doctest.h>

#include <functional>
#include <string>
#include <vector>

#include "core/copy.h"
#include "core/cuda/counters.h"
#include "core/cuda/graph.h"
#include "core/cuda/kernels.h"
#include "core/factory.h"
#include "cuda_test.h"

#ifdef KEEL_WITH_CUDA
#include <cuda_runtime.h>

#include "core/cuda/check.h"
#endif
#ifdef KEEL_CUDA_EMULATED
#include <cublas_v2.h>
#endif

using namespace keel;

namespace {
const Device kDev = Device::cuda(0);

Tensor host(std::vector<float> v) { return from_vector(v, {int64_t(v.size())}); }

std::vector<float> values(const Tensor& t) { return t.to(Device::cpu()).to_vector<float>(); }

// y <- 2 x + 1 through a temporary, with a byte copy, a fill and two kernels: (n) -> (n)
void step(const Tensor& x, Tensor& y) {
  Tensor tmp = empty(x.shape(), {DType::f32, kDev});
  copy_(tmp, x);
  cuda::add_inplace(tmp, x);
  cuda::fill(y, 1.0);
  cuda::add_inplace(y, tmp);
}
}  // namespace

TEST_CASE("a captured graph replays the step on what its buffers hold at each replay") {
  KEEL_REQUIRE_CUDA();
  Tensor x = host({1, 2, 3, 4}).to(kDev), y = zeros({4}, {DType::f32, kDev});
  step(x, y);  // eagerly once: the cache holds the temporary's block
  const std::vector<float> eager = values(y);
  CHECK(eager == std::vector<float>{3, 5, 7, 9});

  cuda::Graph graph(0);
  copy_(y, zeros({4}));
  graph.capture([&] { step(x, y); });
  CHECK_FALSE(graph.empty());
  CHECK_FALSE(cuda::is_capturing(0));
  graph.replay();
  CHECK(values(y) == eager);

  copy_(x, host({10, 20, 30, 40}));  // new contents, same buffer
  const cuda::Counters before = cuda::counters();
  graph.replay();
  const cuda::Counters replay = cuda::counters() - before;
  CHECK(values(y) == std::vector<float>{21, 41, 61, 81});
  CHECK(replay.launches == 1);  // the whole step, one launch
  CHECK(replay.allocations == 0);
  CHECK(replay.library_calls + replay.copies + replay.syncs == 0);
}

TEST_CASE("a graph's blocks stay its own while it lives") {
  KEEL_REQUIRE_CUDA();
  Tensor x = host({1, 2, 3}).to(kDev), y = zeros({3}, {DType::f32, kDev});
  void* captured = nullptr;
  auto inner = [&] {
    Tensor tmp = empty({3}, {DType::f32, kDev});
    captured = tmp.raw_data();
    copy_(tmp, x);
    cuda::add_inplace(y, tmp);
  };
  inner();  // the block is now in the cache
  {
    cuda::Graph graph(0);
    graph.capture(inner);
    // Freed during the capture, the temporary's block went back to the graph, not the cache:
    // a tensor of that size made now gets another block, and the replay's writes cannot reach it.
    Tensor other = full({3}, 7.0, {DType::f32, kDev});
    CHECK(other.raw_data() != captured);
    copy_(y, zeros({3}));
    graph.replay();
    CHECK(values(y) == std::vector<float>{1, 2, 3});
    CHECK(values(other) == std::vector<float>{7, 7, 7});
  }
  // The graph is gone: its block is the cache's again.
  Tensor again = empty({3}, {DType::f32, kDev});
  Tensor again2 = empty({3}, {DType::f32, kDev});
  CHECK((again.raw_data() == captured || again2.raw_data() == captured));
}

TEST_CASE("a host wait while capturing is a CudaError, and the graph stays empty and the stream usable") {
  KEEL_REQUIRE_CUDA();
  Tensor x = host({1, 2}).to(kDev), y = zeros({2}, {DType::f32, kDev});
  step(x, y);
  {  // blocks in the cache for the upload below, so that it fails at its copy, not its allocation
    std::vector<Tensor> warm;
    for (int i = 0; i < 4; ++i) warm.push_back(empty({2}, {DType::f32, kDev}));
  }
  cuda::Graph graph(0);
  for (auto wait : {std::function<void()>([] { cuda::synchronize(0); }),
                    std::function<void()>([&] { (void)values(y); }),
                    std::function<void()>([&] { (void)host({1, 2}).to(kDev); })}) {
    try {
      graph.capture([&] {
        step(x, y);
        wait();
      });
      FAIL("no error");
    } catch (const CudaError& e) {
      INFO(std::string(e.what()));
      CHECK(std::string(e.what()).find("capturing a CUDA graph") != std::string::npos);
    }
    CHECK(graph.empty());
    CHECK_FALSE(cuda::is_capturing(0));
  }
  step(x, y);  // eager work goes on
  CHECK(values(y) == std::vector<float>{3, 5});
  CHECK_THROWS_AS(graph.replay(), CudaError);
}

TEST_CASE("a capture that would call cudaMalloc is a CudaError") {
  KEEL_REQUIRE_CUDA();
  cuda::Graph graph(0);
  try {
    graph.capture([] { (void)empty({(int64_t(123) << 20) / 4 + 1}, {DType::f32, kDev}); });  // a size never cached
    FAIL("no error");
  } catch (const CudaError& e) {
    CHECK(std::string(e.what()).find("cudaMalloc is not allowed while capturing") != std::string::npos);
    CHECK_FALSE(e.hint().empty());
  }
  CHECK(graph.empty());
  CHECK_FALSE(cuda::is_capturing(0));
}

#ifdef KEEL_CUDA_EMULATED
// The runtime underneath, on the emulated GPU: what CUDA itself answers.
TEST_CASE("emulated GPU: capture records launches, cuBLAS calls and async copies, and replay runs them") {
  cudaStream_t s = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  std::vector<float> a = {1, 2, 3, 4}, b = {1, 0, 0, 1}, c(4, -1.0f), d(4, -1.0f);
  cublasHandle_t h = nullptr;
  REQUIRE(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS);
  REQUIRE(cublasSetStream(h, s) == CUBLAS_STATUS_SUCCESS);
  REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  cudaStreamCaptureStatus status{};
  REQUIRE(cudaStreamIsCapturing(s, &status) == cudaSuccess);
  CHECK(status == cudaStreamCaptureStatusActive);
  float alpha = 2.0f, beta = 0.0f;
  CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &alpha, a.data(), CUDA_R_32F, 2, b.data(), CUDA_R_32F, 2,
                     &beta, c.data(), CUDA_R_32F, 2, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS);
  alpha = 100.0f;  // a graph keeps the scalar it was captured with
  CHECK(cudaMemcpyAsync(d.data(), c.data(), 4 * sizeof(float), cudaMemcpyDeviceToDevice, s) == cudaSuccess);
  cudaGraph_t graph = nullptr;
  REQUIRE(cudaStreamEndCapture(s, &graph) == cudaSuccess);
  CHECK(c == std::vector<float>(4, -1.0f));  // recorded, not run
  CHECK(d == std::vector<float>(4, -1.0f));
  cudaGraphExec_t exec = nullptr;
  REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
  CHECK(cudaGraphDestroy(graph) == cudaSuccess);
  CHECK(cudaGraphLaunch(exec, s) == cudaSuccess);
  CHECK(c == std::vector<float>{2, 4, 6, 8});
  CHECK(d == c);
  a = {0, 0, 0, 1};  // replay reads the buffers as they are now
  CHECK(cudaGraphLaunch(exec, s) == cudaSuccess);
  CHECK(d == std::vector<float>{0, 0, 0, 2});
  CHECK(cudaGraphExecDestroy(exec) == cudaSuccess);
  cublasDestroy(h);
  cudaStreamDestroy(s);
}

TEST_CASE("emulated GPU: a sync or cudaMalloc during capture fails as on a GPU and invalidates the capture") {
  cudaStream_t s = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  for (int what = 0; what < 3; ++what) {
    REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaErrorIllegalState);
    void* p = nullptr;
    float host_value = 0;
    const cudaError_t err = what == 0   ? cudaStreamSynchronize(s)
                            : what == 1 ? cudaMalloc(&p, 256)
                                        : cudaMemcpy(&host_value, &host_value, 4, cudaMemcpyHostToHost);
    CHECK(err == cudaErrorStreamCaptureUnsupported);
    CHECK(cudaGetLastError() == cudaErrorStreamCaptureUnsupported);
    cudaStreamCaptureStatus status{};
    CHECK(cudaStreamIsCapturing(s, &status) == cudaSuccess);
    CHECK(status == cudaStreamCaptureStatusInvalidated);
    cudaGraph_t graph = nullptr;
    CHECK(cudaStreamEndCapture(s, &graph) == cudaErrorStreamCaptureInvalidated);
    CHECK(graph == nullptr);
    CHECK(std::string(cudaGetErrorName(cudaGetLastError())) == "cudaErrorStreamCaptureInvalidated");
  }
  CHECK(cudaStreamSynchronize(s) == cudaSuccess);  // not capturing any more
  CHECK(cudaStreamBeginCapture(nullptr, cudaStreamCaptureModeGlobal) == cudaErrorStreamCaptureUnsupported);
  (void)cudaGetLastError();
  cudaStreamDestroy(s);
}
#endif
