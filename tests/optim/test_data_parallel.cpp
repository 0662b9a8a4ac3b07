// The one optimizer interface of a data-parallel step: replicated AdamW and ZeRO-1 behind it
// take the same steps, over 1 to 3 ranks on threads.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <thread>

#include "core/dist/comm.h"
#include "core/factory.h"
#include "optim/data_parallel.h"

using namespace keel;
using namespace keel::optim;

namespace {

NamedTensors make_params() {
  NamedTensors ps;
  const std::vector<Shape> shapes{{3, 4}, {5}, {2, 3}};
  for (size_t k = 0; k < shapes.size(); ++k) {
    std::vector<float> v(size_t(numel_of(shapes[k])));
    for (size_t i = 0; i < v.size(); ++i) v[i] = 0.04f * float((i * 5 + k * 3) % 11) - 0.2f;
    ps.emplace_back("p" + std::to_string(k), from_vector(v, shapes[k]));
  }
  return ps;
}

// Different on every rank and step, large enough for a clip of 1 to act.
void set_grads(const NamedTensors& ps, int rank, int step) {
  for (size_t k = 0; k < ps.size(); ++k) {
    Tensor p = ps[k].second;
    std::vector<float> g(size_t(p.numel()));
    for (size_t i = 0; i < g.size(); ++i) g[i] = std::cos(float(i + 2 * k + 5 * rank + 13 * step)) * 0.9f;
    p.set_grad(from_vector(g, p.shape()));
  }
}

template <typename F>
void on_threads(int world, F&& body) {
  auto comms = make_thread_group(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) threads.emplace_back([&, r] { body(r, comms[r]); });
  for (auto& t : threads) t.join();
}

// Four steps through the interface, as the trainer takes them; returns rank 0's parameters.
std::vector<float> train(int world, int64_t zero_stage, std::vector<double>* norms) {
  std::vector<float> out;
  on_threads(world, [&](int r, std::shared_ptr<Communicator> comm) {
    NamedTensors ps = make_params();
    auto opt = make_data_parallel_adamw(comm, ps, {1e-2, 0.9, 0.95, 1e-8, 0.1}, zero_stage, DType::f32, 64);
    LossScaler scaler(DType::f32);
    for (int step = 0; step < 4; ++step) {
      opt->zero_grad();
      set_grads(ps, r, step);
      const double norm = opt->finish_gradients(scaler, 1.0);
      if (r == 0) norms->push_back(norm);
      opt->step(1e-2);
    }
    if (r != 0) return;
    for (auto& [name, p] : ps)
      for (float x : p.to_vector<float>()) out.push_back(x);
  });
  return out;
}

}  // namespace

TEST_CASE("replicated AdamW and ZeRO-1 take the same steps through one interface") {
  for (int world : {1, 2, 3}) {
    CAPTURE(world);
    std::vector<double> norm0, norm1;
    const std::vector<float> replicated = train(world, 0, &norm0), zero = train(world, 1, &norm1);
    REQUIRE(replicated.size() == zero.size());
    for (size_t i = 0; i < zero.size(); ++i) CHECK(zero[i] == doctest::Approx(replicated[i]).epsilon(1e-6));
    REQUIRE(norm0.size() == norm1.size());
    for (size_t i = 0; i < norm0.size(); ++i) CHECK(norm1[i] == doctest::Approx(norm0[i]).epsilon(1e-6));  // mean over ranks: f32 rounding
    CHECK(norm0.front() > 1.0);  // the clip acted
  }
}

TEST_CASE("finish_gradients' norm is NaN for a NaN gradient, and state is gathered where it is kept") {
  for (int64_t stage : {0, 1}) {
    CAPTURE(stage);
    on_threads(2, [&](int r, std::shared_ptr<Communicator> comm) {
      NamedTensors ps = make_params();
      auto opt = make_data_parallel_adamw(comm, ps, {}, stage, DType::f32, 64);
      LossScaler scaler(DType::f32);
      opt->zero_grad();
      set_grads(ps, r, 0);
      if (r == 1) {  // one rank's NaN poisons the mean everywhere
        Tensor g = ps[1].second.grad();
        std::vector<float> v = g.to_vector<float>();
        v[2] = std::numeric_limits<float>::quiet_NaN();
        ps[1].second.set_grad(from_vector(v, g.shape()));
      }
      CHECK(std::isnan(opt->finish_gradients(scaler, 1.0)));
      const NamedTensors kept = opt->gather_state(r == 0);  // collective for ZeRO
      if (r == 0) CHECK(kept.size() == AdamW(make_params()).state().size());
      if (stage == 0 && r == 1) CHECK(kept.empty());
    });
  }
}

TEST_CASE("a ZeRO stage keel does not have is a ConfigError") {
  auto comm = make_thread_group(1)[0];
  CHECK_THROWS_AS(make_data_parallel_adamw(comm, make_params(), {}, 2, DType::f32, 64), ConfigError);
}
