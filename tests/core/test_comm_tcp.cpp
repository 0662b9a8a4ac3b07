// The TCP rendezvous with real processes: rank 0 here, the other ranks forked children.
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/dist/comm_tcp.h"
#include "core/factory.h"

using namespace keel;

namespace {

// A port nobody listens on now (the kernel's pick, released again).
int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// What rank r contributes: 128 bytes (the size of an NCCL unique id) only it would make.
std::vector<int64_t> id_of(int r) {
  std::vector<int64_t> v(16);
  for (size_t i = 0; i < v.size(); ++i) v[i] = int64_t(i) * 1000 + r * 7 + 1;
  return v;
}

// Rank r's part: broadcast rank 0's id, gather everyone's, sum, barrier. True when all agree.
bool play(int r, int world, int port) {
  auto c = make_tcp_bootstrap("localhost", port, r, world, 20.0);
  if (c->rank() != r || c->world_size() != world || c->backend() != "tcp") return false;
  Tensor id = from_vector<int64_t>(id_of(r), {16});
  c->broadcast(id, 0);
  bool ok = id.to_vector<int64_t>() == id_of(0);
  Tensor all = c->all_gather(from_vector<int64_t>(id_of(r), {16}));
  for (int q = 0; q < world; ++q) {
    std::vector<int64_t> row = all.to_vector<int64_t>();
    ok = ok && std::vector<int64_t>(row.begin() + q * 16, row.begin() + (q + 1) * 16) == id_of(q);
  }
  Tensor x = from_vector<float>({float(r), 1.0f}, {2});
  c->all_reduce_mean(x);
  ok = ok && x.to_vector<float>() == std::vector<float>{float(world - 1) / 2.0f, 1.0f};
  c->barrier();
  return ok;
}

}  // namespace

TEST_CASE("tcp rendezvous: 3 processes exchange an id through rank 0 and agree") {
  const int world = 3, port = free_port();
  std::vector<pid_t> kids;
  for (int r = 1; r < world; ++r) {
    pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      bool ok = false;
      try {
        ok = play(r, world, port);
      } catch (...) {
      }
      std::_Exit(ok ? 0 : 1);
    }
    kids.push_back(pid);
  }
  CHECK(play(0, world, port));
  for (pid_t pid : kids) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
}

TEST_CASE("tcp rendezvous: a rank whose rank 0 never comes stops with the address, not a hang") {
  const int port = free_port();
  const std::string where = "127.0.0.1:" + std::to_string(port) + ": rank 0 did not answer";
  CHECK_THROWS_WITH_AS(make_tcp_bootstrap("127.0.0.1", port, 1, 2, 0.3), doctest::Contains(where.c_str()),
                       ConfigError);
  // Rank 0 waiting for a rank that never joins: the same, naming what is missing.
  CHECK_THROWS_WITH_AS(make_tcp_bootstrap("127.0.0.1", port, 0, 2, 0.3), doctest::Contains("1 rank(s) to join"),
                       ConfigError);
  CHECK_THROWS_AS(make_tcp_bootstrap("127.0.0.1", 0, 0, 2), ConfigError);
  CHECK_THROWS_AS(make_tcp_bootstrap("127.0.0.1", port, 2, 2), ConfigError);
}

TEST_CASE("tcp rendezvous: over a listener opened first, and a send to a peer that stopped reading times out") {
  // Rank 0's port is known before anyone connects (what an NCCL unique id carries).
  auto listener = std::make_unique<TcpListener>();
  const int port = listener->port();
  REQUIRE(port > 0);
  pid_t kid = ::fork();
  REQUIRE(kid >= 0);
  if (kid == 0) {
    int rc = 1;
    try {
      auto c = make_tcp_bootstrap("127.0.0.1", port, 1, 2, 1.0);
      Tensor small = c->all_gather(from_vector<float>({1.0f}, {1}));
      if (small.to_vector<float>() != std::vector<float>{0.0f, 1.0f}) std::_Exit(3);
      // 16 MB, more than both sockets' buffers hold: rank 0 never reads it, so the send must
      // give up at the timeout rather than wait inside send() for as long as the peer lives.
      Tensor big = zeros({int64_t(4) << 20});
      Tensor out = zeros({int64_t(8) << 20});
      c->all_gather(big, out);
    } catch (const ConfigError& e) {
      rc = std::string(e.what()).find("timed out sending") != std::string::npos ? 0 : 2;
    }
    std::_Exit(rc);
  }
  auto root = make_tcp_bootstrap(std::move(listener), 2, 20.0);
  CHECK(root->rank() == 0);
  CHECK(root->world_size() == 2);
  Tensor small = root->all_gather(from_vector<float>({0.0f}, {1}));
  CHECK(small.to_vector<float>() == std::vector<float>{0.0f, 1.0f});
  int status = 0;
  pid_t done = 0;
  for (int i = 0; i < 100 && done == 0; ++i) {  // 10 s; the kid's timeout is 1 s
    done = ::waitpid(kid, &status, WNOHANG);
    if (done == 0) ::usleep(100000);
  }
  if (done == 0) ::kill(kid, SIGKILL), ::waitpid(kid, &status, 0);
  CHECK(done == kid);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}
