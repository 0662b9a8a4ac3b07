// MPI communicator (see comm_mpi.h). Every collective is started non-blocking and completed
// by polling (wait_for), which is where the watchdog lives: a collective that does not
// complete within the timeout means a rank died or stopped, and waiting longer would hang.
#include "core/dist/comm_mpi.h"

#include <cstdlib>

#include "core/error.h"

#if KEEL_WITH_MPI
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <thread>

#include "core/dist/comm_mpi_library.h"
#include "core/copy.h"
#include "core/factory.h"
#endif

namespace keel {

bool launched_by_mpi() {
  // Open MPI's mpirun, MPICH/Hydra, and srun with PMI or PMIx each leave one of these.
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "PMI_RANK"})
    if (std::getenv(v)) return true;
  return false;
}

#if !KEEL_WITH_MPI

bool mpi_built() { return false; }
void require_mpi() {
  throw ConfigError("mpi", "this keel was built without MPI, so it cannot run several processes on the CPU",
                    "install Open MPI (apt-get install libopenmpi-dev openmpi-bin, as .ci/setup does) and "
                    "rebuild keel");
}
std::shared_ptr<Communicator> make_mpi_communicator() {
  require_mpi();
  return nullptr;  // not reached
}
// The shutdown paths below run while the process is exiting or aborting: they check state
// instead of throwing, since there is nobody left to report an error to.
void mpi_finalize() {}
void mpi_abort(int) {}

#else

bool mpi_built() { return true; }

namespace {

// Every MPI function and handle comes from the library loaded at first use (comm_mpi_library.h).
const MpiLibrary& mpi() { return mpi_library(); }

// Seconds a collective may take before the watchdog declares a rank lost (KEEL_DIST_TIMEOUT).
double timeout_s() {
  const char* v = std::getenv("KEEL_DIST_TIMEOUT");
  double t = v ? std::atof(v) : 0;
  return t > 0 ? t : 30.0;
}

// Every MPI call goes through KEEL_CHECK_MPI, so a failure names the call's file and line.
void check_mpi(int rc, const char* what, const char* file, int line) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  mpi().Error_string(rc, msg, &len);
  throw ConfigError("mpi", std::string(what) + " failed (" + file + ":" + std::to_string(line) +
                               "): " + std::string(msg, len));
}
#define KEEL_CHECK_MPI(call, what) check_mpi((call), (what), __FILE__, __LINE__)

// The type a tensor is reduced in: f32, f64, i32, i64 as they are; f16 widened to f32; bf16
// widened for max, and for sums kept in bf16 on the wire (half the bytes: what
// --reduce-dtype bf16 asks for), each pairwise sum computed in f32 and rounded, as NCCL does.
DType reduce_dtype(DType t, bool sum = false) {
  if (t == DType::bf16 && sum) return DType::bf16;
  return t == DType::bf16 || t == DType::f16 ? DType::f32 : t;
}
MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::bf16: return mpi().uint16;  // with bf16_sum_op only
    case DType::f32: return mpi().float32;
    case DType::f64: return mpi().float64;
    case DType::i32: return mpi().int32;
    case DType::i64: return mpi().int64;
    default: throw DTypeError("mpi", std::string("no MPI reduction for ") + dtype_name(t));
  }
}

// inout[i] = max(in[i], inout[i]) where NaN wins: the same answer whichever operand comes first.
template <typename T>
void nan_max(const T* in, T* inout, int n) {
  for (int i = 0; i < n; ++i) {
    if constexpr (std::is_floating_point_v<T>) {
      if (std::isnan(inout[i])) continue;
      if (std::isnan(in[i])) { inout[i] = in[i]; continue; }
    }
    if (in[i] > inout[i]) inout[i] = in[i];
  }
}
extern "C" void nan_max_op(void* in, void* inout, int* len, MPI_Datatype* dt) {
  if (*dt == mpi().float32) nan_max(static_cast<float*>(in), static_cast<float*>(inout), *len);
  else if (*dt == mpi().float64) nan_max(static_cast<double*>(in), static_cast<double*>(inout), *len);
  else if (*dt == mpi().int32) nan_max(static_cast<int32_t*>(in), static_cast<int32_t*>(inout), *len);
  else if (*dt == mpi().int64) nan_max(static_cast<int64_t*>(in), static_cast<int64_t*>(inout), *len);
}

extern "C" void bf16_sum_op(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const bf16*>(in);
  auto* b = static_cast<bf16*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = bf16(float(a[i]) + float(b[i]));
}

// Completes `req` by polling; past the timeout the job is aborted (every rank dies at once,
// and the launcher names the rank that was lost first).
void wait_for(MPI_Request& req, int rank, const char* op) {
  int done = 0;
  auto start = std::chrono::steady_clock::now();
  const double limit = timeout_s();
  for (int spins = 0;; ++spins) {
    KEEL_CHECK_MPI(mpi().Test(&req, &done, MPI_STATUS_IGNORE), op);
    if (done) return;
    if (spins > 1000) std::this_thread::sleep_for(std::chrono::microseconds(50));
    if ((spins & 1023) == 0 &&
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > limit) {
      std::fprintf(stderr,
                   "gpt2: rank %d: %s did not complete in %.0f s: another rank was lost or stopped; "
                   "aborting every rank (set KEEL_DIST_TIMEOUT to wait longer)\n",
                   rank, op, limit);
      std::fflush(stderr);
      mpi().Abort(mpi().comm_world, 3);
    }
  }
}

// The packed host buffer of t in its reduction dtype (t itself when that is what it is).
Tensor staged(const Tensor& t, DType as) {
  Tensor d = t.detach();
  if (d.device().is_cpu() && d.is_contiguous() && d.dtype() == as) return d;
  Tensor out = empty(d.shape(), {as, Device::cpu()});
  copy_(out, d.device().is_cpu() ? d : d.to(Device::cpu()));
  return out;
}
void write_back(Tensor& t, const Tensor& buf) {
  if (buf.impl_ptr() == t.detach().impl_ptr() || buf.raw_data() == t.raw_data()) return;  // reduced in place
  Tensor d = t.detach();
  Tensor src = buf.as_strided(d.shape(), contiguous_strides(d.shape()), 0);
  if (src.dtype() != d.dtype()) src = src.to(d.dtype());
  copy_(d, src);
}
void divide(Tensor& buf, int world) {
  visit_dtype(buf.dtype(), [&]<typename T>() {
    if constexpr (std::is_floating_point_v<T>) {
      T* p = buf.data<T>();
      for (int64_t i = 0; i < buf.numel(); ++i) p[i] /= T(world);
    } else if constexpr (std::is_same_v<T, bf16>) {
      T* p = buf.data<T>();
      for (int64_t i = 0; i < buf.numel(); ++i) p[i] = bf16(float(p[i]) / float(world));
    }
  });
}

class MpiWork final : public Communicator::Work {
 public:
  MpiWork(Tensor target, Tensor buf, int rank, int world)
      : target_(std::move(target)), buf_(std::move(buf)), rank_(rank), world_(world) {}
  MPI_Request req{};
  void wait() override {
    if (finished_) return;
    wait_for(req, rank_, "all_reduce_mean");
    finish();
  }
  bool test() override {
    if (finished_) return true;
    int done = 0;
    KEEL_CHECK_MPI(mpi().Test(&req, &done, MPI_STATUS_IGNORE), "all_reduce_mean");
    if (done) finish();
    return finished_;
  }

 private:
  void finish() {
    divide(buf_, world_);
    write_back(target_, buf_);
    finished_ = true;
  }
  Tensor target_, buf_;
  int rank_, world_;
  bool finished_ = false;
};

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator() {
    KEEL_CHECK_MPI(mpi().Comm_rank(mpi().comm_world, &rank_), "MPI_Comm_rank");
    KEEL_CHECK_MPI(mpi().Comm_size(mpi().comm_world, &world_), "MPI_Comm_size");
    KEEL_CHECK_MPI(mpi().Op_create(&nan_max_op, 1, &max_op_), "MPI_Op_create");
    KEEL_CHECK_MPI(mpi().Op_create(&bf16_sum_op, 1, &bf16_sum_), "MPI_Op_create");
  }
  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  std::string backend() const override { return "mpi"; }

  void all_reduce_sum(Tensor& t) override { reduce(t, mpi().sum, false, "all_reduce_sum"); }
  void all_reduce_mean(Tensor& t) override {
    if (!is_floating(t.dtype()))
      throw DTypeError("all_reduce_mean", std::string("a mean needs a floating tensor, got ") + dtype_name(t.dtype()));
    reduce(t, mpi().sum, true, "all_reduce_mean");
  }
  void all_reduce_max(Tensor& t) override { reduce(t, max_op_, false, "all_reduce_max"); }

  std::unique_ptr<Work> all_reduce_mean_async(Tensor& t) override {
    if (!is_floating(t.dtype()))
      throw DTypeError("all_reduce_mean", std::string("a mean needs a floating tensor, got ") + dtype_name(t.dtype()));
    Tensor buf = staged(t, reduce_dtype(t.dtype(), true));
    auto w = std::make_unique<MpiWork>(t, buf, rank_, world_);
    KEEL_CHECK_MPI(mpi().Iallreduce(MPI_IN_PLACE, buf.raw_data(), int(buf.numel()), mpi_type(buf.dtype()),
                                    sum_op(buf), mpi().comm_world, &w->req),
                   "MPI_Iallreduce");
    return w;
  }

  void broadcast(Tensor& t, int root) override {
    if (root < 0 || root >= world_)
      throw ValueError("broadcast", "root " + std::to_string(root) + " is outside [0, " + std::to_string(world_) + ")");
    Tensor buf = staged(t, t.dtype());
    MPI_Request req;
    KEEL_CHECK_MPI(mpi().Ibcast(buf.raw_data(), int(buf.numel() * dtype_size(buf.dtype())), mpi().byte, root,
                                mpi().comm_world, &req),
                   "MPI_Ibcast");
    wait_for(req, rank_, "broadcast");
    write_back(t, buf);
  }

  void all_gather(const Tensor& in, Tensor& out) override {
    if (out.dtype() != in.dtype() || out.numel() != in.numel() * world_ || !out.is_contiguous())
      throw ShapeError("all_gather", "out must be contiguous with world_size * numel(in) = " +
                                         std::to_string(in.numel() * world_) + " elements of in's dtype, got " +
                                         shape_str(out.shape()));
    Tensor src = staged(in, in.dtype());
    Tensor dst = staged(out, out.dtype());
    const int bytes = int(src.numel() * dtype_size(src.dtype()));
    MPI_Request req;
    KEEL_CHECK_MPI(mpi().Iallgather(src.raw_data(), bytes, mpi().byte, dst.raw_data(), bytes, mpi().byte,
                                    mpi().comm_world, &req),
                   "MPI_Iallgather");
    wait_for(req, rank_, "all_gather");
    write_back(out, dst);
  }
  using Communicator::all_gather;

  void reduce_scatter_sum(const Tensor& in, Tensor& out) override {
    const int64_t n = out.numel();
    if (!in.is_contiguous() || in.numel() != n * world_ || in.dtype() != out.dtype())
      throw ShapeError("reduce_scatter_sum", "in must be contiguous with world_size * numel(out) = " +
                                                 std::to_string(n * world_) + " elements of out's dtype, got " +
                                                 shape_str(in.shape()));
    const DType rd = reduce_dtype(in.dtype(), true);
    Tensor src = staged(in, rd);
    Tensor dst = empty(out.shape(), {rd, Device::cpu()});
    MPI_Request req;
    KEEL_CHECK_MPI(mpi().Ireduce_scatter_block(src.raw_data(), dst.raw_data(), int(n), mpi_type(rd), sum_op(src),
                                               mpi().comm_world, &req),
                   "MPI_Ireduce_scatter_block");
    wait_for(req, rank_, "reduce_scatter_sum");
    write_back(out, dst);
  }

  void barrier() override {
    MPI_Request req;
    KEEL_CHECK_MPI(mpi().Ibarrier(mpi().comm_world, &req), "MPI_Ibarrier");
    wait_for(req, rank_, "barrier");
  }

 private:
  MPI_Op sum_op(const Tensor& buf) const { return buf.dtype() == DType::bf16 ? bf16_sum_ : mpi().sum; }
  void reduce(Tensor& t, MPI_Op op, bool mean, const char* name) {
    const bool sum = op == mpi().sum;
    Tensor buf = staged(t, reduce_dtype(t.dtype(), sum));
    if (sum) op = sum_op(buf);
    MPI_Request req;
    KEEL_CHECK_MPI(mpi().Iallreduce(MPI_IN_PLACE, buf.raw_data(), int(buf.numel()), mpi_type(buf.dtype()), op,
                                    mpi().comm_world, &req),
                   name);
    wait_for(req, rank_, name);
    if (mean) divide(buf, world_);
    write_back(t, buf);
  }

  int rank_ = 0, world_ = 1;
  MPI_Op max_op_{}, bf16_sum_{};
};

}  // namespace

std::shared_ptr<Communicator> make_mpi_communicator() {
  static std::shared_ptr<Communicator> comm;
  if (comm) return comm;
  int initialized = 0;
  KEEL_CHECK_MPI(mpi().Initialized(&initialized), "MPI_Initialized");
  if (!initialized) {
    int provided = 0;
    KEEL_CHECK_MPI(mpi().Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
    // Errors come back as codes (turned into exceptions) rather than killing the process.
    KEEL_CHECK_MPI(mpi().Comm_set_errhandler(mpi().comm_world, mpi().errors_return), "MPI_Comm_set_errhandler");
  }
  comm = std::make_shared<MpiCommunicator>();
  return comm;
}

void require_mpi() { mpi_library(); }

// The shutdown paths below run while the process is exiting or aborting: they check state
// instead of throwing, since there is nobody left to report an error to. A process that never
// loaded MPI never initialised it, and must not load it now (it may not exist).
void mpi_finalize() {
  const MpiLibrary* lib = mpi_library_if_loaded();
  int initialized = 0, finalized = 0;
  if (lib) lib->Initialized(&initialized), lib->Finalized(&finalized);
  if (initialized && !finalized) lib->Finalize();
}

void mpi_abort(int code) {
  const MpiLibrary* lib = mpi_library_if_loaded();
  int initialized = 0, finalized = 0;
  if (lib) lib->Initialized(&initialized), lib->Finalized(&finalized);
  if (initialized && !finalized) lib->Abort(lib->comm_world, code);
}

#endif

}  // namespace keel
