// CPU kernel of decode_attention() and decode_attention_cached(): each query row against the
// keys its band reaches in its head's cache.
//
// A cache comes in two head groups (a local ring, a global cache), each holding the key of
// position j in slot j % S of its own S; a row only needs its group's base pointer and S. When
// the new token's key and value come along (decode_attention_cached), they go into their slots
// first, on one thread: a row's own key is part of its window.
//
// The (batch, head, query) rows are independent, so keel's threads take them one at a time. A row's
// keys [band_start(p, w), p] sit in consecutive slots of the cache, wrapping once at most when
// the cache is a ring (a local head's), so its logits are at most two matrix-vector products
// against contiguous rows of K, and its output two more against V: nothing is copied, masked or
// materialised, and a local head reads w keys whatever the length of the text.
#include "ops/cpu/decode_attention.h"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>

#include "core/parallel.h"
#include "ops/attention_band.h"

namespace keel::cpu {

namespace {

// Below this many multiply-adds (rows x keys x D) the rows stay on one thread
// (docs/benchmarks.md, "CPU threads").
constexpr int64_t kMinThreadedWork = int64_t{1} << 16;

template <typename Real>
using Mat = Eigen::Matrix<Real, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename Real>
using Vec = Eigen::Matrix<Real, Eigen::Dynamic, 1>;

// A run of n consecutive keys that starts at slot `slot` and at offset `at` of the row's keys.
struct Run {
  int64_t slot, at, n;
};

// Keys [lo, lo + n) in a cache of S slots (key j in slot j % S): one run, or two when it wraps.
int runs_of(int64_t lo, int64_t n, int64_t S, Run* runs) {
  const int64_t first = lo % S, head = std::min(n, S - first);
  runs[0] = {first, 0, head};
  if (head == n) return 1;
  runs[1] = {0, head, n - head};
  return 2;
}

// The keys and values of one (batch, head): S slots of D from K and V.
template <typename Real>
struct Slots {
  Real *K, *V;
  int64_t S;
};

// Head h of batch b in the cache's two groups: heads [0, Hl) local, [Hl, H) global.
template <typename Real>
Slots<Real> slots_of(const DecodeCache& c, int64_t Hl, int64_t H, int64_t D, int64_t b, int64_t h) {
  const bool local = h < Hl;
  const Tensor &k = local ? c.k_local : c.k_global, &v = local ? c.v_local : c.v_global;
  const int64_t S = k.size(2), at = ((local ? b * Hl + h : b * (H - Hl) + h - Hl) * S) * D;
  return {k.data<Real>() + at, v.data<Real>() + at, S};
}

// q (B, H, t, D), k_new, v_new (B, H, 1, D) or undefined, cache (B, Hl, S0, D) + (B, H - Hl, S1, D)
// -> out (B, H, t, D)
template <typename Real>
void forward_impl(const Tensor& q, const Tensor& k_new, const Tensor& v_new, const DecodeCache& cache,
                  const std::vector<int64_t>& window, int64_t position, double scale, double softcap, Tensor& out) {
  const int64_t B = q.size(0), H = q.size(1), t = q.size(2), D = q.size(3);
  const int64_t Hl = cache.k_local.defined() ? cache.k_local.size(1) : 0;
  const Real* qp = q.data<Real>();
  Real* op = out.data<Real>();
  const Real sc = static_cast<Real>(scale), cap = static_cast<Real>(softcap);

  if (k_new.defined()) {  // t == 1: the new token's key and value into their slots, before any row reads
    const Real *kn = k_new.data<Real>(), *vn = v_new.data<Real>();
    for (int64_t bh = 0; bh < B * H; ++bh) {
      const Slots<Real> s = slots_of<Real>(cache, Hl, H, D, bh / H, bh % H);
      std::copy_n(kn + bh * D, D, s.K + (position % s.S) * D);
      std::copy_n(vn + bh * D, D, s.V + (position % s.S) * D);
    }
  }

  // Handing rows to another thread costs microseconds: a few short rows stay on one thread.
  int64_t keys = 0;  // read by all rows, about
  for (int64_t h = 0; h < H; ++h) keys += position + t - band_start(position + t - 1, window[h]);
  const bool threads = B * t * keys * D >= kMinThreadedWork;

  auto row = [&](int64_t r) {
    const int64_t bh = r / t, p = position + r % t, w = window[bh % H];
    const int64_t lo = band_start(p, w), n = p - lo + 1;
    Eigen::Map<const Vec<Real>> qv(qp + r * D, D);
    Eigen::Map<Vec<Real>> o(op + r * D, D);
    const Slots<Real> slots = slots_of<Real>(cache, Hl, H, D, bh / H, bh % H);
    Run runs[2];
    const int nruns = runs_of(lo, n, slots.S, runs);
    Vec<Real> s(n);
    for (int i = 0; i < nruns; ++i) {
      Eigen::Map<const Mat<Real>> Kr(slots.K + runs[i].slot * D, runs[i].n, D);
      s.segment(runs[i].at, runs[i].n).noalias() = Kr * qv;
    }
    s *= sc;
    if (cap > 0) s = cap * (s.array() / cap).tanh();
    // Subtract the row max before exp so that large logits cannot overflow.
    const Real m = s.maxCoeff();
    s = (s.array() - m).exp();
    const Real l = s.sum();
    o.setZero();
    for (int i = 0; i < nruns; ++i) {
      Eigen::Map<const Mat<Real>> Vr(slots.V + runs[i].slot * D, runs[i].n, D);
      o.noalias() += Vr.transpose() * s.segment(runs[i].at, runs[i].n);
    }
    o /= l;
  };
  if (threads)
    parallel::for_each_chunk(B * H * t, row);
  else
    for (int64_t r = 0; r < B * H * t; ++r) row(r);
}

}  // namespace

void decode_attention_forward(const Tensor& q, const Tensor& k_new, const Tensor& v_new, const DecodeCache& cache,
                              const std::vector<int64_t>& window, int64_t position, double scale, double softcap,
                              Tensor& out) {
  if (q.numel() == 0) return;
  visit_dtype<CpuFloat>(q.dtype(), "decode_attention", [&]<typename Real>() {
    forward_impl<Real>(q, k_new, v_new, cache, window, position, scale, softcap, out);
  });
}

}  // namespace keel::cpu
