// NCCL communicator (see comm_nccl.h). Built only with the CUDA backend.
#include "core/dist/comm_nccl.h"

#include <nccl.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "core/copy.h"
#include "core/cuda/check.h"
#include "core/cuda/counters.h"
#include "core/factory.h"

namespace keel {

namespace {

double timeout_s() {
  const char* v = std::getenv("KEEL_DIST_TIMEOUT");
  double t = v ? std::atof(v) : 0;
  return t > 0 ? t : 30.0;
}

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::f32: return ncclFloat32;
    case DType::f64: return ncclFloat64;
    case DType::bf16: return ncclBfloat16;
    case DType::f16: return ncclFloat16;
    case DType::i32: return ncclInt32;
    case DType::i64: return ncclInt64;
  }
  return ncclFloat32;
}

class NcclCommunicator;

// A collective that fails leaves the communicator unusable (a peer lost, a network error):
// abort it, as the watchdog does, and raise with the statement, file and line.
#define KEEL_CHECK_COLLECTIVE(stmt)                                                        \
  do {                                                                                     \
    ncclResult_t keel_st_ = (stmt);                                                        \
    if (keel_st_ != ncclSuccess) collective_failed(keel_st_, #stmt, __FILE__, __LINE__);   \
  } while (0)

// A collective queued on the NCCL stream: done when its event has fired.
class NcclWork final : public Communicator::Work {
 public:
  NcclWork(NcclCommunicator* c, cudaEvent_t ev, Tensor target, Tensor buf)
      : c_(c), ev_(ev), target_(std::move(target)), buf_(std::move(buf)) {}
  ~NcclWork() override { cudaEventDestroy(ev_); }
  void wait() override;
  bool test() override { return cudaEventQuery(ev_) == cudaSuccess; }

 private:
  NcclCommunicator* c_;
  cudaEvent_t ev_;
  Tensor target_, buf_;
  bool done_ = false;
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(Communicator& bootstrap, int device) : device_(device) {
    rank_ = bootstrap.rank();
    world_ = bootstrap.world_size();
    KEEL_CHECK_CUDA(cudaSetDevice(device));
    ncclUniqueId id;
    if (rank_ == 0) KEEL_CHECK_NCCL(ncclGetUniqueId(&id));
    // The id is 128 opaque bytes; it travels as 16 i64 over the bootstrap communicator.
    static_assert(sizeof(id) % sizeof(int64_t) == 0);
    Tensor bytes = zeros({int64_t(sizeof(id) / sizeof(int64_t))}, {DType::i64});
    if (rank_ == 0) std::memcpy(bytes.raw_data(), &id, sizeof(id));
    bootstrap.broadcast(bytes, 0);
    std::memcpy(&id, bytes.raw_data(), sizeof(id));
    KEEL_CHECK_NCCL(ncclCommInitRank(&comm_, world_, id, rank_));
    KEEL_CHECK_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  ~NcclCommunicator() override {
    if (comm_) ncclCommDestroy(comm_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  std::string backend() const override { return "nccl"; }

  void all_reduce_sum(Tensor& t) override { run_reduce(t, ncclSum)->wait(); }
  void all_reduce_mean(Tensor& t) override {
    if (!is_floating(t.dtype()))
      throw DTypeError("all_reduce_mean", std::string("a mean needs a floating tensor, got ") + dtype_name(t.dtype()));
    run_reduce(t, ncclAvg)->wait();
  }
  std::unique_ptr<Work> all_reduce_mean_async(Tensor& t) override {
    if (!is_floating(t.dtype()))
      throw DTypeError("all_reduce_mean", std::string("a mean needs a floating tensor, got ") + dtype_name(t.dtype()));
    return run_reduce(t, ncclAvg);
  }

  void broadcast(Tensor& t, int root) override {
    if (root < 0 || root >= world_)
      throw ValueError("broadcast", "root " + std::to_string(root) + " is outside [0, " + std::to_string(world_) + ")");
    Tensor buf = on_device(t);
    after_compute();
    KEEL_CHECK_COLLECTIVE(ncclBroadcast(buf.raw_data(), buf.raw_data(), size_t(buf.numel()), nccl_type(buf.dtype()),
                                        root, comm_, stream_));
    finish(t, buf)->wait();
  }

  void all_gather(const Tensor& in, Tensor& out) override {
    if (out.dtype() != in.dtype() || out.numel() != in.numel() * world_ || !out.is_contiguous())
      throw ShapeError("all_gather", "out must be contiguous with world_size * numel(in) = " +
                                         std::to_string(in.numel() * world_) + " elements of in's dtype, got " +
                                         shape_str(out.shape()));
    Tensor src = on_device(in);
    Tensor dst = on_device(out);
    after_compute();
    KEEL_CHECK_COLLECTIVE(ncclAllGather(src.raw_data(), dst.raw_data(), size_t(src.numel()), nccl_type(src.dtype()),
                                        comm_, stream_));
    finish(out, dst)->wait();
  }
  using Communicator::all_gather;

  void reduce_scatter_sum(const Tensor& in, Tensor& out) override {
    if (!in.is_contiguous() || in.numel() != out.numel() * world_ || in.dtype() != out.dtype())
      throw ShapeError("reduce_scatter_sum", "in must be contiguous with world_size * numel(out) elements");
    Tensor src = on_device(in);
    Tensor dst = on_device(out);
    after_compute();
    KEEL_CHECK_COLLECTIVE(ncclReduceScatter(src.raw_data(), dst.raw_data(), size_t(dst.numel()),
                                            nccl_type(dst.dtype()), ncclSum, comm_, stream_));
    finish(out, dst)->wait();
  }

  void barrier() override {
    Tensor one = ones({1}, {DType::f32, Device::cuda(device_)});
    all_reduce_sum(one);
    cuda::detail::count_sync();
    KEEL_CHECK_CUDA(cudaStreamSynchronize(stream_));
  }

  // Blocks until `ev` fired; past the timeout aborts the communicator and raises.
  void wait_event(cudaEvent_t ev, const char* op) {
    auto start = std::chrono::steady_clock::now();
    const double limit = timeout_s();
    for (;;) {
      cudaError_t st = cudaEventQuery(ev);
      if (st == cudaSuccess) return;
      if (st != cudaErrorNotReady) KEEL_CHECK_CUDA(st);
      ncclResult_t async = ncclSuccess;
      KEEL_CHECK_NCCL(ncclCommGetAsyncError(comm_, &async));
      if (async != ncclSuccess) abort_and_throw(op, ncclGetErrorString(async));
      if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > limit)
        abort_and_throw(op, "no progress in " + std::to_string(int(limit)) + " s: another rank was lost or stopped");
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }

 private:
  [[noreturn]] void collective_failed(ncclResult_t st, const char* stmt, const char* file, int line) {
    const std::string why = ncclGetErrorString(st);  // before the abort: it may overwrite the message
    ncclCommAbort(comm_);
    comm_ = nullptr;
    cuda::detail::throw_library("NCCL", static_cast<int>(st), ("rank " + std::to_string(rank_) + ": " + why).c_str(),
                                stmt, file, line);
  }
  [[noreturn]] void abort_and_throw(const char* op, const std::string& why) {
    ncclCommAbort(comm_);
    comm_ = nullptr;
    throw CudaError(op, "rank " + std::to_string(rank_) + ": NCCL " + why,
                    "every rank stops; resume from the last checkpoint (set KEEL_DIST_TIMEOUT to wait longer)");
  }

  // The contiguous device tensor NCCL reads and writes: t itself when it already is one.
  Tensor on_device(const Tensor& t) {
    Tensor d = t.detach();
    if (d.device() == Device::cuda(device_) && d.is_contiguous()) return d;
    Tensor out = empty(d.shape(), {d.dtype(), Device::cuda(device_)});
    copy_(out, d.device() == Device::cuda(device_) ? d : d.to(Device::cuda(device_)));
    return out;
  }
  // The NCCL stream waits for what the compute stream has queued (the gradients it wrote).
  void after_compute() {
    cudaEvent_t ev;
    KEEL_CHECK_CUDA(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    KEEL_CHECK_CUDA(cudaEventRecord(ev, cuda::detail::stream(device_)));
    KEEL_CHECK_CUDA(cudaStreamWaitEvent(stream_, ev, 0));
    KEEL_CHECK_CUDA(cudaEventDestroy(ev));
  }
  std::unique_ptr<Work> finish(Tensor target, Tensor buf) {
    cudaEvent_t ev;
    KEEL_CHECK_CUDA(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    KEEL_CHECK_CUDA(cudaEventRecord(ev, stream_));
    return std::make_unique<NcclWork>(this, ev, std::move(target), std::move(buf));
  }
  std::unique_ptr<Work> run_reduce(Tensor& t, ncclRedOp_t op) {
    Tensor buf = on_device(t);
    after_compute();
    KEEL_CHECK_COLLECTIVE(ncclAllReduce(buf.raw_data(), buf.raw_data(), size_t(buf.numel()), nccl_type(buf.dtype()),
                                        op, comm_, stream_));
    return finish(t, buf);
  }

  friend class NcclWork;
  int device_, rank_ = 0, world_ = 1;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

void NcclWork::wait() {
  if (done_) return;
  c_->wait_event(ev_, "nccl collective");
  // Later compute-stream work (the optimizer) must see the reduced values.
  KEEL_CHECK_CUDA(cudaStreamWaitEvent(cuda::detail::stream(c_->device_), ev_, 0));
  if (buf_.raw_data() != target_.raw_data()) {
    Tensor d = target_.detach();
    copy_(d, buf_.as_strided(d.shape(), contiguous_strides(d.shape()), 0).to(d.device()));
  }
  done_ = true;
}

}  // namespace

std::shared_ptr<Communicator> make_nccl_communicator(Communicator& bootstrap, int device) {
  return std::make_shared<NcclCommunicator>(bootstrap, device);
}

}  // namespace keel
