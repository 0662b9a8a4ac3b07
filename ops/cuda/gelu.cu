// GELU (tanh form) on the device, forward and backward.
// Flat grid-stride loops with 16-byte packs; the formulas are the CPU kernel's, in f32.
#include "ops/cuda/common.cuh"
#include "ops/cuda/gelu.h"
#include "ops/cuda/gelu.cuh"

namespace keel::cuda {

namespace {
using namespace dev;

struct GeluFn {
  __device__ __forceinline__ float operator()(float v, float) const { return gelu_tanh(v); }
};
struct GeluGradFn {
  __device__ __forceinline__ float operator()(float v, float g) const { return g * gelu_tanh_grad(v); }
};

// out (N) = fn(x, g) over N elements; g may be null (0).
// kVec: N is a multiple of the 16-byte pack and every base is 16-byte aligned.
template <typename T, bool kVec, typename Fn>
__global__ void gelu_kernel(const T* __restrict__ x, const T* __restrict__ g, T* __restrict__ out, int64_t n, Fn fn) {
  constexpr int V = kVec ? Pack<T>::N : 1;
  const int64_t nth = int64_t(gridDim.x) * blockDim.x;
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < n / V; k += nth) {
    const int64_t i = k * V;
    if constexpr (kVec) {
      Pack<T> px = load_pack(x + i), pg, po;
      if (g) pg = load_pack(g + i);
#pragma unroll
      for (int j = 0; j < V; ++j) po.v[j] = from_f32<T>(fn(to_f32(px.v[j]), g ? to_f32(pg.v[j]) : 0.0f));
      store_pack(out + i, po);
    } else {
      out[i] = from_f32<T>(fn(to_f32(x[i]), g ? to_f32(g[i]) : 0.0f));
    }
  }
}

// x (N), g (N) or undefined -> (N)
template <typename Fn>
Tensor run(const Tensor& x, const Tensor& g, const char* op, Fn fn) {
  require_device(x, op);
  Tensor out = empty(x.shape(), {x.dtype(), x.device()});
  const int64_t n = x.numel();
  if (n == 0) return out;
  visit_float(x.dtype(), op, [&]<typename T>() {
    Where w = where(x);
    const T* px = ptr<const T>(x);
    const T* pg = g.defined() ? ptr<const T>(g) : nullptr;
    T* po = ptr<T>(out);
    constexpr int V = Pack<T>::N;
    // One pointer list for the alignment test: an absent g stands in as the output.
    const bool vec = n % V == 0 && plan::vector_head(n, sizeof(T), {px, pg ? pg : po, po}) == 0;
    if (vec)
      launch_kernel(gelu_kernel<T, true, Fn>, grid_for(n / V, kThreads, w.device), kThreads, 0, w.stream, px, pg, po, n, fn);
    else
      launch_kernel(gelu_kernel<T, false, Fn>, grid_for(n, kThreads, w.device), kThreads, 0, w.stream, px, pg, po, n, fn);
    KEEL_CHECK_LAUNCH();
  });
  return out;
}
}  // namespace

// x (N) -> (N)
Tensor gelu_forward(const Tensor& x) { return run(x, Tensor(), "gelu", GeluFn{}); }

// grad, x (N) -> dx (N)
Tensor gelu_backward(const Tensor& grad, const Tensor& x) { return run(x, grad, "gelu backward", GeluGradFn{}); }

}  // namespace keel::cuda
