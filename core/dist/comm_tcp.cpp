// TCP rendezvous (see comm_tcp.h): a star of blocking sockets through rank 0.
//
// Wire format of one collective: each rank r > 0 sends [i64 r][i64 n][n bytes] to rank 0;
// rank 0 answers each with the world's payloads concatenated in rank order, [i64 world*n][bytes].
// Every rank contributes the same n (the collectives' contract), which rank 0 checks.
#include "core/dist/comm_tcp.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>
#include <type_traits>
#include <vector>

#include "core/copy.h"
#include "core/factory.h"

namespace keel {

namespace {

using Clock = std::chrono::steady_clock;

// A socket listening on `port` (0: a free one) of every interface, IPv6 and IPv4 where the
// system has both; -1 with *why set when that fails.
int listen_on(int port, std::string* why) {
  int fd = ::socket(AF_INET6, SOCK_STREAM, 0);
  const bool v6 = fd >= 0;
  if (!v6) fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) {
    *why = std::string("cannot open a socket: ") + std::strerror(errno);
    return -1;
  }
  int one = 1, zero = 0, rc;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (v6) {
    ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));  // IPv4 clients too
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_any;
    a.sin6_port = htons(uint16_t(port));
    rc = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  } else {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons(uint16_t(port));
    rc = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  }
  // The backlog holds every rank that connects before rank 0 accepts (a few hundred at most).
  if (rc != 0 || ::listen(fd, 1024) != 0) {
    *why = std::string("rank 0 cannot listen on port ") + std::to_string(port) + ": " + std::strerror(errno) +
           " (another job on this MASTER_PORT?)";
    ::close(fd);
    return -1;
  }
  return fd;
}

class TcpCommunicator final : public Communicator {
 public:
  TcpCommunicator(const std::string& host, int port, int rank, int world, double timeout_s)
      : host_(host), port_(port), rank_(rank), world_(world), timeout_(timeout_s) {
    if (world < 1 || rank < 0 || rank >= world)
      throw ConfigError("tcp rendezvous", "rank " + std::to_string(rank) + " does not fit a world of " +
                                              std::to_string(world));
    if (port < 1 || port > 65535)
      throw ConfigError("tcp rendezvous", "MASTER_PORT " + std::to_string(port) + " is not a TCP port (1-65535)");
    if (world == 1) return;
    if (rank == 0) accept_peers(open_listener(port));
    else connect_to_root();
  }
  // Rank 0 on a socket that already listens (TcpListener).
  TcpCommunicator(int listen_fd, int port, int world, double timeout_s)
      : host_("0.0.0.0"), port_(port), rank_(0), world_(world), timeout_(timeout_s) {
    if (world < 1) {
      ::close(listen_fd);
      throw ConfigError("tcp rendezvous", "a world of " + std::to_string(world) + " ranks");
    }
    accept_peers(listen_fd);
  }
  ~TcpCommunicator() override {
    for (int fd : peers_)
      if (fd >= 0) ::close(fd);
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  std::string backend() const override { return "tcp"; }

  void all_gather(const Tensor& in, Tensor& out) override {
    if (out.dtype() != in.dtype() || out.numel() != in.numel() * world_ || !out.is_contiguous())
      throw ShapeError("all_gather", "out must be contiguous with world_size * numel(in) = " +
                                         std::to_string(in.numel() * world_) + " elements of in's dtype");
    Tensor src = in.detach().to(Device::cpu()).contiguous();
    const size_t n = size_t(src.numel()) * dtype_size(src.dtype());
    std::vector<char> all = exchange(static_cast<const char*>(src.raw_data()), n);
    Tensor host = empty(out.shape(), {out.dtype(), Device::cpu()});
    if (!all.empty()) std::memcpy(host.raw_data(), all.data(), all.size());
    copy_(out, host);
  }
  using Communicator::all_gather;

  void broadcast(Tensor& t, int root) override {
    if (root < 0 || root >= world_)
      throw ValueError("broadcast", "root " + std::to_string(root) + " is outside [0, " + std::to_string(world_) + ")");
    Tensor all = all_gather(t);  // (world, S...): root's row is the answer
    const Shape& s = t.shape();
    Tensor mine = all.as_strided(s, contiguous_strides(s), all.offset() + root * t.numel());
    Tensor d = t.detach();
    copy_(d, mine);
  }
  void all_reduce_sum(Tensor& t) override { reduce(t, false); }
  void all_reduce_mean(Tensor& t) override {
    if (!is_floating(t.dtype()))
      throw DTypeError("all_reduce_mean", std::string("a mean needs a floating tensor, got ") + dtype_name(t.dtype()));
    reduce(t, true);
  }
  void barrier() override { exchange(nullptr, 0); }

 private:
  // t <- sum (or mean) over ranks, added in rank order from the gathered values.
  void reduce(Tensor& t, bool mean) {
    Tensor all = all_gather(t.detach().to(Device::cpu()).contiguous());
    Tensor res = empty(t.shape(), {t.dtype(), Device::cpu()});
    const int64_t n = t.numel();
    visit_dtype(t.dtype(), [&]<typename T>() {
      const T* g = all.data<T>();
      T* out = res.data<T>();
      for (int64_t i = 0; i < n; ++i) {
        if constexpr (std::is_integral_v<T>) {
          int64_t s = 0;
          for (int r = 0; r < world_; ++r) s += int64_t(g[int64_t(r) * n + i]);
          out[i] = T(s);
        } else {
          double s = 0;
          for (int r = 0; r < world_; ++r) s += static_cast<double>(g[int64_t(r) * n + i]);
          if (mean) s /= world_;
          if constexpr (std::is_same_v<T, double>) out[i] = s;
          else out[i] = T(float(s));
        }
      }
    });
    Tensor d = t.detach();
    copy_(d, res);
  }

  double left(Clock::time_point start) const {
    return timeout_ - std::chrono::duration<double>(Clock::now() - start).count();
  }
  [[noreturn]] void fail(const std::string& what) const {
    throw ConfigError("tcp rendezvous", "rank " + std::to_string(rank_) + " of " + std::to_string(world_) + ", " +
                                            host_ + ":" + std::to_string(port_) + ": " + what,
                      "start every rank with the same MASTER_ADDR, MASTER_PORT and WORLD_SIZE; raise "
                      "KEEL_DIST_TIMEOUT when ranks start far apart");
  }

  // Blocks until fd is readable (or writable), within the timeout.
  void wait_fd(int fd, short events, Clock::time_point start, const char* what) const {
    for (;;) {
      const double s = left(start);
      if (s <= 0) fail(std::string("timed out ") + what);
      pollfd p{fd, events, 0};
      int rc = ::poll(&p, 1, int(std::min(s, 1.0) * 1000) + 1);
      if (rc > 0) return;
      if (rc < 0 && errno != EINTR) fail(std::string(what) + ": " + std::strerror(errno));
    }
  }
  void send_all(int fd, const void* data, size_t n, Clock::time_point start) const {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      wait_fd(fd, POLLOUT, start, "sending");
      // Non-blocking: a blocking send of more than the socket's buffer holds waits for the peer
      // without a limit (a link that went down), past the timeout wait_fd enforces.
      ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (k <= 0) fail(std::string("a peer went away while sending (") + std::strerror(errno) + ")");
      p += k, n -= size_t(k);
    }
  }
  void recv_all(int fd, void* data, size_t n, Clock::time_point start) const {
    char* p = static_cast<char*>(data);
    while (n > 0) {
      wait_fd(fd, POLLIN, start, "waiting for a peer");
      ssize_t k = ::recv(fd, p, n, MSG_DONTWAIT);
      if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (k <= 0) fail("a peer went away (its process ended or was killed)");
      p += k, n -= size_t(k);
    }
  }

  // Every rank's n bytes, concatenated in rank order, on every rank.
  std::vector<char> exchange(const char* mine, size_t n) {
    const auto start = Clock::now();
    std::vector<char> all(n * size_t(world_));
    if (n) std::memcpy(all.data(), mine, n);  // rank 0's place, or this rank's until the answer
    if (world_ == 1) return all;
    if (rank_ != 0) {
      const int64_t head[2] = {rank_, int64_t(n)};
      send_all(peers_[0], head, sizeof(head), start);
      send_all(peers_[0], mine, n, start);
      int64_t total = 0;
      recv_all(peers_[0], &total, sizeof(total), start);
      if (total != int64_t(all.size())) fail("ranks passed collectives of different sizes");
      recv_all(peers_[0], all.data(), all.size(), start);
      return all;
    }
    for (int r = 1; r < world_; ++r) {
      int64_t head[2];
      recv_all(peers_[r], head, sizeof(head), start);
      if (head[0] != r || head[1] != int64_t(n))
        fail("rank " + std::to_string(r) + " sent " + std::to_string(head[1]) + " bytes, rank 0 " +
             std::to_string(n) + ": the ranks called different collectives");
      recv_all(peers_[r], all.data() + size_t(r) * n, n, start);
    }
    const int64_t total = int64_t(all.size());
    for (int r = 1; r < world_; ++r) {
      send_all(peers_[r], &total, sizeof(total), start);
      send_all(peers_[r], all.data(), all.size(), start);
    }
    return all;
  }

  int open_listener(int port) const {
    std::string why;
    int fd = listen_on(port, &why);
    if (fd < 0) fail(why);
    return fd;
  }

  // Takes over the listening socket fd (closed with the peers) and waits for every rank.
  void accept_peers(int fd) {
    const auto start = Clock::now();
    const int one = 1;
    peers_.assign(size_t(world_), -1);
    peers_[0] = fd;
    for (int joined = 1; joined < world_;) {
      wait_fd(fd, POLLIN, start, ("waiting for " + std::to_string(world_ - joined) + " rank(s) to join").c_str());
      int c = ::accept(fd, nullptr, nullptr);
      if (c < 0) continue;
      ::setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      int64_t r = -1;
      recv_all(c, &r, sizeof(r), start);
      if (r < 1 || r >= world_ || peers_[size_t(r)] >= 0) {
        ::close(c);
        fail("a process joined as rank " + std::to_string(r) + ", which is out of range or taken");
      }
      peers_[size_t(r)] = c;
      ++joined;
    }
  }

  void connect_to_root() {
    const auto start = Clock::now();
    addrinfo hints{}, *res = nullptr;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    int rc = ::getaddrinfo(host_.c_str(), std::to_string(port_).c_str(), &hints, &res);
    if (rc != 0) fail(std::string("cannot resolve MASTER_ADDR: ") + ::gai_strerror(rc));
    int fd = -1;
    // Rank 0 may not be listening yet: try every address until one answers or time is up.
    while (fd < 0) {
      for (addrinfo* a = res; a && fd < 0; a = a->ai_next) {
        fd = ::socket(a->ai_family, a->ai_socktype, a->ai_protocol);
        if (fd >= 0 && ::connect(fd, a->ai_addr, a->ai_addrlen) != 0) ::close(fd), fd = -1;
      }
      if (fd >= 0) break;
      if (left(start) <= 0) {
        ::freeaddrinfo(res);
        fail("rank 0 did not answer within " + std::to_string(int(timeout_)) + " s (is it running?)");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ::freeaddrinfo(res);
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    peers_.assign(1, fd);
    const int64_t r = rank_;
    send_all(fd, &r, sizeof(r), start);
  }

  std::string host_;
  int port_, rank_, world_;
  double timeout_;
  std::vector<int> peers_;  // rank 0: [listening socket, rank 1, ..., rank world-1]; others: [rank 0]
};

}  // namespace

std::shared_ptr<Communicator> make_tcp_bootstrap(const std::string& host, int port, int rank, int world,
                                                 double timeout_s) {
  return std::make_shared<TcpCommunicator>(host, port, rank, world, timeout_s);
}

TcpListener::TcpListener() {
  std::string why;
  fd_ = listen_on(0, &why);
  if (fd_ < 0) throw ConfigError("tcp rendezvous", why);
  sockaddr_storage a{};
  socklen_t len = sizeof(a);
  ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
  port_ = ntohs(a.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&a)->sin6_port
                                        : reinterpret_cast<sockaddr_in*>(&a)->sin_port);
}

TcpListener::~TcpListener() {
  if (fd_ >= 0) ::close(fd_);
}

std::shared_ptr<Communicator> make_tcp_bootstrap(std::unique_ptr<TcpListener> listener, int world,
                                                 double timeout_s) {
  const int fd = listener->fd_, port = listener->port_;
  listener->fd_ = -1;  // the communicator closes it
  return std::make_shared<TcpCommunicator>(fd, port, world, timeout_s);
}

}  // namespace keel
