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

#include "core/dist/comm.h"

namespace keel {

// Joins `world` processes: rank 0 listens on `port` (all interfaces), the others connect to
// host:port, retrying until it is up. Each side waits at most timeout_s for the rendezvous and
// for every later collective; past it (a rank that never came, or died) ConfigError names the
// address and what is missing. host is a name or an address (MASTER_ADDR).
std::shared_ptr<Communicator> make_tcp_bootstrap(const std::string& host, int port, int rank, int world,
                                                 double timeout_s = 30.0);

// Rank 0's socket for a rendezvous whose port must be known before the others start, so that
// it can travel to them with other data: a free port, listening on every interface from
// construction on (ranks that connect early wait in its backlog). NCCL's unique id carries its
// bootstrap address that way; the emulated device's NCCL (core/cuda/emu/nccl.cpp) does the same.
class TcpListener {
 public:
  TcpListener();  // ConfigError when no socket can listen
  ~TcpListener();
  TcpListener(const TcpListener&) = delete;
  TcpListener& operator=(const TcpListener&) = delete;
  int port() const { return port_; }

 private:
  friend std::shared_ptr<Communicator> make_tcp_bootstrap(std::unique_ptr<TcpListener>, int, double);
  int fd_ = -1, port_ = 0;
};

// Rank 0 of `world` on a listener made earlier: accepts the others as the form above does.
std::shared_ptr<Communicator> make_tcp_bootstrap(std::unique_ptr<TcpListener> listener, int world,
                                                 double timeout_s = 30.0);

}  // namespace keel
