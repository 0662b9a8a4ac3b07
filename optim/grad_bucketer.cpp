#include "optim/grad_bucketer.h"

#include "core/copy.h"
#include "core/factory.h"

namespace keel::optim {

namespace {
// Elements [offset, offset + numel) of a 1-d tensor, shaped like `like`.
Tensor slice_of(const Tensor& flat, int64_t offset, const Shape& like) {
  return flat.as_strided(like, contiguous_strides(like), flat.offset() + offset);
}
}  // namespace

GradBucketer::GradBucketer(std::shared_ptr<Communicator> comm, std::vector<Tensor> params, size_t bucket_bytes,
                           DType reduce_dtype)
    : comm_(std::move(comm)), params_(std::move(params)), reduce_dtype_(reduce_dtype) {
  if (bucket_bytes == 0) throw ValueError("GradBucketer", "bucket_bytes must be > 0");
  if (reduce_dtype_ != DType::f32 && reduce_dtype_ != DType::bf16)
    throw DTypeError("GradBucketer", std::string("gradients are reduced in f32 or bf16, not ") + dtype_name(reduce_dtype_));
  size_t bytes = 0;
  for (size_t k = params_.size(); k-- > 0;) {
    const Tensor& p = params_[k];
    if (!is_floating(p.dtype()))
      throw DTypeError("GradBucketer", std::string("parameter of dtype ") + dtype_name(p.dtype()));
    if (p.device() != params_.back().device() || p.dtype() != params_.back().dtype())
      throw DeviceError("GradBucketer", "parameters must share one device and dtype",
                        "move the model to one device and dtype first");
    size_t nbytes = size_t(p.numel()) * dtype_size(reduce_dtype_);
    if (buckets_.empty() || (bytes + nbytes > bucket_bytes && !buckets_.back().members.empty())) {
      buckets_.emplace_back();
      bytes = 0;
    }
    buckets_.back().members.push_back(k);
    buckets_.back().numel += p.numel();
    bytes += nbytes;
    bucket_of_[p.impl_ptr().get()] = buckets_.size() - 1;
  }
}

std::unique_ptr<GradReadyHookGuard> GradBucketer::hook() {
  in_backward_ = true;
  return std::make_unique<GradReadyHookGuard>([this](const std::shared_ptr<TensorImpl>& leaf) { on_ready(leaf); });
}

void GradBucketer::on_ready(const std::shared_ptr<TensorImpl>& leaf) {
  if (comm_->world_size() == 1) return;
  auto it = bucket_of_.find(leaf.get());
  if (it == bucket_of_.end()) return;  // not one of ours (an input that required grad)
  ++buckets_[it->second].ready;
  start_ready_in_order();
  // Let the backend advance what is in flight (MPI progresses only inside MPI calls).
  for (size_t k = 0; k < next_; ++k)
    if (buckets_[k].work) buckets_[k].work->test();
}

void GradBucketer::start_ready_in_order() {
  while (next_ < buckets_.size() && buckets_[next_].ready == buckets_[next_].members.size()) {
    start(buckets_[next_]);
    ++next_;
    if (in_backward_) ++started_now_;
  }
}

void GradBucketer::start(Bucket& b) {
  const Tensor& first = params_[b.members.front()];
  b.flat = zeros({b.numel}, {reduce_dtype_, first.device()});
  int64_t off = 0;
  for (size_t k : b.members) {
    Tensor g = params_[k].grad();
    if (g.defined()) {
      Tensor dst = slice_of(b.flat, off, params_[k].shape());
      copy_(dst, g);
    }
    off += params_[k].numel();
  }
  b.work = comm_->all_reduce_mean_async(b.flat);
}

void GradBucketer::finish() {
  in_backward_ = false;
  if (comm_->world_size() > 1) {
    // Parameters the backward never reached still count: start the rest, in order.
    for (Bucket& b : buckets_) b.ready = b.members.size();
    start_ready_in_order();
    for (Bucket& b : buckets_) {
      b.work->wait();
      int64_t off = 0;
      for (size_t k : b.members) {
        Tensor g = params_[k].grad();
        if (g.defined()) copy_(g, slice_of(b.flat, off, params_[k].shape()));
        off += params_[k].numel();
      }
      b.work.reset();
      b.flat = {};
    }
  }
  started_in_backward_ = started_now_;
  started_now_ = 0;
  next_ = 0;
  for (Bucket& b : buckets_) b.ready = 0;
}

}  // namespace keel::optim
