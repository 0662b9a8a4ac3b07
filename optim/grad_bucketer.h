// Gradient all-reduce overlapped with the backward pass (what PyTorch DDP calls a Reducer).
//
// The parameters are cut once into buckets of about bucket_bytes, in reverse parameter order
// (the backward produces the last layers' gradients first). During the backward of the last
// micro-batch of a step, the autograd engine reports each parameter whose gradient is final
// (GradReadyHookGuard); when every gradient of a bucket is in, the bucket is packed and its
// mean over ranks started with all_reduce_mean_async, while the backward goes on with earlier
// layers. finish() reduces whatever the backward did not reach, waits for every bucket and
// copies the means back into the gradients.
//
// Buckets are started strictly in bucket order, so every rank issues the same collectives in
// the same order (which MPI and NCCL require) whatever order its hooks fire in.
//
//   GradBucketer sync(comm, params);
//   { auto hook = sync.hook(); loss.backward(); }   // buckets start inside backward
//   sync.finish();                                   // every gradient is now the mean
#pragma once

#include <cstddef>
#include <memory>
#include <unordered_map>
#include <vector>

#include "core/autograd.h"
#include "core/dist/comm.h"
#include "optim/grad_sync.h"

namespace keel::optim {

class GradBucketer {
 public:
  // params: the same list in the same order on every rank; floating, one device.
  // reduce_dtype: the dtype the buckets are packed and reduced in (f32, or bf16 for half the
  // bytes); the means are copied back into the gradients in their own dtype (f32 masters).
  GradBucketer(std::shared_ptr<Communicator> comm, std::vector<Tensor> params,
               size_t bucket_bytes = kDefaultBucketBytes, DType reduce_dtype = DType::f32);

  // Installs the engine hook for the backward passes run while the guard lives.
  std::unique_ptr<GradReadyHookGuard> hook();
  // Completes the reduction of every bucket (a no-op for world size 1).
  void finish();

  size_t num_buckets() const { return buckets_.size(); }
  // Buckets started so far in this step (before finish(): those the backward started).
  size_t started() const { return next_; }
  // Of the buckets of the last finish(), how many were started inside the backward pass:
  // the observable proof of overlap (tests and the run log read it).
  size_t started_in_backward() const { return started_in_backward_; }

 private:
  struct Bucket {
    std::vector<size_t> members;  // indices into params_
    int64_t numel = 0;
    size_t ready = 0;
    Tensor flat;                  // packed gradients, reduced in place
    std::unique_ptr<Communicator::Work> work;
  };
  void on_ready(const std::shared_ptr<TensorImpl>& leaf);
  void start(Bucket& b);
  void start_ready_in_order();

  std::shared_ptr<Communicator> comm_;
  std::vector<Tensor> params_;
  DType reduce_dtype_;
  std::vector<Bucket> buckets_;
  std::unordered_map<TensorImpl*, size_t> bucket_of_;  // parameter -> its bucket
  size_t next_ = 0;                                     // the next bucket to start
  size_t started_in_backward_ = 0, started_now_ = 0;
  bool in_backward_ = false;
};

}  // namespace keel::optim
