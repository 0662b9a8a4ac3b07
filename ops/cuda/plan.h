// Host-side planning shared by the CUDA kernels: how to cut an array for 16-byte loads, how
// to shrink a broadcast to the fewest dimensions, and whether a batch of matrices has one
// stride (so a single strided-batched GEMM covers it). Plain C++ with no CUDA headers, so
// tests/ops/test_ops_cuda.cpp checks it on the CPU, in CI.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <vector>

namespace keel::cuda::plan {

// Kernels reading or writing arrays of n elements of `elem` bytes at the given pointers split
// each array into a scalar head, a body of 16-byte vectors and a scalar tail. The head is the
// number of elements before the first 16-byte boundary; it is the same for every pointer only
// when they share their address modulo 16. When they do not, the answer is n: all scalar.
inline int64_t vector_head(int64_t n, size_t elem, std::initializer_list<const void*> ptrs) {
  if (n <= 0) return 0;
  uintptr_t mis = reinterpret_cast<uintptr_t>(*ptrs.begin()) & 15u;
  for (const void* p : ptrs)
    if ((reinterpret_cast<uintptr_t>(p) & 15u) != mis || (reinterpret_cast<uintptr_t>(p) % elem) != 0) return n;
  int64_t head = static_cast<int64_t>(((16u - mis) & 15u) / elem);
  return head < n ? head : n;
}

// A shape with one stride vector per operand (element strides, 0 along broadcast dims).
struct Strided {
  std::vector<int64_t> shape;
  std::vector<std::vector<int64_t>> strides;  // [operand][dim]
};

// Drops size-1 dims and merges neighbours d, d+1 wherever every operand steps through them as
// through one dim (stride[d] == stride[d+1] * shape[d+1]). A bias add (N, C) + (C) becomes 2
// dims, a same-shape contiguous add 1, so the kernel's index arithmetic stays short. The
// element order (row-major over the result) is unchanged.
inline Strided collapse(const std::vector<int64_t>& shape, const std::vector<std::vector<int64_t>>& strides) {
  Strided out;
  out.strides.resize(strides.size());
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    bool merge = !out.shape.empty();
    for (size_t k = 0; k < strides.size() && merge; ++k)
      merge = out.strides[k].back() == strides[k][d] * shape[d];
    if (merge) {
      out.shape.back() *= shape[d];
      for (size_t k = 0; k < strides.size(); ++k) out.strides[k].back() = strides[k][d];
    } else {
      out.shape.push_back(shape[d]);
      for (size_t k = 0; k < strides.size(); ++k) out.strides[k].push_back(strides[k][d]);
    }
  }
  return out;
}

// Strides of an operand of shape `t_shape`/`t_strides` viewed at the broadcast shape `out`
// (NumPy alignment from the right; 0 along dims it is stretched along or does not have).
inline std::vector<int64_t> broadcast_strides(const std::vector<int64_t>& t_shape, const std::vector<int64_t>& t_strides,
                                              const std::vector<int64_t>& out) {
  std::vector<int64_t> s(out.size(), 0);
  size_t lead = out.size() - t_shape.size();
  for (size_t d = 0; d < t_shape.size(); ++d) s[lead + d] = t_shape[d] == 1 ? 0 : t_strides[d];
  return s;
}

// The one stride s with offset(batch index i) == i * s for every i of the row-major `batch`,
// given the operand's per-dim strides over `batch` (0 where broadcast); none when the batch
// dims do not collapse to one (then the caller packs the operand). All-zero strides give 0.
inline std::optional<int64_t> single_batch_stride(const std::vector<int64_t>& batch, const std::vector<int64_t>& strides) {
  int64_t s = 0, inner = 1;
  bool found = false;
  for (size_t k = batch.size(); k-- > 0;) {
    if (batch[k] == 1) continue;
    if (!found) {
      if (strides[k] % inner != 0) return std::nullopt;
      s = strides[k] / inner;
      found = true;
    }
    if (strides[k] != s * inner) return std::nullopt;
    inner *= batch[k];
  }
  return s;
}

}  // namespace keel::cuda::plan
