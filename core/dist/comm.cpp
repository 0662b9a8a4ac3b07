#include "core/dist/comm.h"

#include <barrier>
#include <cstring>
#include <type_traits>

#include "core/copy.h"
#include "core/factory.h"

namespace keel {

namespace {

// The packed host copy a collective reads from (t itself when it is already one). Detached:
// collectives are not differentiable and must not record autograd history.
Tensor host_packed(const Tensor& t) {
  Tensor d = t.detach();
  if (d.device().is_cpu() && d.is_contiguous()) return d;
  Tensor out = empty(d.shape(), {d.dtype(), Device::cpu()});
  copy_(out, d);
  return out;
}

// Writes a packed host result into t, whatever t's layout and device.
void write_back(Tensor& t, const Tensor& host_result) {
  Tensor d = t.detach();
  if (d.device().is_cpu() && d.is_contiguous()) {
    std::memcpy(d.raw_data(), host_result.raw_data(), d.numel() * dtype_size(d.dtype()));
    return;
  }
  copy_(d, host_result.as_strided(d.shape(), contiguous_strides(d.shape()), 0));
}

std::string mean_dtype_error(const Tensor& t) {
  if (is_floating(t.dtype())) return {};
  return std::string("a mean needs a floating tensor, got ") + dtype_name(t.dtype());
}
constexpr const char* kMeanHint = "use all_reduce_sum for integers and divide yourself";

void check_gather_out(const Tensor& in, const Tensor& out, int world, std::string* err) {
  if (out.dtype() != in.dtype())
    *err = std::string("out has dtype ") + dtype_name(out.dtype()) + ", in has " + dtype_name(in.dtype());
  else if (out.numel() != in.numel() * world || !out.is_contiguous())
    *err = "out must be contiguous with world_size * numel(in) = " + std::to_string(in.numel() * world) +
           " elements, got shape " + shape_str(out.shape());
  else if (out.device() != in.device())
    *err = "out is on " + out.device().str() + ", in on " + in.device().str();
}

enum class Op { all_reduce_sum, all_reduce_mean, broadcast, all_gather, barrier };
const char* op_name(Op op) {
  switch (op) {
    case Op::all_reduce_sum: return "all_reduce_sum";
    case Op::all_reduce_mean: return "all_reduce_mean";
    case Op::broadcast: return "broadcast";
    case Op::all_gather: return "all_gather";
    case Op::barrier: return "barrier";
  }
  return "?";
}

// What each rank publishes on entering a collective.
struct Slot {
  Op op = Op::barrier;
  const void* data = nullptr;  // packed host input
  int64_t numel = 0;
  DType dtype = DType::f32;
  int root = 0;
  std::string local_error;  // an argument error this rank found on its own...
  bool local_dtype_error = false;  // ...raised as DTypeError (else ShapeError)
};

struct Group {
  explicit Group(int w) : world(w), sync(w), slots(w) {}
  int world;
  std::barrier<> sync;
  std::vector<Slot> slots;
};

class ThreadCommunicator final : public Communicator {
 public:
  ThreadCommunicator(std::shared_ptr<Group> g, int rank) : g_(std::move(g)), rank_(rank) {}
  int rank() const override { return rank_; }
  int world_size() const override { return g_->world; }
  std::string backend() const override { return "threads"; }

  void all_reduce_sum(Tensor& t) override { reduce(t, Op::all_reduce_sum); }
  void all_reduce_mean(Tensor& t) override { reduce(t, Op::all_reduce_mean); }

  void broadcast(Tensor& t, int root) override {
    Tensor in = host_packed(t);
    Tensor res;
    collective({Op::broadcast, in.raw_data(), in.numel(), in.dtype(), root, {}}, [&] {
      if (rank_ == root) return;
      res = empty(in.shape(), {in.dtype(), Device::cpu()});
      std::memcpy(res.raw_data(), g_->slots[root].data, in.numel() * dtype_size(in.dtype()));
    });
    if (res.defined()) write_back(t, res);
  }

  void all_gather(const Tensor& in_t, Tensor& out) override {
    Tensor in = host_packed(in_t);
    std::string err;
    check_gather_out(in_t, out, g_->world, &err);
    Tensor res = empty({in.numel() * g_->world}, {in.dtype(), Device::cpu()});
    collective({Op::all_gather, in.raw_data(), in.numel(), in.dtype(), 0, err}, [&] {
      size_t nbytes = in.numel() * dtype_size(in.dtype());
      for (int r = 0; r < g_->world; ++r)
        std::memcpy(static_cast<char*>(res.raw_data()) + r * nbytes, g_->slots[r].data, nbytes);
    });
    write_back(out, res);
  }
  using Communicator::all_gather;

  void barrier() override { collective({Op::barrier, nullptr, 0, DType::f32, 0, {}}, [] {}); }

 private:
  void reduce(Tensor& t, Op op) {
    Tensor in = host_packed(t);
    Tensor res = empty(in.shape(), {in.dtype(), Device::cpu()});
    std::string err = op == Op::all_reduce_mean ? mean_dtype_error(t) : std::string();
    collective({op, in.raw_data(), in.numel(), in.dtype(), 0, err, true}, [&] {
      visit_dtype(in.dtype(), [&]<typename T>() {
        // Integers add exactly in i64; floats in f64, rounded once: the order is fixed (rank 0
        // first), so every rank computes the same bits.
        using Acc = std::conditional_t<std::is_integral_v<T>, int64_t, double>;
        T* out = res.data<T>();
        const int world = g_->world;
        for (int64_t i = 0; i < in.numel(); ++i) {
          Acc s = 0;
          for (int r = 0; r < world; ++r) s += static_cast<Acc>(static_cast<const T*>(g_->slots[r].data)[i]);
          if constexpr (std::is_integral_v<T>) {
            out[i] = static_cast<T>(s);
          } else {
            double v = op == Op::all_reduce_mean ? s / world : s;
            out[i] = static_cast<T>(static_cast<std::conditional_t<std::is_same_v<T, double>, double, float>>(v));
          }
        }
      });
    });
    write_back(t, res);
  }

  // Publish, wait for everyone, validate (every rank sees the same slots, so every rank
  // reaches the same verdict and nobody is left waiting), run `work`, and wait again so that
  // no rank reuses or frees its published buffer while another still reads it.
  template <typename F>
  void collective(Slot mine, F&& work) {
    g_->slots[rank_] = std::move(mine);
    g_->sync.arrive_and_wait();
    int bad_rank = -1;
    std::string err = validate(&bad_rank);
    // Read everything the error needs now: after the next barrier other ranks may already be
    // publishing their next collective.
    const char* op = op_name(g_->slots[rank_].op);
    const bool dtype_error = bad_rank >= 0 && g_->slots[bad_rank].local_dtype_error;
    if (err.empty()) {
      try {
        work();
      } catch (...) {
        g_->sync.arrive_and_wait();
        throw;
      }
    }
    g_->sync.arrive_and_wait();
    if (err.empty()) return;
    if (bad_rank >= 0) {  // an argument error of one rank, raised on all
      if (dtype_error) throw DTypeError(op, err, kMeanHint);
      throw ShapeError(op, err);
    }
    throw ConfigError(op, err + " (seen by rank " + std::to_string(rank_) + ")",
                      "every rank must call the same collectives in the same order with equal-sized tensors");
  }

  std::string validate(int* bad_rank) const {
    const Slot& a = g_->slots[0];
    for (int r = 0; r < g_->world; ++r) {
      const Slot& s = g_->slots[r];
      if (!s.local_error.empty()) {
        *bad_rank = r;
        return "rank " + std::to_string(r) + ": " + s.local_error;
      }
      if (s.op != a.op)
        return std::string("rank 0 called ") + op_name(a.op) + " but rank " + std::to_string(r) + " called " +
               op_name(s.op);
      if (s.numel != a.numel || s.dtype != a.dtype)
        return "rank 0 passed " + std::to_string(a.numel) + " " + dtype_name(a.dtype) + " elements, rank " +
               std::to_string(r) + " passed " + std::to_string(s.numel) + " " + dtype_name(s.dtype);
      if (s.root != a.root) return "ranks disagree on the broadcast root";
    }
    if (a.root < 0 || a.root >= g_->world)
      return "broadcast root " + std::to_string(a.root) + " is outside [0, " + std::to_string(g_->world) + ")";
    return {};
  }

  std::shared_ptr<Group> g_;
  int rank_;
};

// Work that finished before it was returned.
class DoneWork final : public Communicator::Work {
 public:
  void wait() override {}
  bool test() override { return true; }
};

}  // namespace

void Communicator::all_reduce_max(Tensor& t) {
  Tensor gathered = all_gather(t);  // (world, S...)
  Tensor host = host_packed(gathered);
  Tensor res = empty(t.shape(), {t.dtype(), Device::cpu()});
  const int64_t n = t.numel();
  visit_dtype(t.dtype(), [&]<typename T>() {
    const T* g = host.data<T>();
    T* out = res.data<T>();
    for (int64_t i = 0; i < n; ++i) {
      T m = g[i];
      for (int r = 1; r < world_size(); ++r) {
        T v = g[int64_t(r) * n + i];
        if constexpr (!std::is_integral_v<T>) {
          if (v != v) m = v;  // NaN (v != v also works for bf16/f16 wrappers)
          if (m != m) continue;
        }
        if (v > m) m = v;
      }
      out[i] = m;
    }
  });
  write_back(t, res);
}

void Communicator::reduce_scatter_sum(const Tensor& in, Tensor& out) {
  const int64_t n = out.numel();
  if (!in.is_contiguous() || in.numel() != n * world_size() || in.dtype() != out.dtype())
    throw ShapeError("reduce_scatter_sum", "in must be contiguous with world_size * numel(out) = " +
                                               std::to_string(n * world_size()) + " elements of out's dtype, got " +
                                               shape_str(in.shape()));
  Tensor all = in.detach().clone();
  all_reduce_sum(all);
  copy_(out, all.as_strided(out.shape(), contiguous_strides(out.shape()), all.offset() + rank() * n));
}

std::unique_ptr<Communicator::Work> Communicator::all_reduce_mean_async(Tensor& t) {
  all_reduce_mean(t);
  return std::make_unique<DoneWork>();
}

Tensor Communicator::all_gather(const Tensor& in) {
  Shape s{world_size()};
  s.insert(s.end(), in.shape().begin(), in.shape().end());
  Tensor out = empty(s, {in.dtype(), in.device()});
  all_gather(in, out);
  return out;
}

void LocalCommunicator::all_reduce_sum(Tensor&) {}
void LocalCommunicator::all_reduce_mean(Tensor& t) {
  std::string err = mean_dtype_error(t);
  if (!err.empty()) throw DTypeError("all_reduce_mean", err, kMeanHint);
}

void LocalCommunicator::broadcast(Tensor&, int root) {
  if (root != 0)
    throw ValueError("broadcast", "root " + std::to_string(root) + " does not exist in a world of 1",
                     "use root 0");
}

void LocalCommunicator::all_gather(const Tensor& in, Tensor& out) {
  std::string err;
  check_gather_out(in, out, 1, &err);
  if (!err.empty()) throw ShapeError("all_gather", err);
  Tensor o = out.detach();
  Tensor src = in.detach().contiguous();
  copy_(o, src.as_strided(o.shape(), contiguous_strides(o.shape()), src.offset()));
}

std::vector<std::shared_ptr<Communicator>> make_thread_group(int world_size) {
  if (world_size < 1)
    throw ConfigError("make_thread_group", "world size must be at least 1, got " + std::to_string(world_size));
  auto g = std::make_shared<Group>(world_size);
  std::vector<std::shared_ptr<Communicator>> comms;
  for (int r = 0; r < world_size; ++r) comms.push_back(std::make_shared<ThreadCommunicator>(g, r));
  return comms;
}

}  // namespace keel
