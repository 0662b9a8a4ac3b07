// sm_90's warpgroup MMA (core/cuda/wgmma.cuh) on the emulated GPU, against the PTX ISA's own
// examples: the descriptor's bit fields, shared-memory tiles laid out by the ISA's canonical
// layouts (written here in its CuTe notation, shape : stride in elements) with each swizzle
// applied as TMA writes it (the 16-byte chunk index XOR the 128-byte row index, on the address),
// and the accumulator fragment of its figure. Products of small integers are exact, so every
// result is compared exactly. Then each mistake a kernel can make shows: accumulators read
// before the wait are NaN, a tile in another swizzle multiplies wrong, a tile another warpgroup
// overwrites before the wait is read overwritten, and a missing fence, a
// warpgroup that disagrees, a partial warpgroup, a warp that never issues and an address outside
// shared memory are errors.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/cuda/check.h"
#include "core/cuda/launch.cuh"
#include "core/cuda/runtime.h"
#include "core/cuda/wgmma.cuh"
#include "core/error.h"
#include "emu_test_helpers.h"

using keel::cuda::launch_kernel;
using keel::cuda::ptx::Swizzle;
using keel::emu_test::device_array;
using keel::emu_test::error_of;
namespace ptx = keel::cuda::ptx;

namespace {

// A mode of a CuTe layout: up to three (shape, stride) pairs, the first fastest.
struct Mode {
  int shape[3], stride[3];
  int offset(int c) const {
    int off = 0;
    for (int i = 0; i < 3 && shape[i] > 0; ++i) off += c % shape[i] * stride[i], c /= shape[i];
    return off;
  }
};

// One operand tile (rows = M or N, 16 k) as the ISA lays it out: its (mn, k) modes, the swizzle,
// and the descriptor's strides (bytes).
struct Tile {
  Mode mn, k;
  Swizzle swizzle;
  uint32_t lbo, sbo;
  bool mn_major;
};
uint32_t width(Swizzle s) { return s == Swizzle::b128 ? 128 : s == Swizzle::b64 ? 64 : s == Swizzle::b32 ? 32 : 0; }

// The canonical layouts of the ISA's table, bf16 (T = 8), for `rows` rows and 16 k, as
// {mn mode, k mode, swizzle, lbo, sbo, MN-major}. Without swizzle, 8 x 8 core matrices of 128
// bytes: K-major ones 256 bytes apart along the rows and all the rows' apart along k; MN-major
// ones 128 bytes apart along the rows. Swizzled, rows of w elements, 8 to an atom.
Tile k_major(Swizzle s, int rows) {
  const int w = int(width(s)) / 2;  // elements a row holds
  const uint32_t k_step = 128 * uint32_t(rows) / 8 * 2;  // bytes between the two 8-k halves
  if (s == Swizzle::none)
    return {{{8, rows / 8, 0}, {8, 128, 0}}, {{8, 2, 0}, {1, int(k_step / 2), 0}}, s, k_step, 256, false};
  return {{{8, rows / 8, 0}, {w, 8 * w, 0}}, {{8, 2, 0}, {1, 8, 0}}, s, 16, uint32_t(16 * w), false};
}
Tile mn_major(Swizzle s, int rows) {
  if (s == Swizzle::none)
    return {{{8, rows / 8, 0}, {1, 64, 0}}, {{8, 2, 0}, {8, 64 * rows / 8, 0}}, s, 128 * uint32_t(rows) / 8, 128, true};
  const int w = int(width(s)) / 2, groups = rows / w;
  return {{{8, w / 8, groups}, {1, 8, 8 * w}}, {{8, 2, 0}, {w, 8 * w * groups, 0}}, s, uint32_t(16 * w),
          uint32_t(16 * w * groups), true};
}

uint16_t bf16_bits(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  return static_cast<uint16_t>(u >> 16);  // exact: the values are small integers
}

// Writes m (rows x kdim, row-major) into image at byte `at` (a multiple of 1024) as `tile` says.
void place(std::vector<unsigned char>& image, uint32_t at, const Tile& tile, const std::vector<float>& m, int rows,
           Swizzle as, int kdim = 16) {
  for (int r = 0; r < rows; ++r)
    for (int k = 0; k < kdim; ++k) {
      uint32_t addr = at + 2 * uint32_t(tile.mn.offset(r) + tile.k.offset(k));
      if (width(as)) addr ^= (addr >> 7 & (width(as) / 16 - 1)) << 4;
      const uint16_t bits = bf16_bits(m[size_t(r * kdim + k)]);
      std::memcpy(&image[addr], &bits, 2);
    }
}

enum class Bug { none, read_early, no_fence, other_desc, warp_skips, out_of_range, a_changed };

// 128 threads: copy the image into shared memory, multiply (A from shared memory or from
// registers), write D by the ISA's fragment figure.
// Copies the host's image into shared memory; returns the descriptor bits of its address, which
// added to a descriptor of the host's byte offsets make it one of shared addresses.
__device__ uint64_t stage(unsigned char* smem, const unsigned char* image, int bytes) {
  for (int i = static_cast<int>(threadIdx.x); i < bytes; i += static_cast<int>(blockDim.x)) smem[i] = image[i];
  __syncthreads();
  ptx::fence_proxy_async();
  return ptx::wgmma_descriptor(ptx::shared_address(smem), 0, 0, Swizzle::none);
}

// out (64 x N, row-major) from the accumulators, by the ISA's D fragment figure.
template <int N>
__device__ void store_d(const float (&d)[N / 2], float* out) {
  const int tid = static_cast<int>(threadIdx.x), w = tid / 32, g = tid % 32 / 4, t = tid % 4;
  for (int i = 0; i < N / 8; ++i)
    for (int h = 0; h < 2; ++h)
      for (int j = 0; j < 2; ++j) out[(16 * w + g + 8 * h) * N + 8 * i + 2 * t + j] = d[4 * i + 2 * h + j];
}

template <int N, bool TransA, bool TransB, bool ARegs>
__global__ void wgmma_kernel(const unsigned char* image, int bytes, uint64_t da, uint64_t db, const uint32_t* a_frag,
                             float* out, Bug bug) {
  KEEL_DYNAMIC_SHARED(unsigned char, smem, 1024);
  const int tid = static_cast<int>(threadIdx.x);
  const uint64_t base = stage(smem, image, bytes);
  if (bug == Bug::warp_skips && tid >= 96) return;
  float d[N / 2];
  for (float& x : d) x = 0.0f;
  if (bug != Bug::no_fence) ptx::wgmma_fence();
  const uint64_t a_desc = da + base + (bug == Bug::other_desc && tid == 64 ? 2 : 0);
  const uint64_t b_desc = db + base + (bug == Bug::out_of_range ? uint64_t(bytes) >> 4 : 0);
  uint32_t a[4];  // the register form's A: unchanged until the wait
  if constexpr (ARegs) {
    for (int i = 0; i < 4; ++i) a[i] = a_frag[tid * 4 + i];
    ptx::wgmma_m64k16_rs<N, __nv_bfloat16, TransB>(d, a, b_desc, false);
  } else {
    ptx::wgmma_m64k16<N, __nv_bfloat16, TransA, TransB>(d, a_desc, b_desc, false);
  }
  ptx::wgmma_commit_group();
  if (bug == Bug::a_changed && tid == 37) a[2] = 0;  // the next fragment, written before the wait
  if (bug != Bug::read_early) ptx::wgmma_wait_group<0>();
  store_d<N>(d, out);
  if (bug == Bug::read_early) ptx::wgmma_wait_group<0>();
}

// The main loop of an attention or GEMM kernel: K 64 as four wgmmas on the same accumulators,
// issued back to back and waited for once; each k step's descriptor starts 32 bytes further into
// the tiles' 128-byte swizzled rows (2 in the descriptor's 16-byte units).
template <int N>
__global__ void chain_kernel(const unsigned char* image, int bytes, uint64_t da, uint64_t db, float* out) {
  KEEL_DYNAMIC_SHARED(unsigned char, smem, 1024);
  const uint64_t base = stage(smem, image, bytes);
  float d[N / 2];
  ptx::wgmma_fence();
  for (int s = 0; s < 4; ++s) ptx::wgmma_m64k16<N, __nv_bfloat16>(d, da + base + 2 * s, db + base + 2 * s, s > 0);
  ptx::wgmma_commit_group();
  ptx::wgmma_wait_group<0>();
  store_d<N>(d, out);
}

// Warpgroup 0 multiplies the staged tiles while thread 128 (warpgroup 1) zeroes B after the same
// barrier, with nothing ordering its writes before or after the product's reads: a race, which
// on a GPU reads either. The emulator reads at the wait, after the rest of the block ran, so
// the whole product sees the zeros (an overwrite in the window shows, as TSan's report does).
__global__ void overwritten_kernel(const unsigned char* image, int bytes, uint64_t da, uint64_t db, float* out) {
  KEEL_DYNAMIC_SHARED(unsigned char, smem, 1024);
  const uint64_t base = stage(smem, image, bytes);
  if (threadIdx.x == 128) std::memset(smem + (db & 0x3fff) * 16, 0, 64 * 128);  // B: 64 rows of 128 bytes
  if (threadIdx.x >= 128) return;
  float d[32];
  ptx::wgmma_fence();
  ptx::wgmma_m64k16<64, __nv_bfloat16>(d, da + base, db + base, false);
  ptx::wgmma_commit_group();
  ptx::wgmma_wait_group<0>();
  store_d<64>(d, out);
}

// Warp specialization's register hand-over: warpgroup 0 (the producer) shrinks, warpgroup 1
// grows; with the planted bug one thread of warpgroup 0 asks for another count.
__global__ void setmaxnreg_kernel(int bug) {
  const int tid = static_cast<int>(threadIdx.x);
  if (tid >= 128)
    ptx::setmaxnreg_inc<232>();
  else if (bug == 1 && tid == 5)
    ptx::setmaxnreg_dec<48>();
  else if (bug == 2)
    keel::emu::ptx::setmaxnreg(false, 20, std::source_location::current());  // below the ISA's 24
  else
    ptx::setmaxnreg_dec<40>();
}

std::vector<float> small_ints(int n, int seed) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[size_t(i)] = float((i * 7 + seed * 13) % 9 - 4);
  return v;
}

// A (64 x kdim) B^T (N x kdim) -> 64 x N, exactly.
std::vector<float> product(const std::vector<float>& a, const std::vector<float>& b, int n, int kdim = 16) {
  std::vector<float> c(size_t(64 * n));
  for (int r = 0; r < 64; ++r)
    for (int col = 0; col < n; ++col) {
      float s = 0.0f;
      for (int k = 0; k < kdim; ++k) s += a[size_t(r * kdim + k)] * b[size_t(col * kdim + k)];
      c[size_t(r * n + col)] = s;
    }
  return c;
}

struct Run {
  std::vector<float> got, want;
  std::string error;
};

// A at byte 0, B at byte 16384 (both multiples of 1024); B laid out in `b_as` (a swizzle bug
// when it differs from the descriptor's).
template <int N, bool TransA, bool TransB, bool ARegs = false>
Run run(const Tile& ta, const Tile& tb, Bug bug = Bug::none, Swizzle b_as_override = Swizzle(7)) {
  const uint32_t b_at = 16384, bytes = 32768;
  const Swizzle b_as = b_as_override == Swizzle(7) ? tb.swizzle : b_as_override;
  Run r;
  const std::vector<float> a = small_ints(64 * 16, 1), b = small_ints(N * 16, 2);
  std::vector<unsigned char> image(bytes, 0xff);
  place(image, 0, ta, a, 64, ta.swizzle);
  place(image, b_at, tb, b, N, b_as);
  auto* dimage = device_array<unsigned char>(bytes);
  std::memcpy(dimage, image.data(), bytes);
  // The A fragment of the ISA's figure: a[0] (16w + g, 2t..), a[1] (+8 rows), a[2] (k + 8), a[3] both.
  auto* frag = device_array<uint32_t>(128 * 4);
  for (int tid = 0; tid < 128; ++tid)
    for (int i = 0; i < 4; ++i) {
      const int row = 16 * (tid / 32) + tid % 32 / 4 + 8 * (i % 2), k = 2 * (tid % 4) + 8 * (i / 2);
      frag[tid * 4 + i] = bf16_bits(a[size_t(row * 16 + k)]) | uint32_t(bf16_bits(a[size_t(row * 16 + k + 1)])) << 16;
    }
  auto* out = device_array<float>(size_t(64 * N));
  const uint64_t da = ptx::wgmma_descriptor(0, ta.lbo, ta.sbo, ta.swizzle);
  const uint64_t db = ptx::wgmma_descriptor(b_at, tb.lbo, tb.sbo, tb.swizzle);
  r.error = error_of([&] {
    launch_kernel(wgmma_kernel<N, TransA, TransB, ARegs>, 1, 128, bytes, nullptr, dimage, int(bytes), da, db, frag, out,
                  bug);
  });
  r.got.assign(out, out + 64 * N);
  r.want = product(a, b, N);
  cudaFree(dimage), cudaFree(frag), cudaFree(out);
  return r;
}

}  // namespace

TEST_CASE("emulated PTX: wgmma descriptors hold address, strides and swizzle where the ISA's table puts them") {
  // The ISA's MN-major 64B example (bf16): LBO 256 elements encodes as 32, SBO 512 as 64.
  const uint64_t d = ptx::wgmma_descriptor(0x1230, 256 * 2, 512 * 2, Swizzle::b64);
  CHECK((d & 0x3fff) == 0x123);
  CHECK((d >> 16 & 0x3fff) == 32);
  CHECK((d >> 32 & 0x3fff) == 64);
  CHECK((d >> 49 & 7) == 0);
  CHECK((d >> 62) == 2);
  CHECK((ptx::wgmma_descriptor(0, 0, 0, Swizzle::b128) >> 62) == 1);
  CHECK((ptx::wgmma_descriptor(0, 0, 0, Swizzle::b32) >> 62) == 3);
}

TEST_CASE("emulated PTX: wgmma m64nNk16 multiplies tiles in the ISA's layouts, every swizzle, K- and MN-major") {
  for (Swizzle s : {Swizzle::none, Swizzle::b32, Swizzle::b64, Swizzle::b128}) {
    CAPTURE(int(s));
    Run r = run<64, false, false>(k_major(s, 64), k_major(s, 64));
    CHECK(r.error == "(no error)");
    CHECK(r.got == r.want);
    r = run<128, true, true>(mn_major(s, 64), mn_major(s, 128));
    CHECK(r.error == "(no error)");
    CHECK(r.got == r.want);
    r = run<64, false, true>(k_major(s, 64), mn_major(s, 64));  // S = Q K^T's and O = P V's operand kinds
    CHECK(r.error == "(no error)");
    CHECK(r.got == r.want);
  }
}

TEST_CASE("emulated PTX: four wgmmas chained on one accumulator, each k step further into the swizzled rows, sum K 64") {
  constexpr int N = 128, K = 64;
  const Tile rows{{{8, 8, 0}, {64, 512, 0}}, {{64, 0, 0}, {1, 0, 0}}, Swizzle::b128, 16, 1024, false};
  const Tile b_rows{{{8, 16, 0}, {64, 512, 0}}, {{64, 0, 0}, {1, 0, 0}}, Swizzle::b128, 16, 1024, false};
  const std::vector<float> a = small_ints(64 * K, 3), b = small_ints(N * K, 4);
  std::vector<unsigned char> image(32768, 0xff);
  place(image, 0, rows, a, 64, Swizzle::b128, K);
  place(image, 8192, b_rows, b, N, Swizzle::b128, K);
  auto* dimage = device_array<unsigned char>(image.size());
  std::memcpy(dimage, image.data(), image.size());
  auto* out = device_array<float>(64 * N);
  const uint64_t da = ptx::wgmma_descriptor(0, 16, 1024, Swizzle::b128), db = ptx::wgmma_descriptor(8192, 16, 1024, Swizzle::b128);
  CHECK(error_of([&] { launch_kernel(chain_kernel<N>, 1, 128, image.size(), nullptr, dimage, int(image.size()), da, db, out); }) ==
        "(no error)");
  const std::vector<float> got(out, out + 64 * N), want = product(a, b, N, K);
  CHECK(got == want);
  cudaFree(dimage), cudaFree(out);
}

TEST_CASE("emulated PTX: wgmma with A from registers takes the fragment of the ISA's figure") {
  for (Swizzle s : {Swizzle::none, Swizzle::b128}) {
    Run r = run<128, false, true, true>(k_major(s, 64), mn_major(s, 128));
    CHECK(r.error == "(no error)");
    CHECK(r.got == r.want);
  }
}

TEST_CASE("emulated PTX: A registers changed before the wgmma's wait are an error naming the thread") {
  const std::string e = run<128, false, true, true>(k_major(Swizzle::b128, 64), mn_major(Swizzle::b128, 128),
                                                    Bug::a_changed).error;
  CHECK(e.find("thread 37 changed the A registers of its wgmma number 0") != std::string::npos);
  CHECK(e.find("test_wgmma.cu") != std::string::npos);
}

TEST_CASE("emulated PTX: accumulators read before wgmma.wait_group are NaN, and a tile in another swizzle multiplies wrong") {
  Run r = run<64, false, false>(k_major(Swizzle::b128, 64), k_major(Swizzle::b128, 64), Bug::read_early);
  CHECK(r.error == "(no error)");
  for (float x : r.got) CHECK(std::isnan(x));
  r = run<64, false, false>(k_major(Swizzle::b128, 64), k_major(Swizzle::b128, 64), Bug::none, Swizzle::b64);
  CHECK(r.error == "(no error)");
  CHECK(r.got != r.want);
}

// Under ThreadSanitizer (preset emu-tsan) the overwrite is the data race it reports, as
// planted_bugs wgmma-race shows; the case runs in the other presets.
#if !defined(__SANITIZE_THREAD__)
TEST_CASE("emulated PTX: a tile another warpgroup overwrites before the wgmma's wait is read overwritten") {
  const Tile t = k_major(Swizzle::b128, 64);
  const uint32_t b_at = 16384, bytes = 32768;
  std::vector<unsigned char> image(bytes, 0xff);
  place(image, 0, t, small_ints(64 * 16, 1), 64, t.swizzle);
  place(image, b_at, t, small_ints(64 * 16, 2), 64, t.swizzle);
  auto* dimage = device_array<unsigned char>(bytes);
  std::memcpy(dimage, image.data(), bytes);
  auto* out = device_array<float>(64 * 64);
  const uint64_t da = ptx::wgmma_descriptor(0, t.lbo, t.sbo, t.swizzle);
  const uint64_t db = ptx::wgmma_descriptor(b_at, t.lbo, t.sbo, t.swizzle);
  CHECK(error_of([&] { launch_kernel(overwritten_kernel, 1, 256, bytes, nullptr, dimage, int(bytes), da, db, out); }) ==
        "(no error)");
  for (int i = 0; i < 64 * 64; ++i) CHECK(out[i] == 0.0f);  // every thread's share, thread 127's too
  cudaFree(dimage), cudaFree(out);
}
#endif

TEST_CASE("emulated PTX: a wgmma without a fence, disagreeing threads, a partial or silent warpgroup and a stray address are errors") {
  const Tile t = k_major(Swizzle::b128, 64);
  const std::string no_fence = run<64, false, false>(t, t, Bug::no_fence).error;
  CHECK(no_fence.find("without a wgmma.fence") != std::string::npos);
  const std::string other = run<64, false, false>(t, t, Bug::other_desc).error;
  CHECK(other.find("issue different wgmmas") != std::string::npos);
  const std::string silent = run<64, false, false>(t, t, Bug::warp_skips).error;
  CHECK(silent.find("deadlock") != std::string::npos);
  CHECK(silent.find("test_wgmma.cu") != std::string::npos);
  const std::string stray = run<64, false, false>(t, t, Bug::out_of_range).error;
  CHECK(stray.find("outside the block's dynamic shared memory") != std::string::npos);
  const std::string partial = error_of([] {
    launch_kernel(wgmma_kernel<64, false, false, false>, 1, 96, 1024, nullptr, (const unsigned char*)nullptr, 0,
                  uint64_t(0), uint64_t(0), (const uint32_t*)nullptr, (float*)nullptr, Bug::none);
  });
  CHECK(partial.find("not 4 whole warps") != std::string::npos);
}

TEST_CASE("emulated PTX: setmaxnreg is the same in the whole warpgroup, 24 to 256 registers") {
  CHECK(error_of([] { launch_kernel(setmaxnreg_kernel, 1, 256, 0, nullptr, 0); }) == "(no error)");
  CHECK(error_of([] { launch_kernel(setmaxnreg_kernel, 1, 256, 0, nullptr, 1); }).find("disagree") != std::string::npos);
  CHECK(error_of([] { launch_kernel(setmaxnreg_kernel, 1, 256, 0, nullptr, 2); }).find("from 24 to 256") !=
        std::string::npos);
  CHECK(error_of([] { launch_kernel(setmaxnreg_kernel, 1, 64, 0, nullptr, 0); }).find("not 4 whole warps") !=
        std::string::npos);
}
