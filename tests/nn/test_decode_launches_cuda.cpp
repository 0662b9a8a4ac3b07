// What one decode step of a layer's attention asks of the GPU, counted (core/cuda/counters.h) on
// the emulated device, where the counts are exactly a real GPU's: one fused launch, whether a
// row's keys fit one block (every local head, a global head at short contexts) or are split over
// blocks, the last of which merges the row; MHSA and LS-attention alike, so LS never issues more
// per token.
#include <doctest/doctest.h>

#include "core/autograd.h"
#include "core/cuda/counters.h"
#include "core/factory.h"
#include "cuda_test.h"
#include "nn/attention.h"
#include "nn/kv_cache.h"

using namespace keel;
using namespace keel::nn;

namespace {

const Device kGpu = Device::cuda(0);

// The counters that one cached_attention step at position `length` moved, after `length` random
// cached positions for a batch of B. The global slots are reserved up front, so the step does not
// grow them (growing copies the cache, once per doubling: not a per-token cost).
cuda::Counters decode_step(const AttentionSpec& spec, int64_t B, int64_t D, int64_t length) {
  NoGradGuard no_grad;
  KVCache cache(1, length + 1, length + 1);
  Generator gen(5);
  fill_random(cache, B, length, spec, D, DType::f32, kGpu, gen);
  const Shape shape{B, spec.heads(), 1, D};
  const Tensor q = randn(shape, gen, {DType::f32, kGpu}), k = randn(shape, gen, {DType::f32, kGpu}),
               v = randn(shape, gen, {DType::f32, kGpu});
  const cuda::Counters before = cuda::counters();
  const Tensor y = cached_attention(q, k, v, cache.layers[0], cache, length, spec);
  const cuda::Counters step = cuda::counters() - before;
  MESSAGE(step.summary());
  return step;
}

}  // namespace

TEST_CASE("CUDA decode: one layer's attention step is one launch, its keys split over blocks or not") {
  KEEL_REQUIRE_CUDA();
  for (int64_t B : {1, 2})
    for (int64_t D : {32, 64})
      for (const AttentionSpec& spec : {AttentionSpec::mhsa(6), AttentionSpec::ls(6, 5, 50)}) {
        CAPTURE(B);
        CAPTURE(D);
        CAPTURE(spec.local_heads());
        // 100 keys fit one split: the kernel writes the new key and value and the output itself.
        const cuda::Counters short_ctx = decode_step(spec, B, D, 100);
        CHECK(short_ctx.operations() == 1);
        CHECK(short_ctx.launches == 1);
        CHECK(short_ctx.syncs == 0);
        CHECK(short_ctx.allocations == 1);  // the output
        // 701 keys are split over blocks for the global heads; the last block of a row to finish
        // merges it (the cache's counters, DecodeCache::done), in the same launch.
        const cuda::Counters long_ctx = decode_step(spec, B, D, 700);
        CHECK(long_ctx.operations() == 1);
        CHECK(long_ctx.launches == 1);
        CHECK(long_ctx.syncs == 0);
        CHECK(long_ctx.allocations == 2);  // the output and the splits' workspace
      }
}

TEST_CASE("CUDA decode: the paper's attention layer at batch 1 is c_attn, one launch and c_proj") {
  KEEL_REQUIRE_CUDA();
  for (AttentionKind kind : {AttentionKind::mhsa, AttentionKind::ls}) {
    CAPTURE(std::string(attention_kind_name(kind)));
    GPT2Config c = GPT2Config::preset("paper");  // 6 heads of 32, no bias, LS: 5 local (w = 50) + 1 global
    c.attention = kind;
    Generator init(3);
    Attention attn(c, init, nullptr);
    attn.to(kGpu);
    NoGradGuard no_grad;
    KVCache cache(1, c.block_size, c.block_size);
    Generator gen(4);
    fill_random(cache, 1, 100, attn.spec(), c.head_dim(), DType::f32, kGpu, gen);
    const Tensor x = randn({1, 1, c.n_embd}, gen, {DType::f32, kGpu});
    const cuda::Counters before = cuda::counters();
    const Tensor y = attn.forward_cached_qkv(attn.c_attn.forward(x), cache, 0);
    const cuda::Counters step = cuda::counters() - before;
    MESSAGE(step.summary());
    CHECK(y.shape() == Shape{1, 1, c.n_embd});
    CHECK(step.library_calls == 2);  // c_attn, c_proj
    CHECK(step.launches == 1);       // the fused decode attention
    CHECK(step.copies == 0);         // no K/V slot copies, no concat, no transpose for c_proj
    CHECK(step.syncs == 0);
  }
}
