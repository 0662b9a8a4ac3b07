// The tensor-core attention backward's ordered dQ (ops/cuda/attention_mma_backward.cu): its key
// tiles hand dQ over in a fixed order, whatever order the GPU starts their blocks in, so the bits
// never depend on it. On the emulated GPU under every block schedule (docs/emulation.md, "Block
// order"); on a GPU in the order it picks, twice.
#include <doctest/doctest.h>

#include <cmath>
#include <optional>
#include <vector>

#include "attention_cuda_check.h"
#include "core/cuda/runtime.h"
#include "core/factory.h"

using namespace keel;
using namespace keel::attention_test;

TEST_CASE("CUDA attention backward: the ordered dQ gives the same bits whatever order the blocks start in") {
  KEEL_REQUIRE_CUDA();
  // Several key tiles per (batch, head) hand dQ over to each other (T 300: three of 128 keys; at
  // head dim 256, five of 64 and two column halves). The emulated GPU starts them in index order,
  // in reverse, shuffled, one or several resident at a time; a GPU in its own order, twice.
  Generator gen(720);
  struct Case {
    int64_t T, D;
    DType dt;
  };
  std::vector<Case> cases{{300, 64, DType::bf16}, {300, 64, DType::f16}, {300, 256, DType::bf16}};
  // Under a sanitizer (whose tiers look for races, not for this property) one case in three of
  // the orders.
  using Order = cuda::BlockSchedule::Order;
  std::vector<cuda::BlockSchedule> schedules =
      cuda::is_emulated() ? std::vector<cuda::BlockSchedule>{{Order::index, 0, 1},   {Order::shuffle, 6, 3},
                                                             {Order::reverse, 0, 2}, {Order::reverse, 0, 1},
                                                             {Order::shuffle, 5, 1}, {Order::index, 0, 4}}
                          : std::vector<cuda::BlockSchedule>(2);
  if (cuda::is_emulated() && grid_level() == Grid::sanitized) {
    schedules.resize(3);
    cases.resize(1);
  }
  for (const Case& c : cases) {
    CAPTURE(c.D);
    INFO(dtype_name(c.dt));
    const Tensor q = randn({2, 2, c.T, c.D}, gen).to(c.dt), k = randn({2, 2, c.T, c.D}, gen).to(c.dt),
                 v = randn({2, 2, c.T, c.D}, gen).to(c.dt), g = randn({2, 2, c.T, c.D}, gen).to(c.dt);
    const std::vector<int64_t> window{0, 100};
    std::optional<Grads> first;
    for (const cuda::BlockSchedule& s : schedules) {
      CAPTURE(static_cast<int>(s.order));
      CAPTURE(s.resident);
      const cuda::BlockSchedule saved = cuda::is_emulated() ? cuda::emulated_block_schedule() : s;
      if (cuda::is_emulated()) cuda::set_emulated_block_schedule(s);
      const Grads r = cuda_run(q, k, v, g, window, 1 / std::sqrt(double(c.D)), 0);
      if (cuda::is_emulated()) cuda::set_emulated_block_schedule(saved);
      if (!first) {
        first = r;
        continue;
      }
      CHECK(r.dq.to_vector<double>() == first->dq.to_vector<double>());
      CHECK(r.dk.to_vector<double>() == first->dk.to_vector<double>());
      CHECK(r.dv.to_vector<double>() == first->dv.to_vector<double>());
    }
  }
}
