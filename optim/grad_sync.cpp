#include "optim/grad_sync.h"

#include "core/copy.h"
#include "core/factory.h"

namespace keel::optim {

namespace {

// Views of a 1-d bucket: elements [offset, offset + numel) shaped like `like`.
Tensor slice_of(const Tensor& bucket, int64_t offset, const Shape& like) {
  return bucket.as_strided(like, contiguous_strides(like), bucket.offset() + offset);
}

// grads: defined gradients, all on one device with one dtype, together at most ~one bucket.
void reduce_bucket(Communicator& comm, const std::vector<Tensor>& grads) {
  if (grads.size() == 1 && grads[0].is_contiguous()) {  // nothing to pack
    Tensor g = grads[0];
    comm.all_reduce_mean(g);
    return;
  }
  int64_t total = 0;
  for (const Tensor& g : grads) total += g.numel();
  Tensor bucket = empty({total}, {grads[0].dtype(), grads[0].device()});
  int64_t off = 0;
  for (const Tensor& g : grads) {
    Tensor dst = slice_of(bucket, off, g.shape());
    copy_(dst, g);
    off += g.numel();
  }
  comm.all_reduce_mean(bucket);
  off = 0;
  for (const Tensor& g : grads) {
    Tensor dst = g;
    copy_(dst, slice_of(bucket, off, g.shape()));
    off += g.numel();
  }
}

}  // namespace

void allreduce_gradients(Communicator& comm, const std::vector<Tensor>& params, size_t bucket_bytes) {
  if (comm.world_size() == 1) return;
  if (bucket_bytes == 0) throw ValueError("allreduce_gradients", "bucket_bytes must be > 0");
  std::vector<Tensor> bucket;
  size_t bytes = 0;
  auto flush = [&] {
    if (!bucket.empty()) reduce_bucket(comm, bucket);
    bucket.clear();
    bytes = 0;
  };
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    if (!is_floating(g.dtype()))
      throw DTypeError("allreduce_gradients", std::string("gradient of dtype ") + dtype_name(g.dtype()));
    size_t nbytes = static_cast<size_t>(g.numel()) * dtype_size(g.dtype());
    // A new bucket when this gradient does not fit or cannot share the bucket's buffer.
    if (!bucket.empty() && (bytes + nbytes > bucket_bytes || g.dtype() != bucket[0].dtype() ||
                            g.device() != bucket[0].device()))
      flush();
    bucket.push_back(g);
    bytes += nbytes;
  }
  flush();
}

}  // namespace keel::optim
