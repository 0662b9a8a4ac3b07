// CPU reference kernels for attention(), forward and backward.
//
// Each (batch, head) pair is independent, so keel's threads (core/parallel.h) take the B*H pairs
// one at a time and each pair runs serially: the backward's dK/dV accumulation over query rows then needs no atomics.
// Within a pair, query rows go in blocks of kRows, as the flash kernel's tiles do: a block's
// logits are one small GEMM against the keys any of its rows may see, [band_start(first row),
// last row]. Each row then softmaxes only its own band of that block; everything else in the row
// is a masked pair and gets probability exactly 0, which is what masking with -inf would give.
// So a local head costs O(T*(W+kRows)*D), not O(T^2*D), and Eigen's GEMM keeps the reference fast
// enough to train the demo model on the CPU.
#include "ops/cpu/attention.h"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>

#include "core/factory.h"
#include "core/parallel.h"
#include "ops/attention_band.h"
#include "ops/cpu/exp_f32.h"
#include "ops/nan_max.h"

namespace keel::cpu {

namespace {

template <typename Real>
using Mat = Eigen::Matrix<Real, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename Real>
using Vec = Eigen::Matrix<Real, Eigen::Dynamic, 1>;
// Pair bh's T x D rows of a (B, H, T, D) tensor whose D elements are adjacent, wherever its rows
// lie (attention_packed's heads are views into the (B, T, 3C) projection): Eigen packs GEMM
// operands itself, so a row stride other than D changes no arithmetic.
template <typename Real>
using Rows = Eigen::Map<Mat<Real>, 0, Eigen::OuterStride<>>;
template <typename Real>
using ConstRows = Eigen::Map<const Mat<Real>, 0, Eigen::OuterStride<>>;
template <typename Map, typename Real>
Map pair_rows(Real* data, const Tensor& t, int64_t bh, int64_t H) {
  const Shape& s = t.strides();
  return Map(data + (bh / H) * s[0] + (bh % H) * s[1], t.size(2), t.size(3), Eigen::OuterStride<>(s[2]));
}

constexpr int64_t kRows = 32;  // query rows per block: enough for GEMM to pay, few wasted keys

// Handing work to another thread costs microseconds (far more on a loaded machine), more than a
// tiny problem takes, so small calls (gradient checks, T = 1 decoding) stay on one thread.
bool worth_threads(int64_t B, int64_t H, int64_t T, int64_t D) { return B * H * T * T * D >= (1 << 18); }

// f(bh) for every (batch, head) pair, on keel's threads when the problem is worth them.
template <typename F>
void for_each_pair(int64_t B, int64_t H, int64_t T, int64_t D, F&& f) {
  if (worth_threads(B, H, T, D))
    parallel::for_each_chunk(B * H, f);
  else
    for (int64_t bh = 0; bh < B * H; ++bh) f(bh);
}

// A block row holds query i's logits for keys [k0, k0 + nk); its band [lo, i] sits at columns
// [lo - k0, i - k0]. Zeroes the masked columns around the band (their probability) and returns the band.
template <typename Row>
auto band_of(Row&& row, int64_t i, int64_t w, int64_t k0, int64_t nk) {
  const int64_t lo = band_start(i, w) - k0, n = i - k0 - lo + 1;
  row.head(lo).setZero();
  row.tail(nk - lo - n).setZero();
  auto band = row.segment(lo, n);
  static_assert(decltype(band)::InnerStrideAtCompileTime == 1, "a band's logits are adjacent: exp_minus takes them so");
  return band;
}

// The per-(batch, head) statistics of the forward, merged over the batch afterwards.
struct PairStats {
  std::vector<double> max_logit;  // (B*H) max |logit|
  std::vector<double> max_range;  // (B*H) max over rows of (max - min logit of the row's band)
};

// q, k, v: (B, H, T, D) -> out (B, H, T, D), lse (B, H, T), stats (B*H) per pair
template <typename Real>
void forward_impl(const Tensor& q, const Tensor& k, const Tensor& v, const std::vector<int64_t>& window,
                  double scale, double softcap, Tensor& out, Tensor& lse, PairStats& stats) {
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3);
  const Real *qp = q.data<Real>(), *kp = k.data<Real>(), *vp = v.data<Real>();
  Real *op = out.data<Real>(), *lp = lse.data<Real>();
  const Real sc = static_cast<Real>(scale), cap = static_cast<Real>(softcap);

  for_each_pair(B, H, T, D, [&](int64_t bh) {
    const int64_t w = window[bh % H];
    const auto Q = pair_rows<ConstRows<Real>>(qp, q, bh, H), K = pair_rows<ConstRows<Real>>(kp, k, bh, H),
               V = pair_rows<ConstRows<Real>>(vp, v, bh, H);
    auto O = pair_rows<Rows<Real>>(op, out, bh, H);
    Real* L = lp + bh * T;
    Mat<Real> S(std::min(kRows, T), T);  // a block's logits, then its probabilities
    double amax = 0, arange = 0;
    for (int64_t i0 = 0; i0 < T; i0 += kRows) {
      const int64_t r = std::min(kRows, T - i0), k0 = band_start(i0, w), nk = i0 + r - k0;
      auto Sb = S.topLeftCorner(r, nk);
      Sb.noalias() = Q.middleRows(i0, r) * K.middleRows(k0, nk).transpose();
      for (int64_t a = 0; a < r; ++a) {
        auto s = band_of(Sb.row(a), i0 + a, w, k0, nk);
        s *= sc;
        if (cap > 0) s = cap * (s.array() / cap).tanh();
        // max |logit| is max(|hi|, |lo|); a NaN in the row makes both NaN, and everything after.
        const Real hi = s.template maxCoeff<Eigen::PropagateNaN>(), lo = s.template minCoeff<Eigen::PropagateNaN>();
        amax = nan_max(amax, static_cast<double>(std::max(std::abs(hi), std::abs(lo))));
        arange = nan_max(arange, static_cast<double>(hi - lo));
        // Subtract the row max before exp so that large logits cannot overflow.
        exp_minus(s.data(), s.size(), hi, s.data());
        const Real l = s.sum();
        s /= l;
        L[i0 + a] = hi + std::log(l);
      }
      O.middleRows(i0, r).noalias() = Sb * V.middleRows(k0, nk);
    }
    stats.max_logit[bh] = amax;
    stats.max_range[bh] = arange;
  });
}

// q, k, v, out, dout: (B, H, T, D), lse (B, H, T) -> dq, dk, dv (B, H, T, D)
//   P = exp(S - lse), dV = P^T dO, dP = dO V^T, dS = P * (dP - rowsum(dO * O)), dQ = scale dS K,
//   dK = scale dS^T Q. rowsum(dO * O) equals rowsum(P * dP) but needs only O, as in the flash kernel.
//   With soft-capping S = c tanh(S0 / c), and dS0 = dS * (1 - (S / c)^2) by the chain rule.
template <typename Real>
void backward_impl(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                   const Tensor& dout, const std::vector<int64_t>& window, double scale, double softcap, Tensor& dq,
                   Tensor& dk, Tensor& dv) {
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3);
  const Real *qp = q.data<Real>(), *kp = k.data<Real>(), *vp = v.data<Real>();
  const Real *op = out.data<Real>(), *gp = dout.data<Real>(), *lp = lse.data<Real>();
  Real *dqp = dq.data<Real>(), *dkp = dk.data<Real>(), *dvp = dv.data<Real>();
  const Real sc = static_cast<Real>(scale), cap = static_cast<Real>(softcap);

  for_each_pair(B, H, T, D, [&](int64_t bh) {
    const int64_t w = window[bh % H];
    const auto Q = pair_rows<ConstRows<Real>>(qp, q, bh, H), K = pair_rows<ConstRows<Real>>(kp, k, bh, H),
               V = pair_rows<ConstRows<Real>>(vp, v, bh, H);
    const auto O = pair_rows<ConstRows<Real>>(op, out, bh, H), dO = pair_rows<ConstRows<Real>>(gp, dout, bh, H);
    auto dQ = pair_rows<Rows<Real>>(dqp, dq, bh, H), dK = pair_rows<Rows<Real>>(dkp, dk, bh, H),
         dV = pair_rows<Rows<Real>>(dvp, dv, bh, H);
    const Real* L = lp + bh * T;
    dK.setZero();
    dV.setZero();
    Mat<Real> P(std::min(kRows, T), T), dS(std::min(kRows, T), T);
    Mat<Real> dcap(cap > 0 ? std::min(kRows, T) : 0, cap > 0 ? T : 0);  // 1 - (S / c)^2 per pair
    for (int64_t i0 = 0; i0 < T; i0 += kRows) {
      const int64_t r = std::min(kRows, T - i0), k0 = band_start(i0, w), nk = i0 + r - k0;
      auto Pb = P.topLeftCorner(r, nk);
      auto dSb = dS.topLeftCorner(r, nk);
      auto Kb = K.middleRows(k0, nk);
      auto Vb = V.middleRows(k0, nk);
      auto dOb = dO.middleRows(i0, r);
      // Recompute P from the saved lse, as the flash kernel does, instead of storing T x T.
      Pb.noalias() = Q.middleRows(i0, r) * Kb.transpose();
      for (int64_t a = 0; a < r; ++a) {
        auto s = band_of(Pb.row(a), i0 + a, w, k0, nk);
        s *= sc;
        if (cap > 0) {
          s = cap * (s.array() / cap).tanh();
          dcap.row(a).head(nk) = Real(1) - (Pb.row(a).array() / cap).square();  // masked columns: P = 0 anyway
        }
        exp_minus(s.data(), s.size(), L[i0 + a], s.data());
      }
      dV.middleRows(k0, nk).noalias() += Pb.transpose() * dOb;
      dSb.noalias() = dOb * Vb.transpose();  // dP
      const Vec<Real> Di = dOb.cwiseProduct(O.middleRows(i0, r)).rowwise().sum();
      dSb = Pb.cwiseProduct(dSb.colwise() - Di);  // masked pairs have P = 0, hence dS = 0
      if (cap > 0) dSb = dSb.cwiseProduct(dcap.topLeftCorner(r, nk));
      dQ.middleRows(i0, r).noalias() = sc * (dSb * Kb);
      dK.middleRows(k0, nk).noalias() += sc * (dSb.transpose() * Q.middleRows(i0, r));
    }
  });
}

// The loops read rows in place (pair_rows) when a tensor's D elements are adjacent and its strides
// are not negative; an input that breaks this is read through a packed copy, and an output must
// keep it (the front end allocates outputs packed or as views of a packed tensor).
bool unit_last(const Tensor& t) {
  const Shape& s = t.strides();
  return (t.size(3) <= 1 || s[3] == 1) && s[0] >= 0 && s[1] >= 0 && s[2] >= 0;
}
Tensor readable(const Tensor& t) { return unit_last(t) ? t : t.contiguous(); }
void check_writable(const char* name, const Tensor& t) {
  if (!unit_last(t))
    throw ValueError("attention (CPU)", std::string(name) + " must have adjacent D elements and non-negative strides",
                     "allocate outputs with empty() (the front end attention() does)");
}

}  // namespace

void attention_forward(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, const std::vector<int64_t>& window,
                       double scale, double softcap, Tensor& out, Tensor& lse, Tensor& max_logit,
                       Tensor& max_range) {
  const Tensor q = readable(q_in), k = readable(k_in), v = readable(v_in);
  const int64_t B = q.size(0), H = q.size(1);
  PairStats stats{std::vector<double>(B * H, 0.0), std::vector<double>(B * H, 0.0)};
  check_writable("out", out);
  visit_dtype<CpuFloat>(q.dtype(), "attention", [&]<typename Real>() {
    forward_impl<Real>(q, k, v, window, scale, softcap, out, lse, stats);
  });
  // Reduce over the batch serially so the statistics do not depend on the thread count.
  float *m = max_logit.data<float>(), *r = max_range.data<float>();
  for (int64_t h = 0; h < H; ++h) {
    double x = 0, y = 0;
    for (int64_t b = 0; b < B; ++b) {
      x = nan_max(x, stats.max_logit[b * H + h]);
      y = nan_max(y, stats.max_range[b * H + h]);
    }
    m[h] = static_cast<float>(x);
    r[h] = static_cast<float>(y);
  }
}

void attention_backward(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, const Tensor& out_in,
                        const Tensor& lse, const Tensor& dout_in, const std::vector<int64_t>& window, double scale,
                        double softcap, Tensor& dq, Tensor& dk, Tensor& dv) {
  const Tensor q = readable(q_in), k = readable(k_in), v = readable(v_in);
  const Tensor out = readable(out_in), dout = readable(dout_in);
  check_writable("dq", dq), check_writable("dk", dk), check_writable("dv", dv);
  visit_dtype<CpuFloat>(q.dtype(), "attention", [&]<typename Real>() {
    backward_impl<Real>(q, k, v, out, lse, dout, window, scale, softcap, dq, dk, dv);
  });
}

}  // namespace keel::cpu
