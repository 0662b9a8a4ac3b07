// The CUDA part of core: device discovery, the caching allocator, host/device copies and
// core's elementwise kernels (strided copy with casts, fill, +=). Without a GPU these tests
// report themselves as skipped; the messages-without-a-device test runs everywhere.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "core/autograd.h"
#include "core/copy.h"
#include "core/cuda/caching_allocator.h"
#include "core/cuda/counters.h"
#include "core/factory.h"
#include "cuda_test.h"

using namespace keel;

TEST_CASE("size classes of the caching allocator") {
  CHECK(cuda::round_size(0) == 512);
  CHECK(cuda::round_size(1) == 512);
  CHECK(cuda::round_size(513) == 1024);
  CHECK(cuda::round_size((1 << 20) - 1) == (1 << 20));
  CHECK(cuda::round_size((1 << 20) + 1) == (2 << 20));
  CHECK(cuda::round_size(5 << 20) == (6 << 20));
}

TEST_CASE("asking for a missing device gives a DeviceError with the way out") {
  if (cuda::is_available()) return;  // the situation this test is about does not arise
  CHECK(cuda::device_count() == 0);
  try {
    (void)zeros({2}).to(Device::cuda(0));
    FAIL("no error");
  } catch (const DeviceError& e) {
    CHECK(std::string(e.what()).find("CUDA") != std::string::npos);  // "no CUDA device 0" or "built without CUDA"
    CHECK_FALSE(e.hint().empty());
  }
  CHECK_THROWS_AS(zeros({2}, {DType::f32, Device::cuda(0)}), DeviceError);
}

TEST_CASE("device discovery") {
  KEEL_REQUIRE_CUDA();
  auto info = cuda::device_info(0);
  CHECK_FALSE(info.name.empty());
  CHECK(info.total_memory > 0);
  CHECK(info.major >= 7);
  CHECK_THROWS_AS(cuda::device_info(cuda::device_count()), DeviceError);
}

TEST_CASE("the caching allocator reuses blocks and counts bytes") {
  KEEL_REQUIRE_CUDA();
  Device d = Device::cuda(0);
  auto before = memory_stats(d);
  void* p = allocate(d, 3000);
  CHECK(memory_stats(d).current == before.current + 3072);
  deallocate(d, p, 3000);
  void* q = allocate(d, 2900);  // same size class: the cached block comes back
  CHECK(q == p);
  deallocate(d, q, 2900);
  CHECK(memory_stats(d).current == before.current);
  CHECK(memory_stats(d).peak >= before.current + 3072);
  cuda::empty_cache(0);
  CHECK(memory_stats(d).reserved == memory_stats(d).current);
}

TEST_CASE("host <-> device copies round-trip every dtype") {
  KEEL_REQUIRE_CUDA();
  Generator gen(1);
  for (DType t : {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i32, DType::i64}) {
    Tensor h = randn({37, 5}, gen, {DType::f64}, 0.0, 10.0).to(t);
    Tensor back = h.to(Device::cuda(0)).to(Device::cpu());
    CHECK(back.dtype() == t);
    CHECK(back.to_vector<double>() == h.to_vector<double>());
  }
}

TEST_CASE("device-to-host reads are exact on both sides of the pinned buffer's 4 KB") {
  KEEL_REQUIRE_CUDA();
  // Up to 4 KB a read goes through a pinned buffer reused by every read; past it, straight into
  // the destination. Interleaved sizes: a read must never see a previous, longer one's bytes.
  Generator gen(2);
  for (int64_t n : {1, 2, 1023, 1024, 1025, 4096, 3, 1024}) {
    Tensor h = randn({n}, gen, {DType::f32});
    CHECK(h.to(Device::cuda(0)).to_vector<float>() == h.to_vector<float>());
  }
  Tensor id = full({1}, 50256.0, {DType::i64, Device::cuda(0)});  // a decode step's token id
  CHECK(id.to_vector<int64_t>() == std::vector<int64_t>{50256});
}

TEST_CASE("device casts and strided copies match the CPU, on poisoned outputs") {
  KEEL_REQUIRE_CUDA();
  Generator gen(2);
  Tensor h = randn({7, 9, 5}, gen);
  Tensor d = h.to(Device::cuda(0));
  for (DType t : {DType::f64, DType::bf16, DType::f16, DType::i32}) {
    // Poison: NaN, or for integers a value randn never rounds to (NaN has no integer value).
    const double poison = t == DType::i32 ? -2147483648.0 : std::nan("");
    Tensor out = full(h.shape(), poison, {t}).to(Device::cuda(0));
    copy_(out, d);
    CHECK(out.to_vector<double>() == h.to(t).to_vector<double>());
  }
  // A transposed (strided) view packs the same way on both devices.
  Tensor ht = h.as_strided({5, 9, 7}, {1, 5, 45}, 0);
  Tensor dt = d.as_strided({5, 9, 7}, {1, 5, 45}, 0);
  CHECK(dt.contiguous().to_vector<float>() == ht.contiguous().to_vector<float>());
}

TEST_CASE("device copies keep every i64 bit and convert integers without a detour through double") {
  KEEL_REQUIRE_CUDA();
  const Device gpu = Device::cuda(0);
  constexpr int64_t big = (int64_t{1} << 53) + 1;  // the first integer a double cannot hold
  const std::vector<int64_t> v = {big, std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min(), -big,
                                  (int64_t{1} << 32) + 5, -1, 0, int64_t{1} << 31};
  std::vector<int64_t> vt;  // v as (2, 4) transposed to (4, 2)
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 2; ++j) vt.push_back(v[j * 4 + i]);
  std::vector<int32_t> low, low_t;  // i64 -> i32 keeps the low 32 bits (C++20, PyTorch)
  for (int64_t x : v) low.push_back(static_cast<int32_t>(x));
  for (int64_t x : vt) low_t.push_back(static_cast<int32_t>(x));

  // Host -> device lands through a same-dtype device copy (the byte path); device -> device
  // clone is the byte path again; an offset view of whole rows is contiguous: bytes too.
  Tensor a = from_vector<int64_t>(v, {2, 4}).to(gpu);
  CHECK(a.to_vector<int64_t>() == v);
  CHECK(a.clone().to_vector<int64_t>() == v);
  CHECK(a.as_strided({1, 4}, {4, 1}, 4).contiguous().clone().to_vector<int64_t>() ==
        std::vector<int64_t>(v.begin() + 4, v.end()));
  // Strided, same dtype: the strided kernel, i64 -> i64 with no conversion.
  Tensor t = a.as_strided({4, 2}, {1, 4}, 0);
  CHECK(t.contiguous().to_vector<int64_t>() == vt);
  Tensor dst = zeros({2, 4}, {DType::i64, gpu}).as_strided({4, 2}, {1, 4}, 0);
  copy_(dst, t.contiguous());  // packed -> strided destination
  CHECK(dst.to_vector<int64_t>() == vt);
  // i64 -> i32, contiguous (the flat conversion kernel) and strided (the strided kernel).
  CHECK(a.to(DType::i32).to_vector<int32_t>() == low);
  CHECK(t.to(DType::i32).to_vector<int32_t>() == low_t);
  // i32 -> i64 and back, exact.
  const std::vector<int32_t> w = {std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max(), -1, 7};
  Tensor w32 = from_vector<int32_t>(w, {4}).to(gpu);
  CHECK(w32.to(DType::i64).to_vector<int64_t>() == std::vector<int64_t>(w.begin(), w.end()));
  CHECK(w32.to(DType::i64).to(DType::i32).to_vector<int32_t>() == w);
  // Floating <-> integer still go through double, as on the CPU: truncation toward zero.
  Tensor f = from_vector<double>({2.9, -2.9, 1e15 + 0.5}, {3}).to(gpu);
  CHECK(f.to(DType::i64).to_vector<int64_t>() == std::vector<int64_t>{2, -2, 1000000000000000});
  // A scalar, and a copy of a tensor onto itself.
  Tensor s = from_vector<int64_t>({big}, {}).to(gpu);
  CHECK(s.clone().to_vector<int64_t>() == std::vector<int64_t>{big});
  copy_(a, a);
  CHECK(a.to_vector<int64_t>() == v);
}

TEST_CASE("fill and += on the device, the engine accumulates device gradients") {
  KEEL_REQUIRE_CUDA();
  Tensor a = full({1000}, 1.5, {DType::f32, Device::cuda(0)});
  Tensor b = full({1000}, 2.0, {DType::f32, Device::cuda(0)});
  accumulate_into(a, b);
  for (float v : a.to_vector<float>()) CHECK(v == 3.5f);
  // Into a strided window (SliceBackward::add_into), in place and in one launch, from a strided
  // source, bf16: the same bits as the CPU's add.
  std::vector<float> cpu;
  for (const Device dev : {Device::cpu(), Device::cuda(0)}) {
    Tensor acc = full({4, 5, 24}, 0.25, {DType::bf16, dev});
    Tensor window = acc.as_strided({4, 5, 8}, {120, 24, 1}, 8);
    std::vector<float> gv(160);
    for (size_t i = 0; i < gv.size(); ++i) gv[i] = 0.1f * float(i);
    const Tensor g = from_vector(gv, {4, 8, 5}).to(DType::bf16).to(dev);
    const Tensor gt = g.as_strided({4, 5, 8}, {40, 1, 5}, 0);  // g's last two dims swapped
    const cuda::Counters before = cuda::counters();
    accumulate_into(window, gt);
    if (dev.is_cuda()) CHECK((cuda::counters() - before).operations() == 1);
    const std::vector<float> got = acc.to(DType::f32).to_vector<float>();
    if (dev.is_cpu()) cpu = got;
    else CHECK(got == cpu);
  }
  // A leaf on the CPU used twice through device copies: its gradient is summed on the way back.
  Tensor x = ones({4}, {DType::f32, Device::cpu(), true});
  Tensor y1 = x.to(Device::cuda(0)), y2 = x.to(Device::cuda(0));
  y1.backward(full({4}, 2.0, {DType::f32, Device::cuda(0)}));
  y2.backward(full({4}, 3.0, {DType::f32, Device::cuda(0)}));
  CHECK(x.grad().to_vector<float>() == std::vector<float>(4, 5.0f));
}
