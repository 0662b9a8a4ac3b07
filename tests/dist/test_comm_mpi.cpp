// The MPI communicator, run as 2 processes by ctest (mpiexec -np 2 test_comm_mpi): every
// rank runs the same cases in the same order, so their collectives meet.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "core/dist/comm_mpi.h"
#include "core/factory.h"

using namespace keel;

namespace {
Communicator& comm() {
  static std::shared_ptr<Communicator> c = [] {
    auto c = make_mpi_communicator();
    std::atexit(mpi_finalize);
    return c;
  }();
  return *c;
}
}  // namespace

TEST_CASE("mpi: world and backend") {
  CHECK(comm().backend() == "mpi");
  CHECK(comm().world_size() == 2);
}

TEST_CASE("mpi: all_reduce sum, mean and max, the same bits on every rank") {
  const int r = comm().rank();
  Tensor s = from_vector<float>({1.0f + r, 0.1f * r, -3.0f}, {3});
  comm().all_reduce_sum(s);
  CHECK(s.to_vector<float>() == std::vector<float>{3.0f, 0.1f, -6.0f});
  Tensor m = from_vector<double>({1.0 + r, 4.0}, {2});
  comm().all_reduce_mean(m);
  CHECK(m.to_vector<double>() == std::vector<double>{1.5, 4.0});
  Tensor h = from_vector<float>({1.5f + r, -2.0f}, {2}, {DType::bf16});  // widened to f32, rounded back
  comm().all_reduce_mean(h);
  CHECK(h.to_vector<float>() == std::vector<float>{2.0f, -2.0f});
  Tensor i = from_vector<int64_t>({int64_t(r) << 40, 7}, {2});
  comm().all_reduce_sum(i);
  CHECK(i.to_vector<int64_t>() == std::vector<int64_t>{int64_t(1) << 40, 14});
  // Rank 1 holds a NaN in element 0 and rank 0 in element 2: MPI_MAX would drop both.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor x = r == 0 ? from_vector<float>({1, 5, nan}, {3}) : from_vector<float>({nan, 2, 3}, {3});
  comm().all_reduce_max(x);
  auto v = x.to_vector<float>();
  CHECK(std::isnan(v[0]));
  CHECK(v[1] == 5);
  CHECK(std::isnan(v[2]));
}

TEST_CASE("mpi: non-contiguous views, broadcast, all_gather, reduce_scatter, barrier, async") {
  const int r = comm().rank();
  Tensor base = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  if (r == 1) fill_(base, 10);
  Tensor view = base.as_strided({3, 2}, {1, 3}, 0);
  comm().all_reduce_sum(view);
  CHECK(base.to_vector<float>() == std::vector<float>{11, 12, 13, 14, 15, 16});

  Tensor b = from_vector<int32_t>({r, 10 * r}, {2});
  comm().broadcast(b, 1);
  CHECK(b.to_vector<int32_t>() == std::vector<int32_t>{1, 10});

  Tensor g = comm().all_gather(from_vector<float>({float(r), float(10 * r)}, {2}));
  CHECK(g.shape() == Shape{2, 2});
  CHECK(g.to_vector<float>() == std::vector<float>{0, 0, 1, 10});

  Tensor in = from_vector<float>({1.0f + r, 2.0f + r, 3.0f + r, 4.0f + r}, {4});
  Tensor out = zeros({2});
  comm().reduce_scatter_sum(in, out);
  CHECK(out.to_vector<float>() == (r == 0 ? std::vector<float>{3, 5} : std::vector<float>{7, 9}));

  comm().barrier();
  Tensor a = from_vector<float>({float(r), 2.0f}, {2});
  auto work = comm().all_reduce_mean_async(a);
  work->wait();
  CHECK(a.to_vector<float>() == std::vector<float>{0.5f, 2.0f});
}

TEST_CASE("mpi: argument errors are raised before anything is sent") {
  Tensor i = from_vector<int32_t>({1}, {1});
  CHECK_THROWS_AS(comm().all_reduce_mean(i), DTypeError);
  Tensor t = zeros({2});
  CHECK_THROWS_AS(comm().broadcast(t, 2), ValueError);
  Tensor out = zeros({3});
  CHECK_THROWS_AS(comm().all_gather(t, out), ShapeError);
}
