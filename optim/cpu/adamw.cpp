// The AdamW step on the CPU: one pass over the elements in chunks over keel's threads
// (core/parallel.h), the same per-element formula (optim/adamw_math.h) as the fused CUDA kernel.
#include "optim/cpu/adamw.h"

#include <type_traits>

#include "core/parallel.h"

namespace keel::optim::cpu {

namespace {
// Elements per chunk of the threads: about 13 us of work at 0.4 ns an element (core/parallel.h,
// "Chunk sizes"; docs/benchmarks.md, "CPU threads").
constexpr int64_t kGrain = int64_t{1} << 15;

// param (N) P, grad (N) G, m/v (N) C, master (N) f32 or null. C is f32 unless P is f64.
template <typename P, typename G, typename C>
void adamw_loop(P* param, const G* grad, C* m, C* v, float* master, int64_t n, const AdamWScalars& s) {
  using W = std::conditional_t<std::is_same_v<G, double>, double, float>;  // scale_'s type for G
  // Elements [begin, end), with or without master weights. The loop's body has no branch and
  // reads its constants from its own copies, which no store can alias, so the compiler
  // vectorizes it (for f32; the 16-bit conversions branch on NaN). Every operation is one IEEE
  // rounding either way, so the bits are those of the scalar loop.
  auto run = [&]<bool kMaster>(int64_t begin, int64_t end) {
    const AdamWCoeffs<C> k(s);
    const W ks = std::is_same_v<W, double> ? W(k.grad_scale64) : W(k.grad_scale32);
    for (int64_t i = begin; i < end; ++i) {
      // Widen through float for the 16-bit types (their only conversion), then to C; scaled first
      // as scale_ would have left the gradient (optim/cpu/grad_math.cpp).
      const G gi = static_cast<G>(static_cast<W>(grad[i]) * ks);
      C g = static_cast<C>(static_cast<W>(gi));
      C w;
      if constexpr (kMaster)
        w = master[i];
      else
        w = static_cast<C>(param[i]);
      adamw_update(g, w, m[i], v[i], k);
      if constexpr (kMaster) master[i] = w;
      param[i] = static_cast<P>(w);
    }
  };
  parallel::for_range(n, kGrain, [&](int64_t begin, int64_t end) {
    if constexpr (std::is_same_v<C, float>) {
      if (master) return run.template operator()<true>(begin, end);
    }
    run.template operator()<false>(begin, end);
  });
}
}  // namespace

// param, grad, m, v (N), master (N) or undefined: one parameter's update in place
void adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, Tensor& master, const AdamWScalars& s) {
  float* pm = master.defined() ? master.data<float>() : nullptr;
  visit_dtype<FloatDType>(param.dtype(), "AdamW::step", [&]<typename P>() {
    using C = std::conditional_t<std::is_same_v<P, double>, double, float>;
    visit_dtype<FloatDType>(grad.dtype(), "AdamW::step", [&]<typename G>() {
      adamw_loop<P, G, C>(static_cast<P*>(param.raw_data()), grad.data<G>(), m.data<C>(), v.data<C>(), pm,
                          param.numel(), s);
    });
  });
}

}  // namespace keel::optim::cpu
