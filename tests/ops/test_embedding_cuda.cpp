// The CUDA embedding's backward groups the positions by id on the device (ops/cuda/embedding.cu):
// its gradient must be the host-grouped one bit for bit (per id, the rows summed in ascending
// position order in f32, then added to the row), with no wait on the host for the ids.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "core/cuda/counters.h"
#include "core/autograd.h"
#include "core/factory.h"
#include "core/random.h"
#include "cuda_compare.h"
#include "cuda_test.h"
#include "ops/embedding.h"

using namespace keel;
using namespace keel::cudatest;

namespace {
// ids (N) in [0, V): a few ids hundreds of times each (0 and V-1 among them), the rest spread.
std::vector<int64_t> repeated_ids(int64_t N, int64_t V, uint64_t seed) {
  std::vector<int64_t> ids(N);
  const int64_t hot[] = {0, V - 1, V / 2, 7 % V};
  for (int64_t n = 0; n < N; ++n) {
    const double u = philox_uniform(seed, 0, uint64_t(n));
    ids[n] = u < 0.8 ? hot[n % 4] : static_cast<int64_t>(u * double(V)) % V;
  }
  return ids;
}

// g (N, C) as f32 values of the gradient's dtype -> gw (V, C): ids' rows summed as the kernel
// sums them, in f32, positions ascending, added to a zero row.
std::vector<float> host_grouped(const std::vector<float>& g, const std::vector<int64_t>& ids, int64_t V, int64_t C) {
  std::vector<float> acc(size_t(V * C), 0.0f);
  for (size_t n = 0; n < ids.size(); ++n)
    for (int64_t c = 0; c < C; ++c) acc[size_t(ids[n] * C + c)] += g[n * size_t(C) + size_t(c)];
  for (float& a : acc) a = 0.0f + a;
  return acc;
}
}  // namespace

TEST_CASE("cuda embedding backward: many repeated ids give the host-grouped gradient bit for bit") {
  KEEL_REQUIRE_CUDA();
  struct Case { int64_t V, C, N; };
  // N over several placement chunks; V over several scan chunks, one above 64k.
  for (Case k : {Case{1000, 13, 1200}, Case{70001, 64, 2000}, Case{3, 8, 700}})
    for (DType dt : {DType::f32, DType::bf16})
      for (DType it : {DType::i64, DType::i32}) {
        CAPTURE(k.V);
        CAPTURE(std::string(dtype_name(dt)));
        CAPTURE(std::string(dtype_name(it)));
        const std::vector<int64_t> ids = repeated_ids(k.N, k.V, 51 + uint64_t(k.V));
        Tensor w = zeros({k.V, k.C}, {dt, kGpu}).set_requires_grad(true);
        const Tensor g = rnd({k.N, k.C}, 52).to(kGpu).to(dt);
        const Tensor dids = from_vector<int64_t>(ids, {k.N}).to(it).to(kGpu);
        embedding(w, dids).backward(g);
        std::vector<float> ref = host_grouped(g.to(DType::f32).to_vector<float>(), ids, k.V, k.C);
        ref = from_vector<float>(ref, {k.V, k.C}).to(dt).to(DType::f32).to_vector<float>();
        CHECK(w.grad().to(DType::f32).to_vector<float>() == ref);
      }
}

TEST_CASE("cuda embedding forward and backward with a gradient wait on the host 0 times") {
  KEEL_REQUIRE_CUDA();
  Tensor w = rnd({500, 32}, 53).to(kGpu).detach().set_requires_grad(true);
  const Tensor ids = from_vector<int64_t>(repeated_ids(600, 500, 54), {600}).to(kGpu);
  const Tensor g = rnd({600, 32}, 55).to(kGpu);
  const cuda::Counters before = cuda::counters();
  Tensor out = embedding(w, ids);
  const cuda::Counters forward = cuda::counters() - before;
  out.backward(g);
  const cuda::Counters both = cuda::counters() - before;
  CHECK(forward.syncs == 0);
  CHECK(both.syncs == 0);
  CHECK(both.launches - forward.launches >= 4);  // histogram, scan, placement, sums
}

TEST_CASE("cuda embedding with a gradient: a bad id is the IndexError, raised at the next sync") {
  KEEL_REQUIRE_CUDA();
  Tensor w = rnd({100, 16}, 56).to(kGpu).detach().set_requires_grad(true);
  const Tensor bad = from_vector<int64_t>({3, 100, 7, 3}, {4}).to(kGpu);
  const Tensor g = rnd({4, 16}, 57).to(kGpu);
  const cuda::Counters before = cuda::counters();
  Tensor out = embedding(w, bad);
  out.backward(g);  // the bad id falls in no bucket: nothing is read or written out of bounds
  CHECK((cuda::counters() - before).syncs == 0);
  try {
    (void)w.grad().to_vector<float>();
    FAIL("no error for id 100 of a table of 100 rows");
  } catch (const IndexError& e) {
    const std::string m = e.what();
    CHECK_MESSAGE(m.find("id 100 at position 1") != std::string::npos, m);
    CHECK_MESSAGE(m.find("outside the table of 100 rows") != std::string::npos, m);
  }
  // Reported once: a good lookup and its gradient go through afterwards.
  w.zero_grad();
  embedding(w, from_vector<int64_t>({3, 99, 3}, {3}).to(kGpu)).backward(ones({3, 16}, {DType::f32, kGpu}));
  const std::vector<float> gw = w.grad().to_vector<float>();
  CHECK(gw[3 * 16] == 2.0f);
  CHECK(gw[99 * 16 + 15] == 1.0f);
  CHECK(gw[0] == 0.0f);
}
