// nvcuda::wmma on the emulated GPU: warp-wide matrix fragments and the tensor-core product.
//
// A fragment's layout across the lanes is opaque in CUDA; here lane l holds elements
// l * n .. l * n + n - 1 (n = num_elements) of the tile in row-major order, which is as good as
// any other opaque layout: a kernel that relied on the GPU's real layout would fail here.
// load/store/fill work lane by lane on real memory (so TSan and ASan see each lane's accesses);
// mma_sync is a warp collective that needs all 32 lanes and multiplies in f32: operands
// converted exactly, products and sums in f32, in k order. Real tensor cores accumulate in an
// order and internal precision of their own, which only a GPU shows.
//
// CUDA's requirements are checked: fragment pointers 256-bit (32-byte) aligned, leading
// dimensions a multiple of 16 bytes, all 32 lanes in mma_sync.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <source_location>
#include <type_traits>

#include "core/cuda/emu/block.h"

namespace keel::emu::wmma_detail {
struct MmaShape {
  int m, n, k;
};
void mma_combine(const void* shape, const void* const in[32], void* const out[32], unsigned mask);
void check_pointer(const void* p, long ldm, int elem_bytes, const char* what, const std::source_location& where);
template <typename T> float to_float(T v) {
  if constexpr (std::is_same_v<T, __half>) return __half2float(v);
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return __bfloat162float(v);
  else return static_cast<float>(v);
}
template <typename T> T from_float(float v) {
  if constexpr (std::is_same_v<T, __half>) return __float2half_rn(v);
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return __float2bfloat16_rn(v);
  else return static_cast<T>(v);
}
}  // namespace keel::emu::wmma_detail

namespace nvcuda::wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K> struct tile_shape;
template <int M, int N, int K> struct tile_shape<matrix_a, M, N, K> {
  static constexpr int rows = M, cols = K;
};
template <int M, int N, int K> struct tile_shape<matrix_b, M, N, K> {
  static constexpr int rows = K, cols = N;
};
template <int M, int N, int K> struct tile_shape<accumulator, M, N, K> {
  static constexpr int rows = M, cols = N;
};

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
class fragment {
 public:
  static_assert((M == 16 && N == 16 && K == 16) || (M == 32 && N == 8 && K == 16) || (M == 8 && N == 32 && K == 16),
                "wmma shapes for f16/bf16 are m16n16k16, m32n8k16 and m8n32k16");
  static constexpr int rows = tile_shape<Use, M, N, K>::rows, cols = tile_shape<Use, M, N, K>::cols;
  enum { num_elements = rows * cols / 32 };
  using element_type = T;
  T x[num_elements];
};

template <typename Use, int M, int N, int K, typename T, typename L>
void fill_fragment(fragment<Use, M, N, K, T, L>& f, const T& v) {
  for (auto& e : f.x) e = v;
}
template <typename Use, int M, int N, int K, typename T, typename L, typename V>
  requires(!std::is_same_v<T, V>)
void fill_fragment(fragment<Use, M, N, K, T, L>& f, const V& v) {
  for (auto& e : f.x) e = keel::emu::wmma_detail::from_float<T>(static_cast<float>(v));
}

namespace detail {
// Element i of this lane <-> (row, col) of the tile; `row_major` says how memory is laid out.
template <typename F, typename Ptr, typename Fn>
void for_each_element(F& f, Ptr p, unsigned ldm, bool row_major, Fn&& fn) {
  const int lane = keel::emu::lane_id();
  for (int i = 0; i < F::num_elements; ++i) {
    const int e = lane * F::num_elements + i, r = e / F::cols, c = e % F::cols;
    fn(f.x[i], p + (row_major ? static_cast<long>(r) * ldm + c : static_cast<long>(c) * ldm + r));
  }
}
}  // namespace detail

// matrix_a / matrix_b: memory layout from the fragment's Layout parameter.
template <typename Use, int M, int N, int K, typename T, typename L, typename P>
  requires(!std::is_same_v<Use, accumulator>)
void load_matrix_sync(fragment<Use, M, N, K, T, L>& f, const P* p, unsigned ldm,
                      std::source_location where = std::source_location::current()) {
  keel::emu::wmma_detail::check_pointer(p, ldm, sizeof(P), "wmma::load_matrix_sync", where);
  detail::for_each_element(f, p, ldm, std::is_same_v<L, row_major>, [](T& x, const P* q) { x = *q; });
}
template <int M, int N, int K, typename T>
void load_matrix_sync(fragment<accumulator, M, N, K, T>& f, const T* p, unsigned ldm, layout_t layout,
                      std::source_location where = std::source_location::current()) {
  keel::emu::wmma_detail::check_pointer(p, ldm, sizeof(T), "wmma::load_matrix_sync", where);
  detail::for_each_element(f, p, ldm, layout == mem_row_major, [](T& x, const T* q) { x = *q; });
}
template <int M, int N, int K, typename T>
void store_matrix_sync(T* p, const fragment<accumulator, M, N, K, T>& f, unsigned ldm, layout_t layout,
                       std::source_location where = std::source_location::current()) {
  keel::emu::wmma_detail::check_pointer(p, ldm, sizeof(T), "wmma::store_matrix_sync", where);
  detail::for_each_element(f, p, ldm, layout == mem_row_major, [](const T& x, T* q) { *q = x; });
}

// d = a b + c over the whole warp (d may be c).
template <int M, int N, int K, typename TA, typename LA, typename TB, typename LB, typename TC>
void mma_sync(fragment<accumulator, M, N, K, TC>& d, const fragment<matrix_a, M, N, K, TA, LA>& a,
              const fragment<matrix_b, M, N, K, TB, LB>& b, const fragment<accumulator, M, N, K, TC>& c,
              std::source_location where = std::source_location::current()) {
  using namespace keel::emu::wmma_detail;
  constexpr int na = fragment<matrix_a, M, N, K, TA, LA>::num_elements;
  constexpr int nb = fragment<matrix_b, M, N, K, TB, LB>::num_elements;
  constexpr int nc = fragment<accumulator, M, N, K, TC>::num_elements;
  float in[na + nb + nc], out[nc];  // this lane's share of A, B and C, in f32 (exact for f16/bf16)
  for (int i = 0; i < na; ++i) in[i] = to_float(a.x[i]);
  for (int i = 0; i < nb; ++i) in[na + i] = to_float(b.x[i]);
  for (int i = 0; i < nc; ++i) in[na + nb + i] = to_float(c.x[i]);
  static constexpr MmaShape shape{M, N, K};
  keel::emu::warp_collective(keel::emu::Collective::mma, 0xffffffffu, in, out, mma_combine, &shape, where);
  for (int i = 0; i < nc; ++i) d.x[i] = from_float<TC>(out[i]);
}

}  // namespace nvcuda::wmma
