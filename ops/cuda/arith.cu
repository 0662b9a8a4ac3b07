// Elementwise arithmetic on the device: binary ops with broadcasting, unary ops, scalar ops.
//
// Two kernel shapes:
//  - contiguous operands of one shape: a flat grid-stride loop with 16-byte packs (8 x bf16 or
//    4 x f32 per load), a scalar head up to the first 16-byte boundary and a scalar tail, so odd
//    sizes and offset views work;
//  - anything else (broadcasting, strided views): one thread per output element, the operand
//    offsets computed from the output index with the dims collapsed first (plan::collapse), in
//    32-bit arithmetic when every offset fits (64-bit division is slow on a GPU).
// The operation is a run-time switch inside the kernel: it is uniform over the grid, so it
// costs a predictable branch, not divergence, and keeps one instantiation per dtype.
#include "ops/cuda/common.cuh"
#include "ops/cuda/arith.h"

namespace keel::cuda {

namespace {
using namespace dev;

struct BinaryFn {
  BinaryOp op;
  __device__ __forceinline__ float operator()(float x, float y) const {
    switch (op) {
      case BinaryOp::add: return x + y;
      case BinaryOp::sub: return x - y;
      case BinaryOp::mul: return x * y;
      case BinaryOp::div: return x / y;
    }
    return 0.0f;
  }
};

struct UnaryFn {
  UnaryOp op;
  float c;  // the scalar of add_scalar / mul_scalar
  __device__ __forceinline__ float operator()(float v) const {
    switch (op) {
      case UnaryOp::neg: return -v;
      case UnaryOp::exp: return expf(v);
      case UnaryOp::log: return logf(v);
      case UnaryOp::tanh: return tanhf(v);
      case UnaryOp::relu: return v > 0.0f ? v : 0.0f;
      case UnaryOp::square: return v * v;
      case UnaryOp::add_scalar: return v + c;
      case UnaryOp::mul_scalar: return v * c;
    }
    return 0.0f;
  }
};

// relu backward: g * 1[x > 0], the CPU's mul(g, mask) including the sign of a zero.
struct ReluGradFn {
  __device__ __forceinline__ float operator()(float g, float x) const { return g * (x > 0.0f ? 1.0f : 0.0f); }
};

// x, y (N) contiguous; head = scalar elements before x's first 16-byte boundary (same for y).
template <typename T, typename Fn>
__global__ void map1_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t n, int64_t head, Fn fn) {
  constexpr int V = Pack<T>::N;
  const int64_t tid = blockIdx.x * int64_t(blockDim.x) + threadIdx.x, nth = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = tid; i < head; i += nth) y[i] = from_f32<T>(fn(to_f32(x[i])));
  const int64_t nvec = (n - head) / V;
  for (int64_t k = tid; k < nvec; k += nth) {
    const int64_t i = head + k * V;
    Pack<T> px = load_pack(x + i), py;
#pragma unroll
    for (int j = 0; j < V; ++j) py.v[j] = from_f32<T>(fn(to_f32(px.v[j])));
    store_pack(y + i, py);
  }
  for (int64_t i = head + nvec * V + tid; i < n; i += nth) y[i] = from_f32<T>(fn(to_f32(x[i])));
}

// a, b, out (N) contiguous, one shape.
template <typename T, typename Fn>
__global__ void map2_kernel(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ out, int64_t n,
                            int64_t head, Fn fn) {
  constexpr int V = Pack<T>::N;
  const int64_t tid = blockIdx.x * int64_t(blockDim.x) + threadIdx.x, nth = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = tid; i < head; i += nth) out[i] = from_f32<T>(fn(to_f32(a[i]), to_f32(b[i])));
  const int64_t nvec = (n - head) / V;
  for (int64_t k = tid; k < nvec; k += nth) {
    const int64_t i = head + k * V;
    Pack<T> pa = load_pack(a + i), pb = load_pack(b + i), po;
#pragma unroll
    for (int j = 0; j < V; ++j) po.v[j] = from_f32<T>(fn(to_f32(pa.v[j]), to_f32(pb.v[j])));
    store_pack(out + i, po);
  }
  for (int64_t i = head + nvec * V + tid; i < n; i += nth) out[i] = from_f32<T>(fn(to_f32(a[i]), to_f32(b[i])));
}

// The collapsed broadcast of out (S) to a and b: per-dim sizes and operand strides.
struct BinaryLayout {
  int ndim;
  int64_t shape[kMaxDims];
  int64_t sa[kMaxDims], sb[kMaxDims];
};

// out (S) contiguous, element i; a and b at the offsets of i's multi-index (stride 0 where
// broadcast). Idx is uint32_t when all offsets fit, else int64_t.
template <typename T, typename Idx>
__global__ void binary_strided_kernel(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ out,
                                      BinaryLayout l, Idx n, BinaryFn fn) {
  const Idx nth = Idx(gridDim.x) * blockDim.x;
  for (Idx i = Idx(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += nth) {
    Idx rem = i, oa = 0, ob = 0;
#pragma unroll
    for (int d = kMaxDims - 1; d >= 0; --d) {
      if (d >= l.ndim) continue;
      const Idx size = static_cast<Idx>(l.shape[d]);
      const Idx q = rem / size, r = rem - q * size;
      oa += r * static_cast<Idx>(l.sa[d]);
      ob += r * static_cast<Idx>(l.sb[d]);
      rem = q;
    }
    out[i] = from_f32<T>(fn(to_f32(a[oa]), to_f32(b[ob])));
  }
}

// Largest offset an operand reaches: sum over dims of (size - 1) * stride (strides >= 0).
int64_t max_offset(const std::vector<int64_t>& shape, const std::vector<int64_t>& strides) {
  int64_t m = 0;
  for (size_t d = 0; d < shape.size(); ++d) m += (shape[d] - 1) * strides[d];
  return m;
}

template <typename T, typename Fn>
void launch_map1(const Tensor& x, Tensor& y, Fn fn) {
  const int64_t n = y.numel();
  if (n == 0) return;
  Where w = where(y);
  const T* px = ptr<const T>(x);
  T* py = ptr<T>(y);
  int64_t head = plan::vector_head(n, sizeof(T), {px, py});
  int blocks = grid_for((n - head) / Pack<T>::N + 1, kThreads, w.device);
  launch_kernel(map1_kernel<T, Fn>, blocks, kThreads, 0, w.stream, px, py, n, head, fn);
  KEEL_CHECK_LAUNCH();
}

template <typename T, typename Fn>
void launch_map2(const Tensor& a, const Tensor& b, Tensor& out, Fn fn) {
  const int64_t n = out.numel();
  if (n == 0) return;
  Where w = where(out);
  const T *pa = ptr<const T>(a), *pb = ptr<const T>(b);
  T* po = ptr<T>(out);
  int64_t head = plan::vector_head(n, sizeof(T), {pa, pb, po});
  int blocks = grid_for((n - head) / Pack<T>::N + 1, kThreads, w.device);
  launch_kernel(map2_kernel<T, Fn>, blocks, kThreads, 0, w.stream, pa, pb, po, n, head, fn);
  KEEL_CHECK_LAUNCH();
}
}  // namespace

// a, b broadcastable to out (S); out contiguous (S).
void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  require_device(out, "binary");
  const int64_t n = out.numel();
  if (n == 0) return;
  visit_float(out.dtype(), "binary", [&]<typename T>() {
    const BinaryFn fn{op};
    if (a.shape() == out.shape() && b.shape() == out.shape() && a.is_contiguous() && b.is_contiguous())
      return launch_map2<T>(a, b, out, fn);
    plan::Strided s = plan::collapse(out.shape(), {plan::broadcast_strides(a.shape(), a.strides(), out.shape()),
                                                   plan::broadcast_strides(b.shape(), b.strides(), out.shape())});
    if (s.shape.size() > size_t(kMaxDims))
      throw ShapeError("binary", "CUDA elementwise ops support up to 8 non-mergeable dims, got output " +
                                     shape_str(out.shape()),
                       "make the operands contiguous first");
    BinaryLayout l{};
    l.ndim = static_cast<int>(s.shape.size());
    bool negative = false;
    for (int d = 0; d < l.ndim; ++d) {
      l.shape[d] = s.shape[d], l.sa[d] = s.strides[0][d], l.sb[d] = s.strides[1][d];
      negative = negative || l.sa[d] < 0 || l.sb[d] < 0;
    }
    Where w = where(out);
    const int blocks = grid_for(n, kThreads, w.device);
    const T *pa = ptr<const T>(a), *pb = ptr<const T>(b);
    T* po = ptr<T>(out);
    constexpr int64_t k32 = int64_t(1) << 31;  // keeps i + grid stride below 2^32 too
    if (!negative && n < k32 && max_offset(s.shape, s.strides[0]) < k32 && max_offset(s.shape, s.strides[1]) < k32)
      launch_kernel(binary_strided_kernel<T, uint32_t>, blocks, kThreads, 0, w.stream, pa, pb, po, l, uint32_t(n), fn);
    else
      launch_kernel(binary_strided_kernel<T, int64_t>, blocks, kThreads, 0, w.stream, pa, pb, po, l, n, fn);
    KEEL_CHECK_LAUNCH();
  });
}

// x (S) any strides -> out (S) contiguous.
void unary(UnaryOp op, const Tensor& x, Tensor& out, double s) {
  require_device(x, "unary");
  Tensor xc = x.is_contiguous() ? x : x.detach().contiguous();
  visit_float(out.dtype(), "unary", [&]<typename T>() {
    launch_map1<T>(xc, out, UnaryFn{op, static_cast<float>(s)});
  });
}

// g, x (S) -> (S)
Tensor relu_backward(const Tensor& g, const Tensor& x) {
  require_device(x, "relu backward");
  Tensor gc = g.detach().contiguous(), xc = x.detach().contiguous();
  Tensor out = empty(x.shape(), {g.dtype(), g.device()});
  visit_float(out.dtype(), "relu backward", [&]<typename T>() { launch_map2<T>(gc, xc, out, ReluGradFn{}); });
  return out;
}

}  // namespace keel::cuda
