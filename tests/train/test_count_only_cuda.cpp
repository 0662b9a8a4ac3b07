// The emulated GPU's count-only mode (cuda::set_emulated_count_only): kernels and cuBLAS products
// do no work while everything around them happens as usual, so a profile of a step is the same
// with and without it (what apps/bench/bench_profile --count-only relies on at full size). A real
// GPU, or a build without CUDA, refuses the mode.
#include <doctest/doctest.h>

#include <vector>

#include "core/copy.h"
#include "core/cuda/counters.h"
#include "core/factory.h"
#include "core/profiler.h"
#include "cuda_test.h"
#include "nn/gpt2.h"
#include "ops/matmul.h"

using namespace keel;

namespace {

// Count-only mode for one scope, off again however the scope ends.
struct CountOnly {
  CountOnly() { cuda::set_emulated_count_only(true); }
  ~CountOnly() { cuda::set_emulated_count_only(false); }
};

// One training step's forward and backward of a tiny GPT-2 on the GPU, profiled.
profiler::Summary profiled_step(nn::GPT2& model) {
  std::vector<int32_t> ids(2 * 16);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t((i * 37 + 5) % 128);
  const Tensor x = from_vector(ids, {2, 16}).to(Device::cuda(0));
  profiler::Session session({Device::cuda(0), "H100"});
  session.step_begin();
  for (Tensor p : model.parameters()) p.zero_grad();
  model.forward(x, x, nn::StatsOn::device).loss.backward();
  session.step_end();
  return profiler::summarize(session.finish());
}

}  // namespace

TEST_CASE("count-only: a kernel and a product are counted and do nothing, copies and allocations happen") {
  KEEL_REQUIRE_CUDA();
  if (!cuda::is_emulated()) {
    CHECK_THROWS_AS(cuda::set_emulated_count_only(true), DeviceError);
    return;
  }
  const Device dev = Device::cuda(0);
  Tensor t = from_vector<float>({1, 2, 3, 4}, {2, 2}).to(dev);
  Tensor out;
  cuda::Counters d;
  {
    CountOnly mode;
    const cuda::Counters before = cuda::counters();
    fill_(t, 7.0);                               // a kernel: launched, does nothing
    out = matmul(t, t);                          // a cuBLAS call: made, computes nothing
    Tensor up = from_vector<float>({5, 6}, {2}).to(dev);  // copies still move the data
    CHECK(up.to(Device::cpu()).to_vector<float>() == std::vector<float>{5, 6});
    d = cuda::counters() - before;
  }
  CHECK(d.launches == 1);
  CHECK(d.library_calls == 1);
  CHECK(d.allocations >= 2);  // matmul's output and the upload
  CHECK(t.to(Device::cpu()).to_vector<float>() == std::vector<float>{1, 2, 3, 4});
  // Off again: the same kernel does its work.
  fill_(t, 7.0);
  CHECK(t.to(Device::cpu()).to_vector<float>() == std::vector<float>{7, 7, 7, 7});
}

TEST_CASE("count-only: a training step's profile (FLOPs, bytes, counts, prediction) is the step's with the work done") {
  KEEL_REQUIRE_CUDA();
  if (!cuda::is_emulated()) return;  // the mode is the emulator's (the test above checks the refusal)
  nn::GPT2Config c;
  c.n_layer = 2, c.n_head = 2, c.n_embd = 64, c.block_size = 16, c.vocab_size = 128;
  nn::GPT2 model(c, 3);
  model.to(Device::cuda(0));
  model.to(DType::bf16);
  (void)profiled_step(model);  // warm: the allocator's cache, the library handles
  const profiler::Summary real = profiled_step(model);
  profiler::Summary counted;
  {
    CountOnly mode;
    counted = profiled_step(model);
  }
  CHECK(counted.flops == real.flops);
  CHECK(counted.bytes == real.bytes);
  CHECK(counted.step_predicted_us == real.step_predicted_us);
  CHECK(counted.counts.summary() == real.counts.summary());
  REQUIRE(counted.rows.size() == real.rows.size());
  for (size_t i = 0; i < real.rows.size(); ++i) {
    CAPTURE(real.rows[i].name);
    CHECK(counted.rows[i].name == real.rows[i].name);
    CHECK(counted.rows[i].predicted_us == real.rows[i].predicted_us);
  }
}

TEST_CASE("count-only without CUDA is a DeviceError") {
  if (cuda::built_with_cuda()) return;
  CHECK_THROWS_AS(cuda::set_emulated_count_only(true), DeviceError);
  CHECK_FALSE(cuda::is_emulated());
}
