// The PTX instructions of core/cuda/ptx.cuh on the emulated GPU: mma.sync m16n8k16, ldmatrix
// and cp.async do what the PTX ISA documents, with its lane layouts (written out here again from
// the ISA, independently of core/cuda/emu/ptx.cpp), and a kernel that assumes another layout
// computes a wrong result. Also the atomics blocks count in with (the hand-overs between blocks
// that wait: test_blocks.cu).
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/cuda/check.h"
#include "core/cuda/launch.cuh"
#include "core/cuda/ptx.cuh"
#include "core/cuda/runtime.h"
#include "core/error.h"
#include "emu_test_helpers.h"

using keel::cuda::launch_kernel;
using keel::emu_test::device_array;
using keel::emu_test::error_of;
namespace ptx = keel::cuda::ptx;

namespace {

template <typename T>
uint16_t bits(T x) {
  if constexpr (std::is_same_v<T, __half>) return __half_as_ushort(x);
  else return __bfloat16_as_ushort(x);
}
template <typename T>
uint32_t pack(T lo, T hi) {
  return uint32_t(bits(lo)) | uint32_t(bits(hi)) << 16;
}

// The PTX ISA's fragment coordinates (g = lane / 4, t = lane % 4); element e of register i.
struct RowCol {
  int r, c;
};
RowCol a_elem(int lane, int i, int e) {  // A 16 x 16
  const int g = lane / 4, t = lane % 4;
  return {g + 8 * (i % 2), 2 * t + e + 8 * (i / 2)};
}
RowCol b_elem(int lane, int i, int e) {  // B 16 x 8, (k, n)
  const int g = lane / 4, t = lane % 4;
  return {2 * t + e + 8 * i, g};
}
RowCol c_elem(int lane, int i) {  // C 16 x 8
  const int g = lane / 4, t = lane % 4;
  return {g + 8 * (i / 2), 2 * t + i % 2};
}

// d (16 x 8) = a (16 x 16, row-major) b (16 x 8, row-major: k x n) + 1, fragments gathered from
// global memory by the layout above; kWrongA gathers A as if lanes held rows lane % 16 instead.
template <typename T, bool kWrongA>
__global__ void mma_kernel(const T* a, const T* b, float* d) {
  const int lane = threadIdx.x;
  uint32_t fa[4], fb[2];
  for (int i = 0; i < 4; ++i) {
    RowCol x = a_elem(lane, i, 0), y = a_elem(lane, i, 1);
    if (kWrongA) x.r = y.r = lane % 16;
    fa[i] = pack(a[x.r * 16 + x.c], a[y.r * 16 + y.c]);
  }
  for (int i = 0; i < 2; ++i) {
    const RowCol x = b_elem(lane, i, 0), y = b_elem(lane, i, 1);
    fb[i] = pack(b[x.r * 8 + x.c], b[y.r * 8 + y.c]);
  }
  float fd[4] = {1, 1, 1, 1};
  ptx::mma_m16n8k16<T>(fd, fa, fb);
  for (int i = 0; i < 4; ++i) d[c_elem(lane, i).r * 8 + c_elem(lane, i).c] = fd[i];
}

// Every lane records what ldmatrix gives it from a 16 x 16 b16 tile whose element (r, c) holds
// r * 16 + c: x4 (four 8x8 quadrants, lanes 8i.. give the rows of quadrant i), x4.trans and
// x2.trans, the forms keel's kernels use. out: 3 loads x 32 lanes x 4 registers.
__global__ void ldmatrix_kernel(const uint16_t* tile, uint32_t* out) {
  KEEL_SHARED_ALIGNED(16, uint16_t[16 * 16], s);
  const int lane = threadIdx.x;
  for (int e = lane; e < 256; e += 32) s[e] = tile[e];
  __syncwarp();
  const int quadrant = lane / 8, row = lane % 8;
  const uint16_t* p = s + (row + 8 * (quadrant % 2)) * 16 + 8 * (quadrant / 2);  // quadrants down, then right
  uint32_t r4[4] = {0, 0, 0, 0}, r2[2] = {0, 0};
  uint32_t* o = out + lane * 4;
  ptx::ldmatrix_x4(r4, p);
  for (int i = 0; i < 4; ++i) o[0 * 128 + i] = r4[i];
  ptx::ldmatrix_x4_trans(r4, p);
  for (int i = 0; i < 4; ++i) o[1 * 128 + i] = r4[i];
  ptx::ldmatrix_x2_trans(r2, p);
  for (int i = 0; i < 2; ++i) o[2 * 128 + i] = r2[i];
}

// ldmatrix's operand rules, broken one at a time: kCase 0, lane 3 gives a row address that is
// not 16-byte aligned; 1, lane 20 executes .x2.trans while the rest execute .x4; 2, not broken:
// .x2.trans with lanes 16-31 giving misaligned addresses, which PTX ignores.
template <int kCase>
__global__ void ldmatrix_operands_kernel() {
  KEEL_SHARED_ALIGNED(16, uint16_t[16 * 16], s);
  const int lane = threadIdx.x;
  for (int e = lane; e < 256; e += 32) s[e] = static_cast<uint16_t>(e);
  __syncwarp();
  const uint16_t* p = s + (lane % 16) * 16 + 8 * (lane / 16);
  uint32_t r4[4], r2[2];
  if (kCase == 0) ptx::ldmatrix_x4(r4, lane == 3 ? p + 4 : p);
  if (kCase == 1 && lane == 20) ptx::ldmatrix_x2_trans(r2, p);
  if (kCase == 1 && lane != 20) ptx::ldmatrix_x4(r4, p);
  if (kCase == 2) ptx::ldmatrix_x2_trans(r2, lane < 16 ? p : p + 1);
}

// d = a b + 0 with both operands through shared memory and ldmatrix, as a flash kernel does:
// A (16 x 16 row-major) by ldmatrix_x4; B (k x n) stored k-major (row k holds n = 0..7) by
// ldmatrix_x2_trans, or stored n-major (row n holds k = 0..15) by ldmatrix_x4, as
// attention_mma.cuh's load_b_rows reads two n-blocks (lanes 16-31 name the one n-block again).
template <typename T, bool kNMajorB>
__global__ void ldmatrix_mma_kernel(const T* a, const T* b, float* d) {
  KEEL_SHARED_ALIGNED(16, uint16_t[16 * 16], raw_a);
  KEEL_SHARED_ALIGNED(16, uint16_t[16 * 8], raw_b);
  T* const sa = reinterpret_cast<T*>(raw_a);
  T* const sb = reinterpret_cast<T*>(raw_b);
  const int lane = threadIdx.x;
  for (int e = lane; e < 256; e += 32) sa[e] = a[e];
  for (int e = lane; e < 128; e += 32) {
    const int k = e / 8, n = e % 8;
    if (kNMajorB) sb[n * 16 + k] = b[e];
    else sb[e] = b[e];
  }
  __syncwarp();
  uint32_t fa[4], fb[2];
  ptx::ldmatrix_x4(fa, sa + (lane % 16) * 16 + 8 * (lane / 16));  // rows 0-15, then columns 8-15
  if (kNMajorB) {
    uint32_t r[4];
    ptx::ldmatrix_x4(r, sb + (lane % 8) * 16 + 8 * ((lane / 8) % 2));
    fb[0] = r[0], fb[1] = r[1];
  } else {
    ptx::ldmatrix_x2_trans(fb, sb + (lane % 16) * 8);
  }
  float fd[4] = {0, 0, 0, 0};
  ptx::mma_m16n8k16<T>(fd, fa, fb);
  for (int i = 0; i < 4; ++i) d[c_elem(lane, i).r * 8 + c_elem(lane, i).c] = fd[i];
}

// cp.async: 32 threads copy 16 bytes each into shared memory in two groups (threads' first
// chunk, then their second, zero-filled for odd threads). out (per thread): what the thread
// reads of its first chunk before any wait, after wait_group<1> (first group landed, second in
// flight), and of the second chunk after wait_group<0>; then, after a barrier, its neighbour's.
__global__ void cp_async_kernel(const float* src, float* out) {
  KEEL_SHARED_ALIGNED(16, float[2 * 32 * 4], s);
  const int t = threadIdx.x;
  ptx::cp_async_16(s + 4 * t, src + 4 * t, false);
  ptx::cp_async_commit();
  ptx::cp_async_16(s + 128 + 4 * t, src + 128 + 4 * t, t % 2 == 1);
  ptx::cp_async_commit();
  float* o = out + 5 * t;
  o[0] = s[4 * t];
  ptx::cp_async_wait<1>();
  o[1] = s[4 * t];
  o[2] = s[128 + 4 * t];
  ptx::cp_async_wait<0>();
  o[3] = s[128 + 4 * t];
  __syncthreads();
  o[4] = s[128 + 4 * ((t + 1) % 32)];
}

__global__ void cp_async_misaligned_kernel(const float* src) {
  KEEL_SHARED_ALIGNED(16, float[8], s);
  ptx::cp_async_16(s + 1, src, false);
  ptx::cp_async_wait<0>();
}

// Every block counts itself in; the one that sees the last count records its index in *last.
__global__ void last_block_kernel(int* count, int* last) {
  if (threadIdx.x == 0 && ptx::atom_add_acq_rel_gpu(count, 1) == static_cast<int>(gridDim.x) - 1)
    *last = static_cast<int>(blockIdx.x);
}

// Every thread adds (1, 2) to p[0], p[1] with one vector reduction.
__global__ void red_add_f32x2_kernel(float* p) { ptx::red_add_f32x2(p, 1.0f, 2.0f); }

template <typename T>
void check_mma(T (*convert)(float)) {
  T* a = device_array<T>(256);
  T* b = device_array<T>(128);
  float* d = device_array<float>(128);
  std::vector<float> ha(256), hb(128);
  for (int i = 0; i < 256; ++i) ha[i] = static_cast<float>((i * 7) % 11 - 5) / 4, a[i] = convert(ha[i]);
  for (int i = 0; i < 128; ++i) hb[i] = static_cast<float>((i * 5) % 13 - 6) / 8, b[i] = convert(hb[i]);
  auto want = [&](int r, int c) {
    float s = 1.0f;
    for (int k = 0; k < 16; ++k) s += ha[r * 16 + k] * hb[k * 8 + c];  // exact: small dyadic values
    return s;
  };
  launch_kernel(mma_kernel<T, false>, 1, 32, 0, nullptr, a, b, d);
  KEEL_CHECK_LAUNCH();
  for (int e = 0; e < 128; ++e) CHECK(d[e] == want(e / 8, e % 8));
  for (bool n_major : {false, true}) {
    CAPTURE(n_major);
    launch_kernel(n_major ? ldmatrix_mma_kernel<T, true> : ldmatrix_mma_kernel<T, false>, 1, 32, 0, nullptr, a, b, d);
    KEEL_CHECK_LAUNCH();
    for (int e = 0; e < 128; ++e) CHECK(d[e] == want(e / 8, e % 8) - 1.0f);
  }
  launch_kernel(mma_kernel<T, true>, 1, 32, 0, nullptr, a, b, d);  // rows of A from the wrong lanes
  KEEL_CHECK_LAUNCH();
  int wrong = 0;
  for (int e = 0; e < 128; ++e) wrong += d[e] != want(e / 8, e % 8);
  CHECK(wrong > 64);
  cudaFree(a), cudaFree(b), cudaFree(d);
}

}  // namespace

TEST_CASE("emulated PTX: mma.sync m16n8k16 multiplies bf16 and f16 fragments in the ISA's lane layout") {
  check_mma<__nv_bfloat16>(+[](float x) { return __float2bfloat16_rn(x); });
  check_mma<__half>(+[](float x) { return __float2half_rn(x); });
}

TEST_CASE("emulated PTX: ldmatrix x4, x4.trans and x2.trans hand each lane the ISA's elements") {
  uint16_t* tile = device_array<uint16_t>(256);
  uint32_t* out = device_array<uint32_t>(3 * 128);
  for (int e = 0; e < 256; ++e) tile[e] = static_cast<uint16_t>(e);
  launch_kernel(ldmatrix_kernel, 1, 32, 0, nullptr, tile, out);
  KEEL_CHECK_LAUNCH();
  // Quadrant i (matrix i) starts at row 8 (i % 2), column 8 (i / 2) of the tile.
  auto at = [](int i, int r, int c) { return uint32_t((r + 8 * (i % 2)) * 16 + c + 8 * (i / 2)); };
  for (int lane = 0; lane < 32; ++lane) {
    CAPTURE(lane);
    const int r = lane / 4, c = 2 * (lane % 4);
    for (int load = 0; load < 3; ++load) {
      const bool trans = load >= 1;
      const int num = load < 2 ? 4 : 2;
      for (int i = 0; i < num; ++i) {
        CAPTURE(load);
        CAPTURE(i);
        const uint32_t lo = trans ? at(i, c, r) : at(i, r, c), hi = trans ? at(i, c + 1, r) : at(i, r, c + 1);
        CHECK(out[load * 128 + lane * 4 + i] == (lo | hi << 16));
      }
    }
  }
  cudaFree(tile), cudaFree(out);
}

TEST_CASE("emulated PTX: ldmatrix needs aligned rows from the lanes that give them and one .xN per warp") {
  std::string e = error_of([] { launch_kernel(ldmatrix_operands_kernel<0>, 1, 32, 0, nullptr); });
  CHECK(e.find("ldmatrix.x4: lane 3 gives row address") != std::string::npos);
  CHECK(e.find("not 16-byte aligned") != std::string::npos);
  e = error_of([] { launch_kernel(ldmatrix_operands_kernel<1>, 1, 32, 0, nullptr); });
  CHECK(e.find("lane 20 loads .x2.trans while lane 0 loads .x4") != std::string::npos);
  CHECK(error_of([] { launch_kernel(ldmatrix_operands_kernel<2>, 1, 32, 0, nullptr); }) == "(no error)");
}

TEST_CASE("emulated PTX: cp.async lands when its group is waited for, zero-fills, and checks alignment") {
  float* src = device_array<float>(256);
  float* out = device_array<float>(5 * 32);
  for (int i = 0; i < 256; ++i) src[i] = static_cast<float>(i + 1);
  launch_kernel(cp_async_kernel, 1, 32, 0, nullptr, src, out);
  KEEL_CHECK_LAUNCH();
  for (int t = 0; t < 32; ++t) {
    CAPTURE(t);
    const float* o = out + 5 * t;
    CHECK(std::isnan(o[0]));                           // in flight: the destination is undefined (NaN here)
    CHECK(o[1] == src[4 * t]);                         // its group was waited for
    CHECK(std::isnan(o[2]));                           // the newest group may still be in flight
    CHECK(o[3] == (t % 2 ? 0.0f : src[128 + 4 * t]));  // landed; odd threads asked for zeros
    const int n = (t + 1) % 32;
    CHECK(o[4] == (n % 2 ? 0.0f : src[128 + 4 * n]));  // another thread's copy, after a barrier
  }
  const std::string e = error_of([&] { launch_kernel(cp_async_misaligned_kernel, 1, 32, 0, nullptr, src); });
  CHECK(e.find("not both aligned to 16 bytes") != std::string::npos);
  CHECK(e.find("test_ptx.cu") != std::string::npos);
  cudaFree(src), cudaFree(out);
}

TEST_CASE("emulated PTX: red.global.add.v2.f32 adds its two values into two adjacent floats") {
  float* p = device_array<float>(2);
  KEEL_CHECK_CUDA(cudaMemset(p, 0, 2 * sizeof(float)));
  launch_kernel(red_add_f32x2_kernel, 3, 32, 0, nullptr, p);
  KEEL_CHECK_LAUNCH();
  CHECK(p[0] == 96.0f);
  CHECK(p[1] == 192.0f);
  cudaFree(p);
}

TEST_CASE("emulated PTX: atom.acq_rel.gpu.add returns the count before it, so one block sees the last") {
  int* count = device_array<int>(1);
  int* last = device_array<int>(1);
  KEEL_CHECK_CUDA(cudaMemset(count, 0, sizeof(int)));
  KEEL_CHECK_CUDA(cudaMemset(last, 0xff, sizeof(int)));
  const keel::cuda::BlockSchedule saved = keel::cuda::emulated_block_schedule();
  keel::cuda::set_emulated_block_schedule({});  // index order, one block at a time
  launch_kernel(last_block_kernel, 5, 32, 0, nullptr, count, last);
  keel::cuda::set_emulated_block_schedule(saved);
  KEEL_CHECK_LAUNCH();
  CHECK(*count == 5);
  CHECK(*last == 4);  // the last block to start
  cudaFree(count), cudaFree(last);
}
