// The fused CUDA decode step (decode_attention_cached, ops/cuda/decode_attention.cu) against the
// CPU op on the same rounded inputs, output poisoned with NaN: MHSA and LS-attention, B = 1 and 2,
// D = 32 and 64 (and head dims padded below the kernel widths, 8 .. 256), contexts that fit one
// split of keys (one launch) and that need several (partial + combine), a local window wider than
// one split (the new key lands in a later chunk), and soft-capping; every dtype. The caches'
// unfilled slots are NaN, so a slot read that should not be, or a new key or value not written
// before its own query reads it, shows; the written slots must hold exactly the token's (rounded)
// key and value.
#include <doctest/doctest.h>

#include "core/cuda/counters.h"
#include "core/factory.h"
#include "cuda_compare.h"
#include "cuda_test.h"
#include "decode_cache.h"
#include "ops/decode_attention.h"
#include "ops/shape.h"

using namespace keel;
using namespace keel::cudatest;
using keel::decodetest::cache_before;

namespace {

// The cache's four tensors in dtype dt on the GPU, and the same rounded values in f32 on the CPU.
struct CachePair {
  DecodeCache dev, ref;
};
CachePair make_cache(const DecodeCache& host, DType dt) {
  CachePair c;
  Tensor* dev[] = {&c.dev.k_local, &c.dev.v_local, &c.dev.k_global, &c.dev.v_global};
  Tensor* ref[] = {&c.ref.k_local, &c.ref.v_local, &c.ref.k_global, &c.ref.v_global};
  const Tensor* in[] = {&host.k_local, &host.v_local, &host.k_global, &host.v_global};
  for (int i = 0; i < 4; ++i)
    if (in[i]->defined()) {
      const Pair p = make(*in[i], dt, false);
      *dev[i] = p.dev, *ref[i] = p.ref;
    }
  return c;
}

// Slot `slot` of a cache group (B, h, S, D) on the CPU, or an empty vector for an undefined one.
std::vector<float> slot_of(const Tensor& c, int64_t slot) {
  return c.defined() ? narrow(c, 2, slot, 1).to(Device::cpu()).to_vector<float>() : std::vector<float>();
}

// One decode step at position p over a text of random keys and values, GPU against CPU. With
// device_position, the GPU reads p from device memory (DecodeCache::position, as a step captured
// in a CUDA graph does) and sizes its grid for the `spare` slots past the text too.
void check_step(int64_t B, int64_t D, const AttentionSpec& spec, int64_t p, DType dt, uint64_t seed,
                bool device_position = false, int64_t spare = 40) {
  CAPTURE(dtype_name(dt));
  CAPTURE(B);
  CAPTURE(D);
  CAPTURE(spec.local_heads());
  CAPTURE(p);
  CAPTURE(device_position);
  NoGradGuard no_grad;
  const int64_t H = spec.heads(), S = p + spare;  // global slots past the text stay NaN
  const Tensor k = rnd({B, H, p + 1, D}, seed), v = rnd({B, H, p + 1, D}, seed + 1);
  CachePair cache = make_cache(cache_before(k, v, spec, p, S), dt);
  if (device_position) cache.dev.position = full({1}, double(p), {DType::i64, kGpu});
  const Pair q = make(rnd({B, H, 1, D}, seed + 2, 0.0, 2.0), dt, false);
  const Pair kn = make(narrow(k, 2, p, 1).contiguous(), dt, false);
  const Pair vn = make(narrow(v, 2, p, 1).contiguous(), dt, false);

  const Tensor ref = decode_attention_cached(q.ref, kn.ref, vn.ref, cache.ref, spec, p);
  poison({bytes_of(ref.shape(), dt)});
  // A replayed graph passes the host position of its capture: the kernel must not use it.
  const Tensor out = decode_attention_cached(q.dev, kn.dev, vn.dev, cache.dev, spec, device_position ? 0 : p);
  REQUIRE(out.device() == kGpu);
  CHECK(out.dtype() == dt);
  CHECK_CLOSE(out, ref, dt);
  // With a counter per row the split blocks merge the row themselves, in one launch: the same
  // bits, the counters zero again, one launch (the combine's is gone) when the keys are split.
  {
    DecodeCache one = cache.dev;
    one.done = zeros({B * H}, {DType::i32, kGpu});
    const cuda::Counters before = cuda::counters();
    const Tensor merged = decode_attention_cached(q.dev, kn.dev, vn.dev, one, spec, device_position ? 0 : p);
    CHECK((cuda::counters() - before).launches == 1);
    CHECK(merged.to(Device::cpu()).to_vector<double>() == out.to(Device::cpu()).to_vector<double>());
    CHECK(one.done.to(Device::cpu()).to_vector<int64_t>() == std::vector<int64_t>(static_cast<size_t>(B * H), 0));
  }
  // The token's key and value in their slots, exactly (a copy of the rounded values).
  const int64_t W = spec.max_local_window();
  CHECK(slot_of(cache.dev.k_local, W ? p % W : 0) == slot_of(cache.ref.k_local, W ? p % W : 0));
  CHECK(slot_of(cache.dev.v_local, W ? p % W : 0) == slot_of(cache.ref.v_local, W ? p % W : 0));
  CHECK(slot_of(cache.dev.k_global, p) == slot_of(cache.ref.k_global, p));
  CHECK(slot_of(cache.dev.v_global, p) == slot_of(cache.ref.v_global, p));
}

}  // namespace

TEST_CASE("CUDA fused decode step matches the CPU: MHSA and LS, one split and several") {
  KEEL_REQUIRE_CUDA();
  uint64_t seed = 3000;
  for (DType dt : kDtypes)
    for (int64_t B : {1, 2})
      for (int64_t D : {32, 64})
        for (const AttentionSpec& spec : {AttentionSpec::mhsa(6), AttentionSpec::ls(6, 5, 50)})
          for (int64_t p : {100, 700})  // 101 keys: one split; 701: three, merged by a second launch
            check_step(B, D, spec, p, dt, seed += 3);
}

TEST_CASE("CUDA fused decode step matches the CPU: a ring's first lap, a wide window over two splits, a cap") {
  KEEL_REQUIRE_CUDA();
  uint64_t seed = 4000;
  for (DType dt : kDtypes) {
    check_step(2, 32, AttentionSpec::ls(6, 5, 50), 20, dt, seed += 3);    // the ring has not wrapped yet
    check_step(1, 64, AttentionSpec::ls(4, 2, 300), 700, dt, seed += 3);  // local rows span two chunks
    check_step(2, 32, AttentionSpec::ls(3, 3, 64), 500, dt, seed += 3);   // local heads only: no global group
    AttentionSpec capped = AttentionSpec::ls(4, 1, 30);
    capped.softcap = 2.0;
    check_step(1, 32, capped, 300, dt, seed += 3);  // the cap bites
  }
}

TEST_CASE("CUDA fused decode step matches the CPU: head dims off the kernel widths") {
  KEEL_REQUIRE_CUDA();
  uint64_t seed = 5000;
  for (DType dt : kDtypes)
    for (int64_t D : {8, 16, 40, 136, 256})  // each padded below its kernel width, and the widest
      for (int64_t p : {100, 700}) check_step(1, D, AttentionSpec::ls(2, 1, 50), p, dt, seed += 3);
}

TEST_CASE("CUDA fused decode step with its position on the device: a grid for the slots, chunks past it idle") {
  KEEL_REQUIRE_CUDA();
  uint64_t seed = 6000;
  for (DType dt : kDtypes)
    for (const AttentionSpec& spec : {AttentionSpec::mhsa(6), AttentionSpec::ls(6, 5, 50)})
      for (int64_t p : {0, 20, 300, 700}) {
        check_step(1, 32, spec, p, dt, seed += 3, true);        // the grid as the host's would be, or one split more
        check_step(2, 64, spec, p, dt, seed += 3, true, 1200);  // several chunks wholly past the position
      }
}
