// Bucketed gradient all-reduce over a thread group: every rank ends with the mean gradient.
#include <doctest/doctest.h>

#include <exception>
#include <thread>

#include "core/dist/comm.h"
#include "core/factory.h"
#include "optim/grad_sync.h"

using namespace keel;
using namespace keel::optim;

namespace {

// Rank r's parameters: the same shapes everywhere, gradients that depend on the rank.
std::vector<Tensor> params_for(int rank) {
  std::vector<Tensor> ps{zeros({3, 4}), zeros({5}), zeros({2, 2}, {DType::f64}), zeros({100}), zeros({7})};
  for (size_t k = 0; k < ps.size(); ++k) {
    if (k == 4) continue;  // no gradient on any rank: skipped
    std::vector<double> g(ps[k].numel());
    for (size_t i = 0; i < g.size(); ++i) g[i] = double(rank + 1) * double(i + 1) + 0.25 * double(k);
    ps[k].set_grad(from_vector<double>(g, ps[k].shape(), {ps[k].dtype()}));
  }
  return ps;
}

// Runs f(comm, rank) on `world` threads; rethrows the first exception in the caller.
template <typename F>
std::vector<std::exception_ptr> run_ranks(int world, F f) {
  auto comms = make_thread_group(world);
  std::vector<std::exception_ptr> errors(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      try {
        f(*comms[r], r);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

}  // namespace

TEST_CASE("allreduce_gradients over 2 ranks gives every rank the mean, for any bucket size") {
  for (size_t bucket_bytes : {size_t{16}, size_t{100}, kDefaultBucketBytes}) {
    CAPTURE(bucket_bytes);
    std::vector<std::vector<Tensor>> ps{params_for(0), params_for(1)};
    auto errors = run_ranks(2, [&](Communicator& c, int r) { allreduce_gradients(c, ps[r], bucket_bytes); });
    for (auto& e : errors) REQUIRE(e == nullptr);
    for (size_t k = 0; k < 4; ++k) {
      std::vector<double> want = params_for(0)[k].grad().to_vector<double>();
      std::vector<double> other = params_for(1)[k].grad().to_vector<double>();
      for (size_t i = 0; i < want.size(); ++i) want[i] = (want[i] + other[i]) / 2;
      CHECK(ps[0][k].grad().to_vector<double>() == want);
      CHECK(ps[1][k].grad().to_vector<double>() == want);
    }
    CHECK_FALSE(ps[0][4].grad().defined());
  }
}

TEST_CASE("allreduce_gradients with one rank leaves gradients alone, mismatched gradient sets fail on all ranks") {
  LocalCommunicator local;
  auto ps = params_for(3);
  auto before = ps[0].grad().to_vector<float>();
  allreduce_gradients(local, ps);
  CHECK(ps[0].grad().to_vector<float>() == before);

  std::vector<std::vector<Tensor>> qs{params_for(0), params_for(1)};
  qs[1][1].zero_grad();  // rank 1 lacks one gradient: its bucket is smaller
  auto errors = run_ranks(2, [&](Communicator& c, int r) { allreduce_gradients(c, qs[r], 1 << 20); });
  for (auto& e : errors) {
    REQUIRE(e != nullptr);
    CHECK_THROWS_AS(std::rethrow_exception(e), ConfigError);
  }
}
