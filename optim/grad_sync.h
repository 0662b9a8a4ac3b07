// Data-parallel gradient synchronisation: after backward on each rank, every gradient becomes
// the mean of that gradient over all ranks, so that identical optimizers on identical
// parameters stay identical.
//
// Gradients are packed into contiguous buckets of about bucket_bytes (25 MB, as PyTorch DDP),
// one all-reduce per bucket, then copied back: a few large collectives are far cheaper than
// hundreds of small ones (each NCCL call has a fixed latency of several microseconds).
// Buckets group gradients of one device and dtype, in parameter order.
#pragma once

#include <cstddef>
#include <vector>

#include "core/dist/comm.h"
#include "core/named_tensors.h"
#include "core/tensor.h"
#include "optim/defaults.h"

namespace keel::optim {

// params: the same list, in the same order, with the same set of defined gradients on every
// rank (a mismatch raises ConfigError on all ranks through the communicator's checks).
// Parameters without a gradient are skipped. World size 1 returns at once.
void allreduce_gradients(Communicator& comm, const std::vector<Tensor>& params,
                         size_t bucket_bytes = kDefaultBucketBytes);
inline void allreduce_gradients(Communicator& comm, const NamedTensors& params,
                                size_t bucket_bytes = kDefaultBucketBytes) {
  allreduce_gradients(comm, tensors_of(params), bucket_bytes);
}

}  // namespace keel::optim
