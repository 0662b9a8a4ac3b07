// Gradient buckets reduced while the backward runs, over a thread group.
#include <doctest/doctest.h>

#include <thread>

#include "core/dist/comm.h"
#include "core/factory.h"
#include "ops/arith.h"
#include "ops/matmul.h"
#include "ops/reduce.h"
#include "optim/grad_bucketer.h"

using namespace keel;
using namespace keel::optim;

namespace {

// Four (4, 4) weights, w0 used twice (a leaf with two AccumulateGrad nodes), and an input
// that depends on the rank: loss = sum(tanh(x w0) w1 w2 w3 + x w0).
std::vector<Tensor> make_params() {
  std::vector<Tensor> ws;
  for (int k = 0; k < 4; ++k) {
    std::vector<float> v(16);
    for (int i = 0; i < 16; ++i) v[i] = 0.1f * float((i * 7 + k * 3) % 11) - 0.4f;
    ws.push_back(from_vector(v, {4, 4}));
    ws.back().set_requires_grad(true);
  }
  return ws;
}
Tensor loss_of(const std::vector<Tensor>& w, int rank) {
  std::vector<float> xv(8);
  for (int i = 0; i < 8; ++i) xv[i] = 0.3f * float(i + 1) * float(rank + 1) - 1.0f;
  Tensor x = from_vector(xv, {2, 4});
  Tensor h = matmul(x, w[0]);
  Tensor y = matmul(matmul(matmul(tanh(h), w[1]), w[2]), w[3]);
  return sum(add(y, h));
}

}  // namespace

TEST_CASE("GradBucketer starts every bucket inside the backward and ends with the mean gradient") {
  const int world = 2;
  auto comms = make_thread_group(world);
  std::vector<std::vector<Tensor>> params(world), reference(world);
  std::vector<size_t> started(world), buckets(world), in_backward(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      params[r] = make_params();
      GradBucketer sync(comms[r], params[r], /*bucket_bytes=*/64);  // one (4, 4) f32 weight per bucket
      {
        auto hook = sync.hook();
        loss_of(params[r], r).backward();
      }
      started[r] = sync.started();  // before finish(): only the backward can have started them
      sync.finish();
      buckets[r] = sync.num_buckets();
      in_backward[r] = sync.started_in_backward();
      // The reference: the same gradients, reduced after the backward by allreduce_gradients.
      reference[r] = make_params();
      loss_of(reference[r], r).backward();
      allreduce_gradients(*comms[r], reference[r], 64);
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < world; ++r) {
    CHECK(buckets[r] == 4);
    CHECK(started[r] == 4);
    CHECK(in_backward[r] == 4);
    for (int k = 0; k < 4; ++k) {
      auto got = params[r][k].grad().to_vector<float>();
      auto want = reference[r][k].grad().to_vector<float>();
      for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-6));
      CHECK(got == params[0][k].grad().to_vector<float>());  // bit-identical across ranks
    }
  }
}

TEST_CASE("GradBucketer at world size 1 leaves the gradients alone") {
  auto comm = std::make_shared<LocalCommunicator>();
  auto ps = make_params();
  GradBucketer sync(comm, ps);
  CHECK(sync.num_buckets() == 1);
  {
    auto hook = sync.hook();
    loss_of(ps, 0).backward();
  }
  sync.finish();
  auto ref = make_params();
  loss_of(ref, 0).backward();
  for (int k = 0; k < 4; ++k) CHECK(ps[k].grad().to_vector<float>() == ref[k].grad().to_vector<float>());
}
