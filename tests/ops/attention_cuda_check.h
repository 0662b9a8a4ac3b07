// What the CUDA attention tests share (test_attention_cuda.cpp, test_attention_grid_cuda.cpp):
// the CPU reference in f64, a run of the CUDA kernels into NaN-poisoned outputs, the per-row
// comparisons and their tolerances.
//
// Every case draws fresh random inputs, rounds them to the dtype under test, runs the CUDA
// kernels and compares with the CPU op in f64 on the same (rounded) inputs. Tolerances: the
// worst row's relative error (one query's or key's D values, so one wrong row cannot hide in a
// norm over the tensor) under 1e-5 for f32 and 1e-2 for bf16/f16 (their storage rounding is
// 2^-9 / 2^-11 per element); a NaN anywhere fails. bf16 and f16 run the tensor-core (mma) kernels,
// f32 the FMA kernels.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/factory.h"
#include "cuda_compare.h"
#include "cuda_test.h"
#include "ops/attention.h"
#include "ops/attention_band.h"
#include "ops/cpu/attention.h"
#include "ops/cuda/attention.h"
#include "ops/shape.h"

namespace keel::attention_test {

// How much of the parity grid (test_attention_grid_cuda.cpp) runs. All of it on a GPU, or on the
// emulated GPU without KEEL_TEST_REDUCED. KEEL_TEST_REDUCED trims it: the plain emulated build
// (CI's emu tier) still runs T up to 4096 on a covering subset, and under a sanitizer (the
// emu-tsan and emu-asan tiers, or compute-sanitizer on a GPU: tests/gpu/check.sh) it keeps the
// short sequences, where every code path already runs.
enum class Grid { sanitized, emulated, full };
inline Grid grid_level() {
  if (!keel::testing::reduced_sizes()) return Grid::full;
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
  return Grid::sanitized;
#else
#if defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
  return Grid::sanitized;
#endif
#endif
#if defined(KEEL_CUDA_EMULATED)
  return Grid::emulated;
#else
  return Grid::sanitized;
#endif
#endif
}

inline double tolerance(DType t) { return t == DType::f32 ? 1e-5 : 1e-2; }
// log-sum-exp, max logit and max range come from f32 accumulation of exact products of the (rounded)
// inputs whatever the dtype, so they are held much tighter than the outputs: per element.
inline double stat_tolerance(DType t) { return t == DType::f32 ? 1e-5 : 1e-4; }
// The smallest normal number of f16 (2^-14); bf16 and f32 reach down to 1e-38.
inline double min_normal(DType t) { return t == DType::f16 ? 6.103515625e-05 : 0.0; }

// out, dq, dk, dv: the worst row's (one query's or key's D values) relative error, so one
// wrong row cannot hide in a norm over the tensor; a NaN (an unwritten, poisoned element) fails.
inline void check_close(const char* name, const Tensor& got, const Tensor& ref, double tol) {
  const double e = cudatest::worst_row_rel_err(got, ref);
  CHECK_MESSAGE(e < tol, std::string(name) << ": worst row's relative error " << e << " (tolerance " << tol << ")");
}
// lse, max_logit, max_range: per element.
inline void check_stat(const char* name, const Tensor& got, const Tensor& ref, double tol) {
  const double e = cudatest::max_elem_rel_err(got, ref);
  CHECK_MESSAGE(e < tol, std::string(name) << ": worst element's relative error " << e << " (tolerance " << tol << ")");
}

struct Grads {
  Tensor out, lse, max_logit, max_range, dq, dk, dv;
};

// dq_i = scale sum_j dS_ij k_j and dk_j = scale sum_i dS_ij q_i, with dS_ij = p_ij (dP_ij - D_i),
// dP_ij = dO_i . v_j and D_i = dO_i . o_i: the dS of a row sum to zero over its keys, and D_i
// and dP_ij are dot products whose terms cancel too, so dq and dk can be exactly zero (T = 1, a
// window of 1, the first query) while their terms are not; relative to their own size a correct
// result then has an unbounded error. The bound that holds for any floating-point evaluation is
// relative to the size of the terms: with a_ij = sum_e |dO_ie v_je|, b_i = sum_e |dO_ie o_ie|
// and cap' the soft-cap derivative, w_ij = p_ij (a_ij + b_i) |cap'_ij| and
//   dq row i is held relative to |scale| sum_j w_ij |k_j|,  dk row j to |scale| sum_i w_ij |q_i|.
// The kernels store dS in the inputs' dtype: f16 below its smallest normal number (6.1e-5) keeps
// an absolute error, so each w_ij counts as at least that (`min_normal`, 0 for f32 and bf16).
// A missing or wrong key still shows: it moves a row by a whole term. Computed in f64 from the
// reference's own out and lse; rows in (B, H, T) order.
struct TermScales {
  std::vector<double> dq, dk;
};
inline TermScales term_scales(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Grads& ref,
                              const std::vector<int64_t>& window, double scale, double softcap, double min_normal) {
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3);
  const std::vector<double> qv = q.to_vector<double>(), kv = k.to_vector<double>(), vv = v.to_vector<double>(),
                            gv = g.to_vector<double>(), ov = ref.out.to_vector<double>(),
                            lse = ref.lse.to_vector<double>();
  auto dot = [D](const double* a, const double* b) {
    double d = 0;
    for (int64_t e = 0; e < D; ++e) d += a[e] * b[e];
    return d;
  };
  auto abs_dot = [D](const double* a, const double* b) {
    double d = 0;
    for (int64_t e = 0; e < D; ++e) d += std::fabs(a[e] * b[e]);
    return d;
  };
  TermScales ts{std::vector<double>(B * H * T, 0.0), std::vector<double>(B * H * T, 0.0)};
  for (int64_t bh = 0; bh < B * H; ++bh) {
    const int64_t w = window[bh % H] >= T ? 0 : window[bh % H];
    const double *Q = qv.data() + bh * T * D, *K = kv.data() + bh * T * D, *V = vv.data() + bh * T * D;
    const double *G = gv.data() + bh * T * D, *O = ov.data() + bh * T * D;
    for (int64_t i = 0; i < T; ++i) {
      const double b_i = abs_dot(G + i * D, O + i * D), q_norm = std::sqrt(dot(Q + i * D, Q + i * D));
      for (int64_t j = band_start(i, w); j <= i; ++j) {
        double logit = dot(Q + i * D, K + j * D) * scale, cap = 1;
        if (softcap > 0) {
          const double t = std::tanh(logit / softcap);
          logit = softcap * t, cap = 1 - t * t;
        }
        const double w_ij =
            std::max(std::exp(logit - lse[bh * T + i]) * (abs_dot(G + i * D, V + j * D) + b_i) * cap, min_normal);
        ts.dq[bh * T + i] += std::fabs(scale) * w_ij * std::sqrt(dot(K + j * D, K + j * D));
        ts.dk[bh * T + j] += std::fabs(scale) * w_ij * q_norm;
      }
    }
  }
  return ts;
}

// The worst row's error relative to the size of its terms (term_scales); a NaN fails.
inline void check_by_terms(const char* name, const Tensor& got, const Tensor& ref, const std::vector<double>& scales,
                           double tol) {
  const std::vector<double> o = got.to_vector<double>(), r = ref.to_vector<double>();
  const size_t D = static_cast<size_t>(ref.size(-1));
  double worst = 0;
  for (size_t row = 0; row < scales.size(); ++row) {
    double num = 0;
    for (size_t e = row * D; e < (row + 1) * D; ++e) {
      if (!std::isfinite(o[e])) worst = std::numeric_limits<double>::infinity();
      num += (o[e] - r[e]) * (o[e] - r[e]);
    }
    worst = std::max(worst, std::sqrt(num) / std::max(scales[row], 1e-300));
  }
  CHECK_MESSAGE(worst < tol, std::string(name) << ": worst row's error relative to the size of its terms " << worst
                                               << " (tolerance " << tol << ")");
}

// The CPU kernels in f64 on the given (already rounded) inputs.
inline Grads cpu_reference(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                           const std::vector<int64_t>& window, double scale, double softcap) {
  const Tensor q64 = q.to(DType::f64), k64 = k.to(DType::f64), v64 = v.to(DType::f64), g64 = g.to(DType::f64);
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2);
  Grads r;
  r.out = empty_like(q64);
  r.lse = empty({B, H, T}, {DType::f64});
  r.max_logit = empty({H}, {DType::f32});
  r.max_range = empty({H}, {DType::f32});
  cpu::attention_forward(q64, k64, v64, window, scale, softcap, r.out, r.lse, r.max_logit, r.max_range);
  r.dq = empty_like(q64), r.dk = empty_like(q64), r.dv = empty_like(q64);
  cpu::attention_backward(q64, k64, v64, r.out, r.lse, g64, window, scale, softcap, r.dq, r.dk, r.dv);
  return r;
}

// A NaN-poisoned (B, H, T, D) output at the start of a longer poisoned allocation. A head dim below
// the kernel width (ops/cuda/attention_tiles.h) leaves padding columns in the kernels' tiles; one
// stored by mistake lands in the next row, which its own store may then overwrite, but past the
// last row it lands in the guard, which check_guard reads back.
inline constexpr int64_t kGuard = 512;
struct Guarded {
  Tensor buffer, view;
};
inline Guarded guarded_output(const Shape& shape, DType dt, Device dev) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  Tensor buffer = full({n + kGuard}, std::numeric_limits<double>::quiet_NaN(), {dt, dev});
  return {buffer, view(narrow(buffer, 0, 0, n), shape)};
}
inline void check_guard(const char* name, const Guarded& g) {
  const int64_t n = g.view.numel();
  const std::vector<double> tail = narrow(g.buffer, 0, n, kGuard).to(Device::cpu()).to_vector<double>();
  int64_t written = 0;
  for (double x : tail) written += !std::isnan(x);
  CHECK_MESSAGE(written == 0, std::string(name) << ": " << written << " elements written past the end");
}

// The CUDA kernels into NaN-poisoned outputs, checking that nothing is written past them.
inline Grads cuda_run(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                      const std::vector<int64_t>& window, double scale, double softcap) {
  const Device dev = Device::cuda(0);
  const Tensor qd = q.to(dev), kd = k.to(dev), vd = v.to(dev), gd = g.to(dev);
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Guarded out = guarded_output(q.shape(), q.dtype(), dev), dq = guarded_output(q.shape(), q.dtype(), dev),
                dk = guarded_output(q.shape(), q.dtype(), dev), dv = guarded_output(q.shape(), q.dtype(), dev);
  Grads r;
  r.out = out.view;
  r.lse = full({B, H, T}, nan, {DType::f32, dev});
  r.max_logit = full({H}, nan, {DType::f32, dev});
  r.max_range = full({H}, nan, {DType::f32, dev});
  cuda::attention_forward(qd, kd, vd, window, scale, softcap, r.out, r.lse, r.max_logit, r.max_range);
  r.dq = dq.view, r.dk = dk.view, r.dv = dv.view;
  cuda::attention_backward(qd, kd, vd, r.out, r.lse, gd, window, scale, softcap, r.dq, r.dk, r.dv);
  check_guard("out", out);
  check_guard("dq", dq);
  check_guard("dk", dk);
  check_guard("dv", dv);
  return r;
}

struct Case {
  int64_t B, T, D;
  std::vector<int64_t> window;
  double scale = 0;  // 0: 1/sqrt(D)
  double softcap = 0;
  double input_std = 1;  // larger: larger logits
};

// One case on one dtype.
inline void check_case(const Case& c, DType dt, uint64_t seed) {
  const int64_t H = static_cast<int64_t>(c.window.size());
  const Shape shape{c.B, H, c.T, c.D};
  Generator gen(seed);
  const Tensor q = randn(shape, gen, {}, 0, c.input_std).to(dt), k = randn(shape, gen, {}, 0, c.input_std).to(dt),
               v = randn(shape, gen).to(dt), g = randn(shape, gen).to(dt);
  const double scale = c.scale != 0 ? c.scale : 1 / std::sqrt(static_cast<double>(c.D));
  std::string windows;
  for (int64_t w : c.window) windows += std::to_string(w) + " ";
  INFO(std::string(dtype_name(dt)) << " B " << c.B << " T " << c.T << " D " << c.D << " windows [ " << windows
                                   << "] scale " << scale << " softcap " << c.softcap);
  const Grads ref = cpu_reference(q, k, v, g, c.window, scale, c.softcap);
  const TermScales ts = term_scales(q, k, v, g, ref, c.window, scale, c.softcap, min_normal(dt));
  const double tol = tolerance(dt);
  const Grads got = cuda_run(q, k, v, g, c.window, scale, c.softcap);
  CHECK(got.out.dtype() == dt);
  check_close("out", got.out, ref.out, tol);
  check_stat("lse", got.lse, ref.lse, stat_tolerance(dt));
  check_stat("max_logit", got.max_logit, ref.max_logit, stat_tolerance(dt));
  check_stat("max_range", got.max_range, ref.max_range, stat_tolerance(dt));
  check_by_terms("dq", got.dq, ref.dq, ts.dq, tol);
  check_by_terms("dk", got.dk, ref.dk, ts.dk, tol);
  check_close("dv", got.dv, ref.dv, tol);
}

inline constexpr DType kDTypes[] = {DType::f32, DType::bf16, DType::f16};

}  // namespace keel::attention_test
