// Communicators: the thread-group CPU backend against hand-computed collectives, and the
// single-rank LocalCommunicator.
#include <doctest/doctest.h>

#include <exception>
#include <thread>

#include "core/dist/comm.h"
#include "core/factory.h"

using namespace keel;

namespace {

template <typename F>
std::vector<std::exception_ptr> run_ranks(int world, F f) {
  auto comms = make_thread_group(world);
  std::vector<std::exception_ptr> errors(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      try {
        REQUIRE(comms[r]->rank() == r);
        f(*comms[r], r);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

void require_ok(const std::vector<std::exception_ptr>& errors) {
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

std::vector<float> values_of_rank(int r, int n) {
  std::vector<float> v(n);
  for (int i = 0; i < n; ++i) v[i] = 0.1f * float(r + 1) + float(i) / 3.0f;
  return v;
}

}  // namespace

TEST_CASE("thread group all_reduce sum and mean, 2 and 4 ranks, bit-identical on every rank") {
  for (int world : {2, 4}) {
    CAPTURE(world);
    const int n = 1000;
    std::vector<std::vector<float>> sums(world), means(world);
    std::vector<std::vector<int64_t>> ints(world);
    require_ok(run_ranks(world, [&](Communicator& c, int r) {
      CHECK(c.world_size() == world);
      Tensor t = from_vector(values_of_rank(r, n), {10, 100});
      c.all_reduce_sum(t);
      sums[r] = t.to_vector<float>();
      Tensor m = from_vector(values_of_rank(r, n), {n});
      c.all_reduce_mean(m);
      means[r] = m.to_vector<float>();
      Tensor k = from_vector<int64_t>({int64_t(r), int64_t(1) << 40}, {2});
      c.all_reduce_sum(k);
      ints[r] = k.to_vector<int64_t>();
    }));
    for (int i = 0; i < n; ++i) {
      double want = 0;
      for (int r = 0; r < world; ++r) want += double(values_of_rank(r, n)[i]);
      CHECK(sums[0][i] == float(want));
      CHECK(means[0][i] == float(want / world));
    }
    for (int r = 1; r < world; ++r) {
      CHECK(sums[r] == sums[0]);
      CHECK(means[r] == means[0]);
    }
    CHECK(ints[0] == std::vector<int64_t>{world * (world - 1) / 2, int64_t(world) << 40});
  }
}

TEST_CASE("thread group all_reduce works on non-contiguous views and bf16") {
  std::vector<std::vector<float>> out(2), half(2);
  require_ok(run_ranks(2, [&](Communicator& c, int r) {
    Tensor base = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
    Tensor view = base.as_strided({3, 2}, {1, 3}, 0);  // the transpose
    if (r == 1) fill_(base, 10);
    c.all_reduce_sum(view);
    out[r] = base.to_vector<float>();
    Tensor h = from_vector<float>({1.5f, -2.0f}, {2}, {DType::bf16});
    c.all_reduce_mean(h);
    half[r] = h.to_vector<float>();
  }));
  CHECK(out[0] == std::vector<float>{11, 12, 13, 14, 15, 16});
  CHECK(out[1] == out[0]);
  CHECK(half[0] == std::vector<float>{1.5f, -2.0f});
}

TEST_CASE("thread group broadcast, all_gather and barrier") {
  for (int world : {2, 4}) {
    CAPTURE(world);
    std::vector<std::vector<float>> bc(world), gathered(world);
    std::vector<Shape> shapes(world);
    require_ok(run_ranks(world, [&](Communicator& c, int r) {
      Tensor t = from_vector(values_of_rank(r, 5), {5});
      c.broadcast(t, world - 1);
      bc[r] = t.to_vector<float>();
      c.barrier();
      Tensor g = c.all_gather(from_vector<float>({float(r), float(10 * r)}, {2}));
      shapes[r] = g.shape();
      gathered[r] = g.to_vector<float>();
    }));
    for (int r = 0; r < world; ++r) {
      CHECK(bc[r] == values_of_rank(world - 1, 5));
      CHECK(shapes[r] == Shape{world, 2});
      for (int q = 0; q < world; ++q) {
        CHECK(gathered[r][2 * q] == float(q));
        CHECK(gathered[r][2 * q + 1] == float(10 * q));
      }
    }
  }
}

TEST_CASE("thread group raises the same typed error on every rank for mismatched calls") {
  auto all_throw = [](const std::vector<std::exception_ptr>& errors, auto tag) {
    for (auto& e : errors) {
      REQUIRE(e != nullptr);
      CHECK_THROWS_AS(std::rethrow_exception(e), decltype(tag));
    }
  };
  // Different sizes.
  all_throw(run_ranks(2, [](Communicator& c, int r) {
              Tensor t = zeros({r + 1});
              c.all_reduce_sum(t);
            }),
            ConfigError("", ""));
  // Different collectives.
  all_throw(run_ranks(2, [](Communicator& c, int r) {
              Tensor t = zeros({2});
              if (r == 0) c.all_reduce_sum(t);
              else c.broadcast(t, 0);
            }),
            ConfigError("", ""));
  // A root outside the world.
  all_throw(run_ranks(2, [](Communicator& c, int) {
              Tensor t = zeros({2});
              c.broadcast(t, 2);
            }),
            ConfigError("", ""));
  // A bad output on one rank only.
  all_throw(run_ranks(2, [](Communicator& c, int r) {
              Tensor out = zeros({r == 0 ? 4 : 3});
              c.all_gather(zeros({2}), out);
            }),
            ShapeError("", ""));
  // A mean of integers.
  all_throw(run_ranks(2, [](Communicator& c, int) {
              Tensor t = zeros({2}, {DType::i32});
              c.all_reduce_mean(t);
            }),
            DTypeError("", ""));
  // The group still works after errors.
  require_ok(run_ranks(2, [](Communicator& c, int) { c.barrier(); }));
  CHECK_THROWS_AS(make_thread_group(0), ConfigError);
}

TEST_CASE("LocalCommunicator: world of one") {
  LocalCommunicator c;
  CHECK(c.rank() == 0);
  CHECK(c.world_size() == 1);
  Tensor t = from_vector<float>({1, 2}, {2});
  c.all_reduce_sum(t);
  c.all_reduce_mean(t);
  c.broadcast(t, 0);
  c.barrier();
  CHECK(t.to_vector<float>() == std::vector<float>{1, 2});
  CHECK(c.all_gather(t).shape() == Shape{1, 2});
  CHECK(c.all_gather(t).to_vector<float>() == std::vector<float>{1, 2});
  CHECK_THROWS_AS(c.broadcast(t, 1), ValueError);
  Tensor i = zeros({2}, {DType::i64});
  CHECK_THROWS_AS(c.all_reduce_mean(i), DTypeError);
  Tensor bad = zeros({3});
  CHECK_THROWS_AS(c.all_gather(t, bad), ShapeError);
}
