// Slices for max/argmax's NaN rule, shared by the CPU test (test_reduce.cpp) and the CUDA one
// (test_ops_cuda.cpp), with the rule written out once as the reference. The rule is PyTorch's:
// a NaN beats every number, so a slice holding a NaN has max NaN and argmax its first NaN;
// otherwise the first maximum wins.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/factory.h"
#include "core/random.h"

namespace keel::testing {

// The kinds of slice along the reduced dim. The positions are spread so that, when a kernel
// splits a long slice over blocks, the NaNs and the tie land in different splits.
enum class NanRow { plain, all_nan, nan_first, nan_middle, nan_last, two_nans, tie, all_neg_inf, neg_inf_then_nan };
inline constexpr NanRow kNanRows[] = {NanRow::plain,    NanRow::all_nan, NanRow::nan_first,
                                      NanRow::nan_middle, NanRow::nan_last, NanRow::two_nans,
                                      NanRow::tie,      NanRow::all_neg_inf, NanRow::neg_inf_then_nan};
inline constexpr int64_t kNanRowKinds = sizeof(kNanRows) / sizeof(kNanRows[0]);

// One slice of length n (n >= 8) of the given kind: values in [-50, 50) drawn from seed, then
// the kind's NaNs, tie (100 twice: exact in every dtype and above every drawn value) or -infs.
inline std::vector<float> nan_row(NanRow kind, int64_t n, uint64_t seed) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  std::vector<float> r(n);
  for (int64_t j = 0; j < n; ++j) r[j] = philox_uniform(seed, 0, uint64_t(j)) * 100.0f - 50.0f;
  switch (kind) {
    case NanRow::plain: break;
    case NanRow::all_nan: r.assign(n, nan); break;
    case NanRow::nan_first: r[0] = nan; break;
    case NanRow::nan_middle: r[n / 2 + 1] = nan; break;
    case NanRow::nan_last: r[n - 1] = nan; break;
    case NanRow::two_nans: r[n / 3] = nan, r[3 * n / 4] = nan; break;
    case NanRow::tie: r[n / 4] = 100.0f, r[3 * n / 4 + 1] = 100.0f; break;
    case NanRow::all_neg_inf: r.assign(n, -inf); break;
    case NanRow::neg_inf_then_nan: r.assign(n, -inf), r[n - 2] = nan; break;
  }
  return r;
}

// x (outer, n, inner) f32 on the CPU whose slice (o, :, i) along dim 1 is of kind
// kNanRows[(first_kind + o * inner + i) % kNanRowKinds], each drawn from its own seed.
inline Tensor nan_rows_tensor(int64_t outer, int64_t n, int64_t inner, uint64_t seed, int64_t first_kind = 0) {
  std::vector<float> v(outer * n * inner);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      const int64_t s = o * inner + i;
      std::vector<float> r = nan_row(kNanRows[(first_kind + s) % kNanRowKinds], n, seed + uint64_t(s));
      for (int64_t j = 0; j < n; ++j) v[(o * n + j) * inner + i] = r[j];
    }
  return from_vector<float>(v, {outer, n, inner});
}

// PyTorch's max and argmax along dim 1 of x (outer, n, inner): values (outer, inner) and indices.
struct MaxRef {
  std::vector<double> value;
  std::vector<int64_t> index;
};
inline MaxRef max_reference(const Tensor& x) {
  const int64_t outer = x.size(0), n = x.size(1), inner = x.size(2);
  std::vector<double> v = x.to_vector<double>();
  MaxRef ref;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      int64_t best = 0;
      for (int64_t j = 0; j < n; ++j) {
        const double a = v[(o * n + j) * inner + i];
        if (std::isnan(a)) {  // the first NaN: nothing can beat it
          best = j;
          break;
        }
        if (a > v[(o * n + best) * inner + i]) best = j;
      }
      ref.value.push_back(v[(o * n + best) * inner + i]);
      ref.index.push_back(best);
    }
  return ref;
}

// values and indices (outer, inner), on any device, equal ref; NaN matches NaN only.
inline void check_max_equals(const Tensor& values, const Tensor& indices, const MaxRef& ref) {
  std::vector<double> v = values.to_vector<double>();
  std::vector<int64_t> idx = indices.to_vector<int64_t>();
  REQUIRE(v.size() == ref.value.size());
  REQUIRE(idx.size() == ref.index.size());
  for (size_t k = 0; k < v.size(); ++k) {
    CAPTURE(k);
    CAPTURE(v[k]);
    CAPTURE(ref.value[k]);
    CHECK(idx[k] == ref.index[k]);
    if (std::isnan(ref.value[k]))
      CHECK(std::isnan(v[k]));
    else
      CHECK(v[k] == ref.value[k]);
  }
}

}  // namespace keel::testing
