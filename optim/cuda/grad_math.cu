// Gradient passes for clipping and loss scaling: a deterministic f64 sum of squares (fixed
// grid, per-block partials, one-block final pass; no atomics, so no run-to-run jitter in the
// clip coefficient), the same over many tensors in a few launches, and an in-place scale.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <string>
#include <type_traits>
#include <vector>

#include "core/cuda/check.h"
#include "core/cuda/convert.cuh"
#include "core/cuda/launch.cuh"
#include "core/cuda/runtime.h"
#include "core/factory.h"
#include "optim/cuda/grad_math.h"
#include "optim/cuda/multi_tensor.cuh"

namespace keel::optim::cuda {

namespace {
using ::keel::cuda::from_f32;
using ::keel::cuda::to_f32;

constexpr int kThreads = 256;
constexpr int kMaxBlocks = 512;

// Blocks of the partial sums: enough for every thread to have an element, at most kMaxBlocks.
// A function of n only, so the summation order (and the result) depends on n only.
int blocks_for_sum(int64_t n) { return static_cast<int>(std::min<int64_t>(kMaxBlocks, (n + kThreads - 1) / kThreads)); }

__device__ double load_f64(double x) { return x; }
template <typename T> __device__ double load_f64(T x) { return static_cast<double>(to_f32(x)); }


// Tree sum of one value per thread within a block (blockDim.x == kThreads).
__device__ double block_sum(double x) {
  KEEL_SHARED(double[kThreads], buf);
  buf[threadIdx.x] = x;
  __syncthreads();
  for (unsigned s = kThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) buf[threadIdx.x] += buf[threadIdx.x + s];
    __syncthreads();
  }
  return buf[0];
}

// t (N) -> this thread's share of block `block` of `blocks` (blockDim.x == kThreads). The one
// place that fixes which elements a thread adds, and in which order, for both sums below.
template <typename T>
__device__ double sumsq_thread(const T* __restrict__ t, int64_t n, int64_t block, int64_t blocks) {
  double s = 0;
  for (int64_t i = block * kThreads + threadIdx.x; i < n; i += blocks * kThreads) {
    double x = load_f64(t[i]);
    s += x * x;
  }
  return s;
}

// partial (P) -> the sum of partial[0, P) by one block (blockDim.x == kThreads).
__device__ double sum_partials(const double* __restrict__ partial, int p) {
  double s = 0;
  for (int i = threadIdx.x; i < p; i += kThreads) s += partial[i];
  return block_sum(s);
}

// t (N) -> partial[blockIdx.x]
template <typename T>
__global__ void sumsq_partial(const T* __restrict__ t, int64_t n, double* __restrict__ partial) {
  double b = block_sum(sumsq_thread(t, n, blockIdx.x, gridDim.x));
  if (threadIdx.x == 0) partial[blockIdx.x] = b;
}

// partial (P) -> out[0], one block.
__global__ void sum_final(const double* __restrict__ partial, int p, double* __restrict__ out) {
  double b = sum_partials(partial, p);
  if (threadIdx.x == 0) out[0] = b;
}

// Many tensors in one launch (optim/cuda/multi_tensor.cuh): tensor j's blocks are
// blocks_for_sum(n[j]) of them, and each of its blocks and threads adds exactly the elements, in
// exactly the order, that sum_of_squares' own launch for it would.
enum class Kind : int { f32, f64, bf16, f16 };
struct Table {
  const void* data[kTableSize];
  int64_t n[kTableSize];
  Kind kind[kTableSize];
  int first_block[kTableSize + 1];
  int count;
};

// table's tensors -> partial[b] for each block b of the launch
__global__ void sumsq_partial_multi(Table table, double* __restrict__ partial) {
  const int j = tensor_of_block(table.first_block, blockIdx.x);
  const int64_t block = blockIdx.x - table.first_block[j], blocks = table.first_block[j + 1] - table.first_block[j];
  const int64_t n = table.n[j];
  double s = 0;
  switch (table.kind[j]) {
    case Kind::f32: s = sumsq_thread(static_cast<const float*>(table.data[j]), n, block, blocks); break;
    case Kind::f64: s = sumsq_thread(static_cast<const double*>(table.data[j]), n, block, blocks); break;
    case Kind::bf16: s = sumsq_thread(static_cast<const __nv_bfloat16*>(table.data[j]), n, block, blocks); break;
    case Kind::f16: s = sumsq_thread(static_cast<const __half*>(table.data[j]), n, block, blocks); break;
  }
  double b = block_sum(s);
  if (threadIdx.x == 0) partial[blockIdx.x] = b;
}

// partial (the launch's blocks) -> sums[j] for each tensor j of the table, one block per tensor.
__global__ void sum_final_multi(Table table, const double* __restrict__ partial, double* __restrict__ sums) {
  const int j = blockIdx.x, lo = table.first_block[j];
  double b = sum_partials(partial + lo, table.first_block[j + 1] - lo);
  if (threadIdx.x == 0) sums[j] = b;
}

// sums (K) -> out[0] = ((0 + sums[0]) + sums[1]) + ...: the host's loop over the tensors, one thread.
__global__ void sum_in_order(const double* __restrict__ sums, int k, double* __restrict__ out) {
  double total = 0;
  for (int j = 0; j < k; ++j) total += sums[j];
  out[0] = total;
}

Kind kind_of(DType t) {
  switch (t) {
    case DType::f32: return Kind::f32;
    case DType::f64: return Kind::f64;
    case DType::bf16: return Kind::bf16;
    case DType::f16: return Kind::f16;
    default: break;
  }
  throw DTypeError("sum_of_squares_into", std::string("gradients must be f32, f64, bf16 or f16, got ") + dtype_name(t));
}

// ts[lo, lo + count) -> their table, tensor j given blocks(n_j) blocks.
Table table_of(const std::vector<Tensor>& ts, int lo, int count, int (*blocks)(int64_t)) {
  Table table{};  // zeros past `count`: no uninitialised bytes go to the device
  table.count = count;
  table.first_block[0] = 0;
  for (int j = 0; j < count; ++j) {
    const Tensor& t = ts[static_cast<size_t>(lo + j)];
    table.data[j] = t.raw_data();
    table.n[j] = t.numel();
    table.kind[j] = kind_of(t.dtype());
    table.first_block[j + 1] = table.first_block[j] + blocks(t.numel());
  }
  return table;
}

// t (N) <- t * k, grid-stride over `blocks` blocks from `block`: scale_kernel's arithmetic.
template <typename T, typename C>
__device__ void scale_range(T* __restrict__ t, int64_t n, C k, int64_t block, int64_t blocks) {
  for (int64_t i = block * kThreads + threadIdx.x; i < n; i += blocks * kThreads) {
    if constexpr (std::is_same_v<T, double>) t[i] = t[i] * k;
    else t[i] = from_f32<T>(to_f32(t[i]) * k);
  }
}

// table's tensors (each N_j) <- t * s: f32 s32 for f32/bf16/f16 tensors, f64 s64 for f64 ones.
// The table's pointers are const for the sums; the tensors scaled here are the caller's to write.
// With `inverse_of` (a device f64), s64 = 1 / inverse_of[0] and s32 its f32 rounding: what the
// host passes for a divisor it holds (the loss scaler's scale, when it lives on the device).
__global__ void scale_multi(Table table, float s32, double s64, const double* inverse_of) {
  if (inverse_of) {
    s64 = 1.0 / inverse_of[0];
    s32 = static_cast<float>(s64);
  }
  const int j = tensor_of_block(table.first_block, blockIdx.x);
  const int64_t block = blockIdx.x - table.first_block[j], blocks = table.first_block[j + 1] - table.first_block[j];
  const int64_t n = table.n[j];
  void* d = const_cast<void*>(table.data[j]);
  switch (table.kind[j]) {
    case Kind::f32: scale_range(static_cast<float*>(d), n, s32, block, blocks); break;
    case Kind::f64: scale_range(static_cast<double*>(d), n, s64, block, blocks); break;
    case Kind::bf16: scale_range(static_cast<__nv_bfloat16*>(d), n, s32, block, blocks); break;
    case Kind::f16: scale_range(static_cast<__half*>(d), n, s32, block, blocks); break;
  }
}

template <typename T, typename C>
__global__ void scale_kernel(T* __restrict__ t, int64_t n, C k) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    if constexpr (std::is_same_v<T, double>) t[i] = t[i] * k;
    else t[i] = from_f32<T>(to_f32(t[i]) * k);
  }
}

void check(const Tensor& t, const char* op) {
  if (!t.device().is_cuda() || !t.is_contiguous())
    throw DeviceError(op, "expected a contiguous CUDA tensor, got one on " + t.device().str());
}
}  // namespace

double sum_of_squares(const Tensor& t) {
  check(t, "sum_of_squares");
  const int64_t n = t.numel();
  if (n == 0) return 0.0;
  const int dev = t.device().index;
  KEEL_CHECK_CUDA(cudaSetDevice(dev));
  cudaStream_t stream = ::keel::cuda::detail::stream(dev);
  const int blocks = blocks_for_sum(n);
  Tensor partial = empty({blocks + 1}, {DType::f64, t.device()});  // the partials, then the total
  double* p = static_cast<double*>(partial.raw_data());
  ::keel::cuda::visit_cuda_float</*AllowF64=*/true>(t.dtype(), "sum_of_squares", [&]<typename T>() {
    keel::cuda::launch_kernel(sumsq_partial<T>, blocks, kThreads, 0, stream, static_cast<const T*>(t.raw_data()), n, p);
    KEEL_CHECK_LAUNCH();
  });
  keel::cuda::launch_kernel(sum_final, 1, kThreads, 0, stream, p, blocks, p + blocks);
  KEEL_CHECK_LAUNCH();
  double out = 0;
  ::keel::cuda::memcpy_device_to_host(&out, p + blocks, sizeof(double), dev);
  return out;
}

void sum_of_squares_into(const std::vector<Tensor>& ts, Tensor& out, int64_t slot) {
  check(out, "sum_of_squares_into");
  for (const Tensor& t : ts) {
    check(t, "sum_of_squares_into");
    if (t.device() != out.device())
      throw DeviceError("sum_of_squares_into", "a tensor on " + t.device().str() + " beside an output on " + out.device().str());
  }
  const int dev = out.device().index;
  KEEL_CHECK_CUDA(cudaSetDevice(dev));
  cudaStream_t stream = ::keel::cuda::detail::stream(dev);
  const int k = static_cast<int>(ts.size());
  int64_t blocks = 0;
  for (const Tensor& t : ts) blocks += blocks_for_sum(t.numel());
  // The partials of every block, then each tensor's sum.
  Tensor scratch = empty({std::max<int64_t>(1, blocks + k)}, {DType::f64, out.device()});
  double* partial = static_cast<double*>(scratch.raw_data());
  double* sums = partial + blocks;
  int block0 = 0;
  for_each_table(k, [&](int lo, int count) {
    const Table table = table_of(ts, lo, count, blocks_for_sum);
    keel::cuda::launch_kernel(sumsq_partial_multi, table.first_block[table.count], kThreads, 0, stream, table,
                              partial + block0);
    KEEL_CHECK_LAUNCH();
    keel::cuda::launch_kernel(sum_final_multi, table.count, kThreads, 0, stream, table, partial + block0, sums + lo);
    KEEL_CHECK_LAUNCH();
    block0 += table.first_block[table.count];
  });
  keel::cuda::launch_kernel(sum_in_order, 1, 1, 0, stream, sums, k, static_cast<double*>(out.raw_data()) + slot);
  KEEL_CHECK_LAUNCH();
}

void scale_inplace(Tensor& t, double s) {
  check(t, "scale_inplace");
  const int64_t n = t.numel();
  if (n == 0) return;
  const int dev = t.device().index;
  KEEL_CHECK_CUDA(cudaSetDevice(dev));
  cudaStream_t stream = ::keel::cuda::detail::stream(dev);
  int64_t b = (n + kThreads - 1) / kThreads;
  int blocks = static_cast<int>(b < 65535 ? b : 65535);
  ::keel::cuda::visit_cuda_float</*AllowF64=*/true>(t.dtype(), "scale_inplace", [&]<typename T>() {
    using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
    keel::cuda::launch_kernel(scale_kernel<T, C>, blocks, kThreads, 0, stream, static_cast<T*>(t.raw_data()), n, static_cast<C>(s));
    KEEL_CHECK_LAUNCH();
  });
}

namespace {
void scale_multi_launches(const std::vector<Tensor>& ts, double s, const double* inverse_of) {
  if (ts.empty()) return;
  const Device device = ts.front().device();
  for (const Tensor& t : ts) {
    check(t, "scale_all_");
    if (t.device() != device) throw DeviceError("scale_all_", "tensors on " + device.str() + " and " + t.device().str());
  }
  KEEL_CHECK_CUDA(cudaSetDevice(device.index));
  cudaStream_t stream = ::keel::cuda::detail::stream(device.index);
  for_each_table(static_cast<int>(ts.size()), [&](int lo, int count) {
    const Table table = table_of(ts, lo, count, blocks_for_sum);
    if (table.first_block[count] == 0) return;  // only empty tensors
    keel::cuda::launch_kernel(scale_multi, table.first_block[count], kThreads, 0, stream, table, static_cast<float>(s), s,
                              inverse_of);
    KEEL_CHECK_LAUNCH();
  });
}
}  // namespace

void scale_inplace_multi(const std::vector<Tensor>& ts, double s) { scale_multi_launches(ts, s, nullptr); }

void unscale_inplace_multi(const std::vector<Tensor>& ts, const Tensor& divisor) {
  if (ts.empty()) return;
  if (divisor.dtype() != DType::f64 || divisor.numel() < 1 || divisor.device() != ts.front().device())
    throw DeviceError("unscale", "the divisor must be an f64 tensor on the gradients' GPU");
  scale_multi_launches(ts, 1.0, static_cast<const double*>(divisor.raw_data()));
}

}  // namespace keel::optim::cuda
