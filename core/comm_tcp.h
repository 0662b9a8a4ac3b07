// A TCP rendezvous for launches without MPI (torchrun's RANK, WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT): the processes find each other through rank 0, which listens on MASTER_PORT.
//
// It is a bootstrap, not a training backend: what NCCL needs to start (rank 0's unique id
// broadcast to every rank) and a barrier. Every collective is a star through rank 0: each
// rank sends its bytes, keyed by its rank, and receives every rank's. Reductions are computed
// from the gathered values in rank order (f64 for floats, i64 for integers), so every rank
// gets the same bits; fine for a few numbers, slow for tensors of any size.
#pragma once

#include <memory>
#include <string>

#include "core/comm.h"

namespace keel {

// Joins `world` processes: rank 0 listens on `port` (all interfaces), the others connect to
// host:port, retrying until it is up. Each side waits at most timeout_s for the rendezvous and
// for every later collective; past it (a rank that never came, or died) ConfigError names the
// address and what is missing. host is a name or an address (MASTER_ADDR).
std::shared_ptr<Communicator> make_tcp_bootstrap(const std::string& host, int port, int rank, int world,
                                                 double timeout_s = 30.0);

}  // namespace keel
