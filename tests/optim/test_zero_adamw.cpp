// ZeRO-1 AdamW over a thread group against plain data parallelism (all-reduce, clip, AdamW).
#include <doctest/doctest.h>

#include <cmath>
#include <thread>

#include "core/dist/comm.h"
#include "core/factory.h"
#include "optim/adamw.h"
#include "optim/clip.h"
#include "optim/grad_sync.h"
#include "optim/zero_adamw.h"

using namespace keel;
using namespace keel::optim;

namespace {

// A matrix, a vector, a matrix and an odd-sized vector: 12 + 5 + 6 + 3 = 26 elements, which
// 3 ranks cut inside parameters (slices of 9: [0, 9), [9, 18), [18, 27) with one of padding).
NamedTensors make_params() {
  NamedTensors ps;
  const std::vector<Shape> shapes{{3, 4}, {5}, {2, 3}, {3}};
  for (size_t k = 0; k < shapes.size(); ++k) {
    std::vector<float> v(size_t(numel_of(shapes[k])));
    for (size_t i = 0; i < v.size(); ++i) v[i] = 0.05f * float((i * 7 + k * 5) % 13) - 0.3f;
    ps.emplace_back("p" + std::to_string(k), from_vector(v, shapes[k]));
  }
  return ps;
}
// Rank r's gradient of parameter k at step t: different on every rank, large enough to clip.
void set_grads(NamedTensors& ps, int rank, int step) {
  for (size_t k = 0; k < ps.size(); ++k) {
    Tensor& p = ps[k].second;
    std::vector<float> g(size_t(p.numel()));
    for (size_t i = 0; i < g.size(); ++i) g[i] = std::sin(float(i + 3 * k + 7 * rank + 11 * step)) * 0.7f;
    p.set_grad(from_vector(g, p.shape()));
  }
}

// Runs `body(rank, comm)` on `world` threads.
template <typename F>
void on_threads(int world, F&& body) {
  auto comms = make_thread_group(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) threads.emplace_back([&, r] { body(r, comms[r]); });
  for (auto& t : threads) t.join();
}

double max_diff(const NamedTensors& a, const NamedTensors& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (size_t k = 0; k < a.size(); ++k) {
    CHECK(a[k].first == b[k].first);
    auto va = a[k].second.to_vector<double>(), vb = b[k].second.to_vector<double>();
    REQUIRE(va.size() == vb.size());
    for (size_t i = 0; i < va.size(); ++i) worst = std::max(worst, std::abs(va[i] - vb[i]));
  }
  return worst;
}

const AdamWOptions kOpt{1e-2, 0.9, 0.95, 1e-8, 0.1};

}  // namespace

TEST_CASE("ZeRO-1 AdamW equals all-reduce + clip + AdamW, holding 1/world of the state") {
  // Chunks of the whole slice, of one element per rank, and of 5 (uneven against 13 or 9).
  for (auto [world, chunk_bytes] : {std::pair{1, size_t{1} << 20}, {2, size_t{1} << 20}, {3, size_t{1} << 20},
                                    {2, size_t{8}}, {3, size_t{8}}, {2, size_t{40}}, {3, size_t{60}}}) {
    CAPTURE(world);
    CAPTURE(chunk_bytes);
    std::vector<NamedTensors> zero_params(world), plain_params(world), zero_state(world), plain_state(world);
    std::vector<double> zero_norm(world), plain_norm(world);
    std::vector<int64_t> bytes(world);
    on_threads(world, [&](int r, std::shared_ptr<Communicator> comm) {
      NamedTensors zp = make_params(), pp = make_params();
      ZeroAdamW zero(comm, zp, kOpt, DType::f32, chunk_bytes);
      AdamW plain(pp, kOpt);
      for (int step = 0; step < 5; ++step) {
        zero.zero_grad();
        set_grads(zp, r, step);
        zero.reduce_gradients();
        zero_norm[r] = zero.clip_grad_norm(1.0);
        zero.step(1e-2);

        set_grads(pp, r, step);
        allreduce_gradients(*comm, pp);
        plain_norm[r] = clip_grad_norm(pp, 1.0);
        plain.step(1e-2);
      }
      zero_params[r] = zp, plain_params[r] = pp;
      zero_state[r] = zero.state();
      plain_state[r] = plain.state();
      bytes[r] = zero.state_bytes();
      CHECK(zero.shard_numel() == (26 + world - 1) / world);
    });
    int64_t total = 0;
    for (int r = 0; r < world; ++r) {
      CHECK(zero_norm[r] > 1.0);  // clipping was active
      // The mean over 3 ranks rounds differently (sum / 3 against sum * (1/3)): f32 rounding.
      CHECK(std::abs(zero_norm[r] - plain_norm[r]) < 1e-6 * plain_norm[r]);
      CHECK(max_diff(zero_params[r], plain_params[r]) < 1e-6);
      CHECK(max_diff(zero_state[r], plain_state[r]) < 1e-6);
      CHECK(max_diff(zero_params[r], zero_params[0]) == 0);  // bit-identical on every rank
      // m and v of the rank's slice only (the last slice may end in padding).
      CHECK(bytes[r] <= 8 * ((26 + world - 1) / world));
      total += bytes[r];
    }
    CHECK(total == 8 * 26);
  }
}

TEST_CASE("ZeRO-1 state moves between world sizes and plain AdamW") {
  // Plain AdamW, 3 steps on rank 0's gradients: the state a checkpoint would hold.
  NamedTensors pp = make_params();
  AdamW plain(pp, kOpt);
  for (int step = 0; step < 3; ++step) {
    set_grads(pp, 0, step);
    plain.step();
  }
  const NamedTensors saved = plain.state();
  // Loaded by 2 ZeRO ranks (each keeps its slice), gathered back: the same state.
  std::vector<NamedTensors> back(2);
  on_threads(2, [&](int r, std::shared_ptr<Communicator> comm) {
    NamedTensors zp = make_params();
    ZeroAdamW zero(comm, zp, kOpt);
    zero.load_state(saved);
    CHECK(zero.step_count() == 3);
    back[r] = zero.state();
  });
  CHECK(max_diff(back[0], saved) == 0);
  CHECK(max_diff(back[1], saved) == 0);

  // A state with an entry missing is refused, naming it.
  NamedTensors broken(saved.begin() + 1, saved.end());
  on_threads(1, [&](int, std::shared_ptr<Communicator> comm) {
    NamedTensors zp = make_params();
    ZeroAdamW zero(comm, zp, kOpt);
    CHECK_THROWS_WITH_AS(zero.load_state(broken), doctest::Contains("p0.m"), ConfigError);
  });
}

TEST_CASE("ZeRO-1 reduces in bf16 when asked, the mean landing in f32 close to the f32 one") {
  std::vector<NamedTensors> f32_params(2), bf16_params(2);
  on_threads(2, [&](int r, std::shared_ptr<Communicator> comm) {
    NamedTensors a = make_params(), b = make_params();
    ZeroAdamW za(comm, a, kOpt), zb(comm, b, kOpt, DType::bf16);
    for (auto [z, ps] : {std::pair{&za, &a}, std::pair{&zb, &b}}) {
      z->zero_grad();
      set_grads(*ps, r, 0);
      z->reduce_gradients();
      z->step(1e-2);
    }
    f32_params[r] = a, bf16_params[r] = b;
  });
  // Adam's first step moves each weight by about lr * sign(g): bf16 rounding of g changes it little.
  const double d = max_diff(f32_params[0], bf16_params[0]);
  CHECK(d < 1e-3);
  CHECK(max_diff(bf16_params[0], bf16_params[1]) == 0);
  CHECK_THROWS_AS(ZeroAdamW(std::make_shared<LocalCommunicator>(), make_params(), kOpt, DType::f16), DTypeError);
}
