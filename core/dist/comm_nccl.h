// The NCCL communicator: one rank per GPU, collectives on device tensors on a stream of its
// own, ordered after the compute stream's work with CUDA events (and the compute stream after
// it), so a bucket all-reduce runs while the backward keeps computing.
//
// Plain C++ (no NCCL or CUDA headers) so that code above core compiles with or without CUDA.
// In a build without CUDA make_nccl_communicator raises DeviceError.
#pragma once

#include <memory>

#include "core/dist/comm.h"

namespace keel {

// Joins the ranks of `bootstrap` (the MPI world) on GPU `device`: rank 0 makes the NCCL
// unique id and broadcasts it over `bootstrap`, then every rank calls ncclCommInitRank.
// A collective that does not complete within KEEL_DIST_TIMEOUT seconds (default 30) aborts
// the NCCL communicator (ncclCommAbort) and raises CudaError, so a lost rank cannot hang
// the others. Host tensors are staged through the device. all_reduce_max uses the
// NaN-propagating default of Communicator (NCCL's max is not specified for NaN).
std::shared_ptr<Communicator> make_nccl_communicator(Communicator& bootstrap, int device);

}  // namespace keel
