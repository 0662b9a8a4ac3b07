// The CUDA flash-attention kernels (ops/cuda/attention_*.cu) against the CPU reference op, case by
// case: head patterns, windows on tile edges, soft-capping and scales, the front end with autograd
// and strided inputs, the max-logit statistic, bad input. bf16 and f16 run the tensor-core (mma)
// kernels, f32 the FMA kernels; attention_cuda_check.h has the reference, the tolerances and the
// comparisons, test_attention_grid_cuda.cpp the grid over T, head dims and windows.
//
// Each case needs a GPU and reports itself skipped without one (never in the emulated build,
// where CI runs it). The tile arithmetic's tests are in test_attention_tiles_cuda.cpp.
#include <doctest/doctest.h>

#ifdef KEEL_WITH_CUDA
#include <cuda_runtime.h>  // the device's shared-memory limit, below
#endif

#include <chrono>
#include <cmath>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "attention_cuda_check.h"
#include "core/autograd.h"
#include "core/cuda/counters.h"
#include "core/determinism.h"
#include "core/factory.h"
#include "ops/shape.h"

using namespace keel;
using namespace keel::attention_test;

TEST_CASE("CUDA attention matches the CPU: MHSA, every dtype and head dim") {
  KEEL_REQUIRE_CUDA();
  uint64_t seed = 100;
  for (DType dt : kDTypes)
    for (int64_t D : {32, 64, 128}) check_case({2, 129, D, {0, 0}}, dt, ++seed);
}

TEST_CASE("CUDA attention matches the CPU: LS-attention, 5 local heads of window 50 and 1 global") {
  KEEL_REQUIRE_CUDA();
  const std::vector<int64_t> ls = AttentionSpec::ls(6, 5, 50).window;
  uint64_t seed = 200;
  for (DType dt : kDTypes) {
    check_case({2, 300, 32, ls}, dt, ++seed);  // the paper's head dim
    check_case({1, 257, 64, ls}, dt, ++seed);
    check_case({1, 200, 128, ls}, dt, ++seed);
  }
}

TEST_CASE("CUDA attention matches the CPU: window 1, windows at and beyond T, tile-sized windows") {
  KEEL_REQUIRE_CUDA();
  uint64_t seed = 300;
  for (DType dt : kDTypes) {
    check_case({1, 70, 64, {1, 70, 75, 1000, 0}}, dt, ++seed);
    check_case({1, 200, 64, {31, 32, 33, 63, 64, 65, 127, 128}}, dt, ++seed);  // bands on tile edges
  }
  // Window 1: each query sees only itself, so out = v exactly in f32 (p = exp(0) = 1, l = 1).
  Generator gen(301);
  const Tensor q = randn({2, 2, 77, 32}, gen), k = randn({2, 2, 77, 32}, gen), v = randn({2, 2, 77, 32}, gen);
  const Device dev = Device::cuda(0);
  AttentionResult r = attention(q.to(dev), k.to(dev), v.to(dev), {0, {1, 1}});
  CHECK(r.out.to_vector<float>() == v.to_vector<float>());
  const Tensor vb = v.to(DType::bf16);  // and in bf16, whose p = 1 is exact too
  r = attention(q.to(DType::bf16).to(dev), k.to(DType::bf16).to(dev), vb.to(dev), {0, {1, 1}});
  CHECK(r.out.to_vector<float>() == vb.to_vector<float>());
}

TEST_CASE("CUDA attention matches the CPU: odd sequence lengths and T below one tile") {
  KEEL_REQUIRE_CUDA();
  uint64_t seed = 400;
  for (DType dt : kDTypes)
    for (int64_t T : {1, 7, 16, 31, 63, 65, 129, 1000}) {
      if (T > 200 && keel::testing::reduced_sizes()) continue;
      check_case({2, T, 64, {0, 3, 50}}, dt, ++seed);
    }
  check_case({3, 5, 32, {0, 2, 1, 5}}, DType::bf16, ++seed);  // B > 2, H = 4, all heads in one tile
}

TEST_CASE("CUDA attention matches the CPU: logit soft-capping, custom and negative scales") {
  KEEL_REQUIRE_CUDA();
  uint64_t seed = 500;
  for (DType dt : kDTypes) {
    check_case({2, 100, 64, {0, 7}, 0, 5.0, 3.0}, dt, ++seed);      // logits ~ N(0, 9): the cap at 5 bites
    check_case({1, 90, 32, {0, 20}, 0.9, 2.0, 1.0}, dt, ++seed);    // scale 0.9: cap at 2 saturates
    check_case({1, 80, 128, {0, 10}, 0.05, 0, 1.0}, dt, ++seed);    // small scale: near-uniform rows
    check_case({1, 66, 32, {0, 10}, -0.4, 0, 1.0}, dt, ++seed);     // negative scale
  }
}

TEST_CASE("CUDA attention through the front end: autograd, strided and misaligned inputs, empty inputs") {
  KEEL_REQUIRE_CUDA();
  const Device dev = Device::cuda(0);
  Generator gen(600);
  const int64_t B = 2, T = 90, H = 3, D = 64;
  const AttentionSpec spec{0, {0, 5, 40}, 0};
  // Leaves (B, T, H, D), transposed to (B, H, T, D): a strided view, as the model produces, and
  // the gradients must flow back through it.
  auto heads = [](const Tensor& x) { return transpose(x, 1, 2); };
  const Tensor qh = randn({B, T, H, D}, gen), kh = randn({B, T, H, D}, gen), vh = randn({B, T, H, D}, gen);
  const Tensor g = randn({B, H, T, D}, gen);
  for (DType dt : kDTypes) {
    INFO(std::string(dtype_name(dt)));
    auto leaves = [&](std::optional<Device> to_dev, DType compute) {
      std::vector<Tensor> xs;
      for (const Tensor& x : {qh, kh, vh}) {
        Tensor y = x.to(dt).to(compute);  // rounded to dt first, so both runs see the same values
        if (to_dev) y = y.to(*to_dev);
        xs.push_back(y.detach().set_requires_grad(true));
      }
      return xs;
    };
    std::vector<Tensor> in = leaves(dev, dt), in64 = leaves(std::nullopt, DType::f64);
    AttentionResult r = attention(heads(in[0]), heads(in[1]), heads(in[2]), spec);
    CHECK(r.out.device() == dev);
    CHECK(r.max_logit.device() == dev);
    CHECK(r.max_range.device() == dev);
    CHECK(r.out.requires_grad());
    r.out.backward(g.to(dt).to(dev));
    AttentionResult ref = attention(heads(in64[0]), heads(in64[1]), heads(in64[2]), spec);
    ref.out.backward(g.to(dt).to(DType::f64));
    const double tol = tolerance(dt);
    check_close("out", r.out, ref.out, tol);
    check_stat("max_logit", r.max_logit, ref.max_logit, stat_tolerance(dt));
    check_stat("max_range", r.max_range, ref.max_range, stat_tolerance(dt));
    const char* names[] = {"dq", "dk", "dv"};
    for (int a = 0; a < 3; ++a) {
      REQUIRE(in[a].grad().defined());
      CHECK(in[a].grad().dtype() == dt);
      CHECK(in[a].grad().device() == dev);
      if (a == 2) check_close(names[a], in[a].grad(), in64[a].grad(), tol);
    }
    // dq and dk against the size of their terms (term_scales), in the kernels' (B, H, T, D) layout.
    const Tensor q64 = heads(in64[0]).contiguous(), k64 = heads(in64[1]).contiguous(), v64 = heads(in64[2]).contiguous();
    const Tensor g64 = g.to(dt).to(DType::f64);
    const double scale = 1 / std::sqrt(static_cast<double>(D));
    const Grads stats = cpu_reference(q64, k64, v64, g64, spec.window, scale, 0);
    const TermScales ts = term_scales(q64, k64, v64, g64, stats, spec.window, scale, 0, min_normal(dt));
    check_by_terms("dq", heads(in[0].grad()).contiguous(), heads(in64[0].grad()).contiguous(), ts.dq, tol);
    check_by_terms("dk", heads(in[1].grad()).contiguous(), heads(in64[1].grad()).contiguous(), ts.dk, tol);
  }
  // A contiguous view at an odd element offset: not 16-byte aligned, so the kernels get a copy.
  const Tensor flat = randn({1 + 3 * B * H * T * D}, gen).to(dev);
  const Shape shape{B, H, T, D};
  const Tensor qv = flat.as_strided(shape, contiguous_strides(shape), 1);
  const Tensor kv = flat.as_strided(shape, contiguous_strides(shape), 1 + B * H * T * D);
  const Tensor vv = flat.as_strided(shape, contiguous_strides(shape), 1 + 2 * B * H * T * D);
  REQUIRE(qv.is_contiguous());
  for (DType dt : kDTypes) {
    INFO(dtype_name(dt));
    const Tensor qd = qv.to(dt), kd = kv.to(dt), vd = vv.to(dt);
    const Tensor flat_d = flat.to(dt);
    const Tensor qo = flat_d.as_strided(shape, contiguous_strides(shape), 1);
    const Tensor ko = flat_d.as_strided(shape, contiguous_strides(shape), 1 + B * H * T * D);
    const Tensor vo = flat_d.as_strided(shape, contiguous_strides(shape), 1 + 2 * B * H * T * D);
    const AttentionResult odd = attention(qo, ko, vo, spec);
    const AttentionResult packed = attention(qd, kd, vd, spec);
    CHECK(odd.out.to_vector<float>() == packed.out.to_vector<float>());
    // Empty inputs: empty output, zero statistic.
    const AttentionResult e = attention(zeros({1, 2, 0, 64}, {dt, dev}), zeros({1, 2, 0, 64}, {dt, dev}),
                                        zeros({1, 2, 0, 64}, {dt, dev}), AttentionSpec::mhsa(2));
    CHECK(e.out.numel() == 0);
    CHECK(e.max_logit.to_vector<float>() == std::vector<float>{0, 0});
    CHECK(e.max_range.to_vector<float>() == std::vector<float>{0, 0});
  }
}

TEST_CASE("CUDA attention statistics: a NaN logit shows in its head only, and the backward is deterministic") {
  KEEL_REQUIRE_CUDA();
  const Device dev = Device::cuda(0);
  Generator gen(700);
  Tensor q = randn({2, 2, 100, 32}, gen), k = randn({2, 2, 100, 32}, gen), v = randn({2, 2, 100, 32}, gen);
  const std::vector<int64_t> window{0, 10};
  const double scale = 1 / std::sqrt(32.0);
  std::vector<float> qv = q.to_vector<float>();
  qv[((1 * 2 + 1) * 100 + 70) * 32 + 5] = std::nanf("");  // batch 1, head 1, query 70
  const Tensor qn = from_vector(qv, q.shape());
  for (DType dt : kDTypes) {
    INFO(dtype_name(dt));
    AttentionResult r = attention(qn.to(dt).to(dev), k.to(dt).to(dev), v.to(dt).to(dev), {0, window, 0});
    const std::vector<float> m = r.max_logit.to_vector<float>(), range = r.max_range.to_vector<float>();
    CHECK(std::isnan(m[1]));
    CHECK(std::isnan(range[1]));
    const std::vector<double> out = r.out.to_vector<double>();
    CHECK(std::isnan(out[((1 * 2 + 1) * 100 + 70) * 32]));      // the NaN query's row ...
    CHECK(std::isfinite(out[((1 * 2 + 1) * 100 + 69) * 32]));   // ... and no other
    CHECK(std::isfinite(out[((1 * 2 + 0) * 100 + 70) * 32]));
    const Grads ref = cpu_reference(q.to(dt), k.to(dt), v.to(dt), v.to(dt), window, scale, 0);
    CHECK(m[0] == doctest::Approx(ref.max_logit.to_vector<float>()[0]).epsilon(tolerance(dt)));
    CHECK(range[0] == doctest::Approx(ref.max_range.to_vector<float>()[0]).epsilon(tolerance(dt)));

    // Two runs give the same bits: the f32 backward has no atomics, the mma backward adds dQ
    // in a fixed order (test_attention_order_cuda.cpp: whatever order the blocks start in).
    const Grads a = cuda_run(q.to(dt), k.to(dt), v.to(dt), v.to(dt), window, scale, 0);
    const Grads b = cuda_run(q.to(dt), k.to(dt), v.to(dt), v.to(dt), window, scale, 0);
    const std::vector<std::pair<Tensor, Tensor>> runs = {{a.out, b.out}, {a.dq, b.dq}, {a.dk, b.dk}, {a.dv, b.dv}};
    for (const auto& [x, y] : runs) CHECK(x.to_vector<double>() == y.to_vector<double>());
  }
}

TEST_CASE("CUDA attention backward with set_deterministic(false): dQ added in any order, the same gradients to rounding") {
  KEEL_REQUIRE_CUDA();
  Generator gen(710);
  // T 300: five query tiles of 64, three key tiles of 128, so a query tile gets dQ shares from
  // several key tiles, the adds the deterministic kernel orders; an MHSA head and a local one.
  // (In index order, the emulated GPU's default, both kernels add in the same order; in another
  // order, or on a GPU, the unordered one's dQ may differ from the ordered one's in the last bits.)
  const Tensor q = randn({1, 2, 300, 64}, gen), k = randn({1, 2, 300, 64}, gen), v = randn({1, 2, 300, 64}, gen),
               g = randn({1, 2, 300, 64}, gen);
  const std::vector<int64_t> window{0, 100};
  const double scale = 1 / std::sqrt(64.0);
  for (DType dt : {DType::bf16, DType::f16}) {
    INFO(dtype_name(dt));
    const Grads ref = cpu_reference(q.to(dt), k.to(dt), v.to(dt), g.to(dt), window, scale, 0);
    REQUIRE(deterministic());
    const cuda::Counters before = cuda::counters();
    const Grads ordered = cuda_run(q.to(dt), k.to(dt), v.to(dt), g.to(dt), window, scale, 0);
    const cuda::Counters with_order = cuda::counters() - before;
    Grads any_order;
    cuda::Counters any_order_counts;
    {
      const DeterministicGuard off(false);
      CHECK_FALSE(deterministic());
      const cuda::Counters start = cuda::counters();
      any_order = cuda_run(q.to(dt), k.to(dt), v.to(dt), g.to(dt), window, scale, 0);
      any_order_counts = cuda::counters() - start;
    }
    CHECK(deterministic());  // the guard restored the default
    // The unordered kernel ran: it has no hand-over flags, so one memset fewer.
    CHECK(any_order_counts.copies + 1 == with_order.copies);
    const double tol = tolerance(dt);
    check_close("dq", any_order.dq, ref.dq, tol);
    check_close("dk", any_order.dk, ref.dk, tol);
    check_close("dv", any_order.dv, ref.dv, tol);
    // dK and dV do not depend on the order of dQ's adds.
    CHECK(any_order.dk.to_vector<double>() == ordered.dk.to_vector<double>());
    CHECK(any_order.dv.to_vector<double>() == ordered.dv.to_vector<double>());
  }
}

TEST_CASE("CUDA attention rejects what it has no kernel for") {
  KEEL_REQUIRE_CUDA();
  const Device dev = Device::cuda(0);
  for (int64_t D : {12, 264}) {  // not a multiple of 8; past the widest kernel
    const Tensor x = zeros({1, 2, 8, D}, {DType::f32, dev});
    try {
      attention(x, x, x, AttentionSpec::mhsa(2));
      FAIL("no error for D = " << D);
    } catch (const ShapeError& e) {
      CHECK(std::string(e.what()).find(std::to_string(D)) != std::string::npos);
      CHECK(e.hint().find("multiples of 8 from 8 to 256") != std::string::npos);
    }
  }
  const Tensor d = zeros({1, 2, 8, 32}, {DType::f64, dev});
  CHECK_THROWS_AS(attention(d, d, d, AttentionSpec::mhsa(2)), DTypeError);
  const Tensor many = zeros({1, 129, 4, 32}, {DType::f32, dev});
  CHECK_THROWS_AS(attention(many, many, many, AttentionSpec::mhsa(129)), ShapeError);
  // The tensor-core kernels' grids hold a batch in dim z (two slots a sequence in the widest
  // backward): past 32767 sequences one call is refused, with what to do.
  const Tensor wide = zeros({32768, 1, 1, 8}, {DType::bf16, dev});
  try {
    attention(wide, wide, wide, AttentionSpec::mhsa(1));
    FAIL("no error for a batch of 32768");
  } catch (const ShapeError& e) {
    CHECK(e.hint().find("split the batch") != std::string::npos);
  }
}

TEST_CASE("CUDA attention matches the CPU with more (batch, head) pairs than the GPU has SMs") {
  KEEL_REQUIRE_CUDA();
  // The grid's (batch, head) dimension beyond one wave of blocks: each block must still find its own.
  const int64_t sms = cuda::device_info(0).multiprocessors, H = 8;
  const int64_t B = keel::testing::reduced_sizes() ? 2 : (sms + H) / H + 1;  // B * H > sms
  std::vector<int64_t> window(H, 0);
  for (int64_t h = 0; h < H; h += 2) window[h] = 5;
  uint64_t seed = 950;
  for (DType dt : kDTypes) check_case({B, 65, 32, window}, dt, ++seed);
}

TEST_CASE("CUDA attention at long sequences: a local head stays linear in T (smoke, timings printed)") {
  KEEL_REQUIRE_CUDA();
  if (keel::testing::reduced_sizes()) return;  // a benchmark, not a sanitizer target
  const Device dev = Device::cuda(0);
  Generator gen(800);
  // Correctness of a local head at T = 16384 against the CPU (cheap there too: O(T * W)).
  check_case({1, 16384, 64, {50}}, DType::bf16, 801);
  // Forward + backward times of one head, local (w = 50) against global, at growing T. A local
  // head's time should roughly double with T; a global head's roughly quadruple.
  auto time_ms = [&](int64_t T, int64_t w) {
    const Shape s{1, 1, T, 64};
    Tensor q = randn(s, gen).to(DType::bf16).to(dev), k = randn(s, gen).to(DType::bf16).to(dev),
           v = randn(s, gen).to(DType::bf16).to(dev), g = randn(s, gen).to(DType::bf16).to(dev);
    for (Tensor* x : {&q, &k, &v}) x->set_requires_grad(true);
    double best = 1e30;
    for (int rep = 0; rep < 3; ++rep) {
      cuda::synchronize(0);
      const auto t0 = std::chrono::steady_clock::now();
      AttentionResult r = attention(q, k, v, {0, {w}, 0});
      r.out.backward(g);
      cuda::synchronize(0);
      best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      CHECK(std::isfinite(q.grad().to(DType::f32).to_vector<float>()[0]));
    }
    return best;
  };
  for (int64_t T : {1024, 2048, 4096, 8192})
    MESSAGE("T " << T << ": local (w = 50) " << time_ms(T, 50) << " ms, global " << time_ms(T, 0)
                 << " ms (forward + backward, one head, D = 64, bf16)");
}

// f32 at width 256 runs the FMA kernels with about 220 KB of shared memory per block: an H100
// has it, an A100 (163 KB) does not, and there the call must say so instead of failing a launch.
// ctest runs this case twice on the emulated GPU: as an H100 and, with KEEL_EMU_GPU=a100, as an A100.
// It reads the limit from the CUDA runtime, which a build without CUDA does not link.
#ifdef KEEL_WITH_CUDA
TEST_CASE("CUDA f32 attention at head dim 256: runs where the shared memory fits, else a DeviceError says why") {
  KEEL_REQUIRE_CUDA();
  const cuda::DeviceInfo info = cuda::device_info(0);
  CAPTURE(info.name);
  Generator gen(7);
  const Device dev = Device::cuda(0);
  Tensor q = randn({1, 1, 40, 256}, gen, {DType::f32, dev}), k = randn({1, 1, 40, 256}, gen, {DType::f32, dev}),
         v = randn({1, 1, 40, 256}, gen, {DType::f32, dev});
  int optin = 0;
  REQUIRE(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0) == cudaSuccess);
  if (optin >= 220 * 1024) {
    CHECK(attention(q, k, v, AttentionSpec::mhsa(1)).out.to(Device::cpu()).numel() == 40 * 256);
  } else {
    try {
      (void)attention(q, k, v, AttentionSpec::mhsa(1));
      FAIL("expected a DeviceError on a GPU with " << optin << " bytes of shared memory per block");
    } catch (const DeviceError& e) {
      const std::string msg = e.what();
      CHECK(msg.find("KB of shared memory per block") != std::string::npos);
      CHECK(msg.find("bf16 or f16") != std::string::npos);
    }
  }
}
#endif  // KEEL_WITH_CUDA
