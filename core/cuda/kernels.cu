// Core's own device kernels: strided copy with dtype conversion, fill, and += for gradient
// accumulation. Grid-stride loops over elements; one thread per element per iteration.
// A copy takes the cheapest path its operands allow: bytes (cudaMemcpyAsync) when the dtype and
// the layout match, a flat conversion when both are contiguous, and only otherwise the strided
// kernel, which pays a div/mod per dimension per element to find its offsets.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "core/cuda/check.h"
#include "core/cuda/kernels.h"
#include "core/cuda/launch.cuh"

namespace keel::cuda {

namespace {
constexpr int kMaxDims = 8;
constexpr int kThreads = 256;

// Shape and strides travel to the kernel by value (kernel parameters live in constant memory).
struct Layout {
  int ndim;
  int64_t shape[kMaxDims];
  int64_t strides[kMaxDims];
  int64_t offset;
};

Layout layout_of(const Tensor& t, const char* op) {
  if (t.dim() > kMaxDims)
    throw ShapeError(op, "CUDA copies support up to 8 dimensions, got shape " + shape_str(t.shape()));
  Layout l{};
  l.ndim = static_cast<int>(t.dim());
  for (int i = 0; i < l.ndim; ++i) l.shape[i] = t.shape()[i], l.strides[i] = t.strides()[i];
  l.offset = t.offset();
  return l;
}

// A contiguous tensor of n elements as a one-dimensional layout: one div/mod per element instead
// of one per dimension.
Layout flat_layout(int64_t n, int64_t offset) {
  Layout l{};
  l.ndim = 1;
  l.shape[0] = n, l.strides[0] = 1;
  l.offset = offset;
  return l;
}

// linear index (row-major over l.shape) -> the element's offset in storage.
__device__ int64_t element_offset(const Layout& l, int64_t linear) {
  int64_t off = l.offset;
  for (int d = l.ndim - 1; d >= 0; --d) {
    off += (linear % l.shape[d]) * l.strides[d];
    linear /= l.shape[d];
  }
  return off;
}

// Conversions with a floating side go through double, which holds every f32, f64 and i32
// value; half types convert only to and from float.
template <typename T> __host__ __device__ double to_double(T v) { return static_cast<double>(v); }
template <> __host__ __device__ double to_double(__nv_bfloat16 v) { return __bfloat162float(v); }
template <> __host__ __device__ double to_double(__half v) { return __half2float(v); }
template <typename T> __host__ __device__ T from_double(double v) { return static_cast<T>(v); }
template <> __host__ __device__ __nv_bfloat16 from_double(double v) { return __float2bfloat16(static_cast<float>(v)); }
template <> __host__ __device__ __half from_double(double v) { return __float2half(static_cast<float>(v)); }

// One element S -> D, as the CPU's copy (core/copy.cpp) converts it. Integer to integer is
// direct: double holds integers only up to 2^53, so an i64 id or offset above that would
// change, and narrowing i64 -> i32 keeps the low 32 bits (C++20's rule, PyTorch's result)
// instead of a float-to-int conversion of an out-of-range value.
template <typename D, typename S>
__host__ __device__ D convert(S v) {
  if constexpr (std::is_same_v<D, S>)
    return v;
  else if constexpr (std::is_integral_v<D> && std::is_integral_v<S>)
    return static_cast<D>(v);
  else
    return from_double<D>(to_double(v));
}

// dst (n) <- src (n), each laid out by its Layout (any strides, up to 8 dims), converted.
template <typename D, typename S>
__global__ void copy_kernel(D* dst, Layout dl, const S* src, Layout sl, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[element_offset(dl, i)] = convert<D>(src[element_offset(sl, i)]);
}

// dst (n) <- src (n), both contiguous (pointers at their first element), converted.
template <typename D, typename S>
__global__ void convert_kernel(D* __restrict__ dst, const S* __restrict__ src, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = convert<D>(src[i]);
}

// dst (n) += src (n), contiguous; S = T, or a 16-bit source widened into an f32 dst.
template <typename T, typename S>
__global__ void add_inplace_kernel(T* dst, const S* src, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = from_double<T>(to_double(dst[i]) + to_double(src[i]));
}

// dst (n) += src (n), each laid out by its Layout (a window of a larger gradient, say), S = T.
template <typename T>
__global__ void add_strided_kernel(T* dst, Layout dl, const T* src, Layout sl, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    T& d = dst[element_offset(dl, i)];
    d = from_double<T>(to_double(d) + to_double(src[element_offset(sl, i)]));
  }
}

// dst (n) <- value, contiguous.
template <typename T>
__global__ void fill_kernel(T* dst, T value, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = value;
}

int blocks_for(int64_t n) {
  int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<int>(b < 65535 ? b : 65535);
}

// keel dtype -> the CUDA type with the same bits.
template <typename F>
void visit_cuda_dtype(DType t, F&& f) {
  switch (t) {
    case DType::f32: return f.template operator()<float>();
    case DType::f64: return f.template operator()<double>();
    case DType::bf16: return f.template operator()<__nv_bfloat16>();
    case DType::f16: return f.template operator()<__half>();
    case DType::i32: return f.template operator()<int32_t>();
    case DType::i64: return f.template operator()<int64_t>();
  }
}

void check_same_device(const Tensor& a, const Tensor& b, const char* op) {
  if (a.device() != b.device() || !a.device().is_cuda())
    throw DeviceError(op, "expected two tensors on one CUDA device, got " + a.device().str() + " and " +
                              b.device().str());
}
}  // namespace

// dst (any) <- src (dst's shape), any strides and dtypes, on one device.
void copy_strided(Tensor& dst, const Tensor& src) {
  check_same_device(dst, src, "copy_strided");
  int64_t n = dst.numel();
  if (n == 0) return;
  const bool packed = dst.is_contiguous() && src.is_contiguous();
  // A contiguous side needs no per-dimension index arithmetic in the strided kernel either.
  Layout dl = dst.is_contiguous() ? flat_layout(n, dst.offset()) : layout_of(dst, "copy_strided");
  Layout sl = src.is_contiguous() ? flat_layout(n, src.offset()) : layout_of(src, "copy_strided");
  int dev = dst.device().index;
  KEEL_CHECK_CUDA(cudaSetDevice(dev));
  cudaStream_t s = detail::stream(dev);
  if (packed && dst.dtype() == src.dtype()) {  // the same bytes in the same order
    if (dst.raw_data() == src.raw_data()) return;  // a tensor onto itself (memcpy forbids the overlap)
    detail::count_copy();
    KEEL_CHECK_CUDA(cudaMemcpyAsync(dst.raw_data(), src.raw_data(), static_cast<size_t>(n) * dtype_size(dst.dtype()),
                                    cudaMemcpyDeviceToDevice, s));
    return;
  }
  visit_cuda_dtype(dst.dtype(), [&]<typename D>() {
    visit_cuda_dtype(src.dtype(), [&]<typename S>() {
      if (packed) {
        launch_kernel(convert_kernel<D, S>, blocks_for(n), kThreads, 0, s, static_cast<D*>(dst.raw_data()),
                      static_cast<const S*>(src.raw_data()), n);
      } else {
        auto* d = static_cast<D*>(dst.storage()->data());
        auto* p = static_cast<const S*>(src.storage()->data());
        launch_kernel(copy_kernel<D, S>, blocks_for(n), kThreads, 0, s, d, dl, p, sl, n);
      }
      KEEL_CHECK_LAUNCH();
    });
  });
}

void add_inplace(Tensor& dst, const Tensor& src) {
  check_same_device(dst, src, "add_inplace");
  const bool widening = dst.dtype() == DType::f32 && (src.dtype() == DType::bf16 || src.dtype() == DType::f16);
  if ((dst.dtype() != src.dtype() && !widening) || dst.shape() != src.shape() ||
      (widening && !(dst.is_contiguous() && src.is_contiguous())))
    throw ValueError("add_inplace",
                     "needs two tensors of one shape and dtype (or contiguous bf16/f16 into contiguous f32)");
  int64_t n = dst.numel();
  if (n == 0) return;
  int dev = dst.device().index;
  KEEL_CHECK_CUDA(cudaSetDevice(dev));
  if (!dst.is_contiguous() || !src.is_contiguous()) {  // a window of a larger tensor: one strided pass
    const Layout dl = dst.is_contiguous() ? flat_layout(n, dst.offset()) : layout_of(dst, "add_inplace");
    const Layout sl = src.is_contiguous() ? flat_layout(n, src.offset()) : layout_of(src, "add_inplace");
    visit_cuda_dtype(dst.dtype(), [&]<typename T>() {
      launch_kernel(add_strided_kernel<T>, blocks_for(n), kThreads, 0, detail::stream(dev),
                    static_cast<T*>(dst.storage()->data()), dl, static_cast<const T*>(src.storage()->data()), sl, n);
      KEEL_CHECK_LAUNCH();
    });
    return;
  }
  auto launch = [&]<typename T, typename S>() {
    launch_kernel(add_inplace_kernel<T, S>, blocks_for(n), kThreads, 0, detail::stream(dev),
                  static_cast<T*>(dst.raw_data()), static_cast<const S*>(src.raw_data()), n);
    KEEL_CHECK_LAUNCH();
  };
  if (src.dtype() == DType::bf16 && widening) return launch.template operator()<float, __nv_bfloat16>();
  if (src.dtype() == DType::f16 && widening) return launch.template operator()<float, __half>();
  visit_cuda_dtype(dst.dtype(), [&]<typename T>() { launch.template operator()<T, T>(); });
}

void fill(Tensor& t, double value) {
  int64_t n = t.numel();
  if (n == 0) return;
  int dev = t.device().index;
  KEEL_CHECK_CUDA(cudaSetDevice(dev));
  visit_cuda_dtype(t.dtype(), [&]<typename T>() {
    launch_kernel(fill_kernel<T>, blocks_for(n), kThreads, 0, detail::stream(dev), static_cast<T*>(t.raw_data()),
                                                                        from_double<T>(value), n);
    KEEL_CHECK_LAUNCH();
  });
}

}  // namespace keel::cuda
