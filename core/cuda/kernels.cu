// Core's own device kernels: strided copy with dtype conversion, fill, and += for gradient
// accumulation. Grid-stride loops over elements; one thread per element per iteration.
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

__device__ int64_t element_offset(const Layout& l, int64_t linear) {
  int64_t off = l.offset;
  for (int d = l.ndim - 1; d >= 0; --d) {
    off += (linear % l.shape[d]) * l.strides[d];
    linear /= l.shape[d];
  }
  return off;
}

// Every conversion goes through float or double: half types only convert to and from float.
template <typename T> __host__ __device__ double to_double(T v) { return static_cast<double>(v); }
template <> __host__ __device__ double to_double(__nv_bfloat16 v) { return __bfloat162float(v); }
template <> __host__ __device__ double to_double(__half v) { return __half2float(v); }
template <typename T> __host__ __device__ T from_double(double v) { return static_cast<T>(v); }
template <> __host__ __device__ __nv_bfloat16 from_double(double v) { return __float2bfloat16(static_cast<float>(v)); }
template <> __host__ __device__ __half from_double(double v) { return __float2half(static_cast<float>(v)); }

template <typename D, typename S>
__global__ void copy_kernel(D* dst, Layout dl, const S* src, Layout sl, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[element_offset(dl, i)] = from_double<D>(to_double(src[element_offset(sl, i)]));
}

template <typename T>
__global__ void add_inplace_kernel(T* dst, const T* src, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = from_double<T>(to_double(dst[i]) + to_double(src[i]));
}

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

void copy_strided(Tensor& dst, const Tensor& src) {
  check_same_device(dst, src, "copy_strided");
  int64_t n = dst.numel();
  if (n == 0) return;
  Layout dl = layout_of(dst, "copy_strided"), sl = layout_of(src, "copy_strided");
  int dev = dst.device().index;
  KEEL_CHECK_CUDA(cudaSetDevice(dev));
  cudaStream_t s = detail::stream(dev);
  visit_cuda_dtype(dst.dtype(), [&]<typename D>() {
    visit_cuda_dtype(src.dtype(), [&]<typename S>() {
      auto* d = static_cast<D*>(dst.storage()->data());
      auto* p = static_cast<const S*>(src.storage()->data());
      launch_kernel(copy_kernel<D, S>, blocks_for(n), kThreads, 0, s, d, dl, p, sl, n);
      KEEL_CHECK_LAUNCH();
    });
  });
}

void add_inplace(Tensor& dst, const Tensor& src) {
  check_same_device(dst, src, "add_inplace");
  if (dst.dtype() != src.dtype() || !dst.is_contiguous() || !src.is_contiguous() || dst.numel() != src.numel())
    throw ValueError("add_inplace", "needs two contiguous tensors of one dtype and size");
  int64_t n = dst.numel();
  if (n == 0) return;
  int dev = dst.device().index;
  KEEL_CHECK_CUDA(cudaSetDevice(dev));
  visit_cuda_dtype(dst.dtype(), [&]<typename T>() {
    launch_kernel(add_inplace_kernel<T>, blocks_for(n), kThreads, 0, detail::stream(dev),
        static_cast<T*>(dst.raw_data()), static_cast<const T*>(src.raw_data()), n);
    KEEL_CHECK_LAUNCH();
  });
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
