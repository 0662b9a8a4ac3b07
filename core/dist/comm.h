// Communicators: the collective operations data-parallel training needs (all-reduce,
// broadcast, all-gather, barrier), behind one interface so that the trainer does not care
// whether ranks are threads of this process (CPU backend, tests), separate processes joined
// by MPI (core/dist/comm_mpi.h), processes on GPUs joined by NCCL (core/dist/comm_nccl.h) or just
// one rank (LocalCommunicator).
//
// Rules every backend follows, NCCL-style:
//  - every rank calls the same collectives in the same order with tensors of the same
//    numel and dtype (a mismatch is detected where the backend can and raised on every rank);
//  - operations are in place on the caller's tensor, which may live on any device (the CPU
//    backend stages device tensors through the host; NCCL will reduce device buffers);
//  - results are identical (bit for bit) on every rank.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace keel {

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual std::string backend() const = 0;  // "local", "threads", "mpi", "nccl"

  // t (any shape; contiguous or not) <- elementwise sum of t over all ranks.
  virtual void all_reduce_sum(Tensor& t) = 0;
  // t <- elementwise mean over ranks (floating dtypes only).
  virtual void all_reduce_mean(Tensor& t) = 0;
  // t <- root's t on every rank.
  virtual void broadcast(Tensor& t, int root) = 0;
  // in (any shape S) -> out, contiguous with numel world*numel(S), rank r's values at
  // [r*numel(S), (r+1)*numel(S)): the layout NCCL's all-gather writes. Same dtype.
  virtual void all_gather(const Tensor& in, Tensor& out) = 0;
  // Returns once every rank has called it.
  virtual void barrier() = 0;

  // t <- elementwise max over ranks, where a NaN on any rank wins (MPI_MAX and a plain
  // std::max would drop it, hiding the rank that diverged). Default: all_gather, then a
  // local max in rank order, which every rank computes identically.
  virtual void all_reduce_max(Tensor& t);
  // in (world * n, contiguous) -> out (n): out = sum over ranks of their chunk
  // in[rank*n, (rank+1)*n). What ZeRO needs. Default: all_reduce_sum of a copy, then a slice.
  virtual void reduce_scatter_sum(const Tensor& in, Tensor& out);

  // A collective in flight: wait() returns once its result is in the tensor it was given
  // (which the caller must keep alive and untouched until then).
  class Work {
   public:
    virtual ~Work() = default;
    virtual void wait() = 0;
    // Lets the backend advance the operation without blocking (MPI progresses non-blocking
    // collectives only inside MPI calls); true once it is complete.
    virtual bool test() { return false; }
  };
  // Starts t <- mean of t over ranks and returns at once where the backend can (MPI's
  // MPI_Iallreduce, NCCL on its own stream), so a caller can go on computing. t must be
  // contiguous. Default: the blocking all_reduce_mean, returning finished work.
  virtual std::unique_ptr<Work> all_reduce_mean_async(Tensor& t);

  // Convenience: in (S) -> (world, S...) on in's device.
  Tensor all_gather(const Tensor& in);
};

// World size 1: every collective leaves its tensor as it is (all_gather copies).
class LocalCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  std::string backend() const override { return "local"; }
  void all_reduce_sum(Tensor& t) override;
  void all_reduce_mean(Tensor& t) override;
  void broadcast(Tensor& t, int root) override;
  void all_gather(const Tensor& in, Tensor& out) override;
  using Communicator::all_gather;
  void barrier() override {}
};

// One communicator per rank for `world_size` threads of this process, sharing memory.
// Hand communicator r to the thread playing rank r. Reductions add the ranks' values in
// rank order (0, 1, ..., world-1) in f64 (i64 for integers) and round once, so results do not
// depend on thread timing and are bit-reproducible. A collective blocks until every rank has
// entered it: a rank that never calls it hangs the others, exactly as with NCCL.
std::vector<std::shared_ptr<Communicator>> make_thread_group(int world_size);

}  // namespace keel
