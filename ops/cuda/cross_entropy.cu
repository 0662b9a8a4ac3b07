// Cross-entropy fused with log-softmax on the device, for large vocabularies (V = 50257).
//
// Forward: a one-block kernel counts the rows whose target counts (the targets never travel to
// the host, so the loss costs no synchronisation). Then one block per row makes a pass over the
// V logits with online softmax (running max and rescaled sum in f32, 16-byte loads after a
// scalar head: rows of odd length start anywhere modulo 16) and writes only lse (N) and the
// row's loss; probabilities are never stored. A one-block kernel then adds the N row losses in a
// fixed order (deterministic) and divides by the count. A target outside [0, V) is reported
// through core/cuda/device_check.h (the host raises the CPU's IndexError at its next
// synchronisation) and its row counts as ignored, so no kernel reads outside the row.
// Backward: one block per row writes (softmax - onehot) * grad / count straight from the
// logits and lse, zero rows for ignored targets. grad stays on the device (no sync).
// The z-loss (ops/cross_entropy.h) costs neither kernel a pass: a row's loss gains z * lse^2
// where lse is known, and its gradient scales the softmax by 1 + 2 z lse. The statistics of log Z
// (lse) come from the one-block kernel that adds the row losses: it reads lse beside them (N
// values, against the N x V logits), which holds 0 in the rows that do not count, so that kernel
// needs no targets.
// The fused classifier: when the caller knows the gradient the loss will get (training: the
// loss scale / grad_accum), the forward's row blocks write that backward result too, in a second
// pass over a row they have just read: two blocks of 1024 threads per SM hold 264 rows on an
// H100, 27 MB at GPT-2's 50304 bf16 columns, inside its 50 MB L2, so the logits should come from
// DRAM once instead of twice (llm.c's fused classifier; how much of the second pass hits L2, with
// the gradient's writes passing through it too, only a GPU can say).
// The backward then only compares the gradient it gets with the promised one, on the device,
// and recomputes (the same kernel) where they differ.
// Rows may be padded (Vp >= V columns, a vocabulary padded so that the matmuls around the
// loss run on cuBLAS's aligned kernels): the forward reads only the V classes, the gradient is
// zero in the padding.
#include <algorithm>
#include <string>
#include <type_traits>
#include <vector>

#include "core/cuda/device_check.h"
#include "ops/cuda/common.cuh"
#include "ops/cuda/cross_entropy.h"

namespace keel::cuda {

namespace {
using namespace dev;

// targets (N) -> count [] = the rows whose target is in [0, V) and not ignore_index. One block
// of 1024 threads; integer adds, so the count is exact in any order.
template <typename I>
__global__ void __launch_bounds__(1024)
    ce_count_kernel(const I* __restrict__ targets, int64_t N, int64_t V, int64_t ignore_index,
                    int64_t* __restrict__ count) {
  KEEL_SHARED(unsigned long long, counted);
  if (threadIdx.x == 0) counted = 0;
  __syncthreads();
  unsigned long long mine = 0;
  for (int64_t r = threadIdx.x; r < N; r += blockDim.x) {
    const int64_t t = static_cast<int64_t>(targets[r]);
    mine += t != ignore_index && t >= 0 && t < V;
  }
  atomicAdd(&counted, mine);
  __syncthreads();
  if (threadIdx.x == 0) count[0] = static_cast<int64_t>(counted);
}

// The z-loss's factor of the softmax in a row's gradient: 1 + 2 z lse, or exactly 1 without a
// z-loss (not 1 + 0 * lse, NaN for an infinite lse; and expf(..) * 1 is expf(..), fused or not,
// so the gradient keeps its bits).
__device__ __forceinline__ float ce_soft(float z, float l) { return z != 0.0f ? fmaf(2.0f * z, l, 1.0f) : 1.0f; }

// The gradient of one row: (softmax * ce_soft(z, l) - onehot(t)) * scale over the V classes, 0 in
// the padding and in rows whose target does not count. One formula for the forward's fused pass
// and the backward, so both give the same bits. The factor is formed inside the element's
// expression, from z and l that the loop holds anyway: one more live register there made the
// fused forward spill (it runs at 32 registers, the most that keeps two 1024-thread blocks per SM).
template <typename T>
__device__ __forceinline__ void ce_grad_row(const T* __restrict__ row, T* __restrict__ out, int64_t V, int64_t Vp,
                                            int64_t head, int64_t t, bool counts, float l, float z, float scale) {
  if (!counts) {
    row_map<T>(row, nullptr, out, Vp, head, [](int64_t, float, float) { return 0.0f; });
    return;
  }
  row_map<T>(row, nullptr, out, Vp, head, [&](int64_t j, float v, float) {
    return j < V ? (expf(v - l) * ce_soft(z, l) - (j == t ? 1.0f : 0.0f)) * scale : 0.0f;
  });
}

// 1 / count (0 when no row counts) times the loss's gradient: the rows' gradient factor.
__device__ __forceinline__ float ce_scale(const int64_t* count, float grad) {
  return grad * (count[0] > 0 ? 1.0f / static_cast<float>(count[0]) : 0.0f);
}

// logits (N, Vp), targets (N), count [] -> lse (N) (0 for rows that do not count), row_loss (N) (0 for them; with a
// z-loss z, lse - logit[target] + z lse^2), over V classes; kGrad: and dlogits (N, Vp) for a loss
// gradient of `grad` (vec: logits and dlogits share their alignment modulo 16). A target outside
// [0, V) that is not ignore_index goes to `check` and its row_loss is 0.
template <typename T, typename I, bool kGrad>
__global__ void __launch_bounds__(1024)
    ce_forward_kernel(const T* __restrict__ logits, const I* __restrict__ targets, int64_t N, int64_t V, int64_t Vp,
                      int64_t ignore_index, float* __restrict__ lse, float* __restrict__ row_loss,
                      DeviceCheckSlot* check, const int64_t* __restrict__ count, float grad, float z, bool vec,
                      T* __restrict__ dlogits) {
  KEEL_SHARED(float[64], scratch);
  for (int64_t r = blockIdx.x; r < N; r += gridDim.x) {
    const T* row = logits + r * Vp;
    MaxSum ms{-INFINITY, 0.0f};
    row_fold<T>(row, nullptr, V, row_head(row, V), [&](int64_t, float v, float) { ms = push(ms, v); });
    ms = block_merge(ms, scratch);  // every thread gets the row's state
    const float l = ms.m + logf(ms.s);
    const int64_t t = static_cast<int64_t>(targets[r]);
    const bool bad = t != ignore_index && (t < 0 || t >= V);
    if (threadIdx.x == 0) {
      if (bad && atomicCAS(&check->code, int32_t(DeviceCheck::none), int32_t(DeviceCheck::class_target)) ==
                     int32_t(DeviceCheck::none))
        check->value = t, check->index = r, check->bound = V;
      const bool counts = t != ignore_index && !bad;
      lse[r] = counts ? l : 0.0f;  // no other row's is read: the backward writes those rows 0
      const float nll = counts ? l - to_f32(row[t]) : 0.0f;
      row_loss[r] = counts && z != 0.0f ? fmaf(z * l, l, nll) : nll;
    }
    if constexpr (kGrad)
      ce_grad_row(row, dlogits + r * Vp, V, Vp, vec ? row_head(row, Vp) : Vp, t, t != ignore_index && !bad, l,
                  z, ce_scale(count, grad));
  }
}

// The largest of every thread's x over the block, for every thread; `scratch` is 32 values of
// shared memory. Integers: the bits of non-negative floats, which order as the floats do, a NaN
// (its sign cleared) above +inf, so the max lets a NaN win (ops/nan_max.h's rule).
__device__ __forceinline__ unsigned block_max_bits(unsigned x, unsigned* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x = max(x, __shfl_xor_sync(0xffffffffu, x, o));
  __syncthreads();
  if (lane == 0) scratch[warp] = x;
  __syncthreads();
  x = lane < nwarps ? scratch[lane] : 0u;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x = max(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

// row_loss (N), count [] -> loss [] = sum / count (0 when count is 0), in f32 whatever the
// logits' dtype: a bf16/f16 loss would be quantized, and overflow under f16 loss scaling.
// log_z not null: lse (N), 0 in the rows that do not count (ce_forward_kernel) -> log_z (2) =
// [mean lse, max |lse|] over the rows that count (0, 0 when none; a NaN wins the max). One block
// of 1024 threads, a fixed order of adds.
__global__ void ce_mean_kernel(const float* __restrict__ row_loss, const float* __restrict__ lse, int64_t N,
                               const int64_t* __restrict__ count, float* __restrict__ loss,
                               float* __restrict__ log_z) {
  KEEL_SHARED(float[32], scratch);
  float s = 0.0f;
  for (int64_t r = threadIdx.x; r < N; r += blockDim.x) s += row_loss[r];
  s = block_sum(s, scratch);
  if (threadIdx.x == 0) loss[0] = count[0] > 0 ? s / static_cast<float>(count[0]) : 0.0f;
  if (!log_z) return;  // the same for every thread: the barriers below see the whole block or none of it
  float sum = 0.0f;
  unsigned top = 0u;
  for (int64_t r = threadIdx.x; r < N; r += blockDim.x) {
    const float l = lse[r];
    sum += l;
    top = max(top, __float_as_uint(fabsf(l)));
  }
  sum = block_sum(sum, scratch);
  KEEL_SHARED(unsigned[32], top_scratch);
  top = block_max_bits(top, top_scratch);
  if (threadIdx.x == 0) {
    log_z[0] = count[0] > 0 ? sum / static_cast<float>(count[0]) : 0.0f;
    log_z[1] = __uint_as_float(top);
  }
}

// logits, dlogits (N, Vp), targets (N), lse (N), grad [] f32 -> dlogits (columns >= V: 0); vec:
// logits and dlogits share their alignment modulo 16, so one head serves both. keep: dlogits
// already holds the result for a gradient of `expected` (the fused forward's); a block then
// writes nothing when grad is that.
template <typename T, typename I>
__global__ void __launch_bounds__(1024)
    ce_backward_kernel(const T* __restrict__ logits, const I* __restrict__ targets, const float* __restrict__ lse,
                       const float* __restrict__ grad, int64_t N, int64_t V, int64_t Vp, int64_t ignore_index,
                       const int64_t* __restrict__ count, bool vec, bool keep, float expected, float z,
                       T* __restrict__ dlogits) {
  if (keep && grad[0] == expected) return;
  const float scale = ce_scale(count, grad[0]);
  for (int64_t r = blockIdx.x; r < N; r += gridDim.x) {
    const T* row = logits + r * Vp;
    const int64_t t = static_cast<int64_t>(targets[r]);  // out of range: reported by the forward
    ce_grad_row(row, dlogits + r * Vp, V, Vp, vec ? row_head(row, Vp) : Vp, t,
                t != ignore_index && t >= 0 && t < V, lse[r], z, scale);
  }
}

// Threads and blocks of the row kernels: 1024 threads for a vocabulary-sized row, as many
// blocks as fit on the GPU at once (each then loops over rows), so the rows in flight stay in L2.
int ce_threads(int64_t Vp, size_t elem) { return row_threads(Vp, elem, 1024); }
int ce_blocks(int64_t N, int threads, int device) {
  return static_cast<int>(std::min<int64_t>(N, int64_t(sm_count(device)) * std::min(32, 2048 / threads)));
}
}  // namespace

// logits (N, Vp), targets (N) -> loss [] f32, lse (N) f32, count [] i64 (and dlogits (N, Vp) for a
// loss gradient of `grad`, log_z (2) f32, if asked); V classes
Tensor cross_entropy_forward(const Tensor& logits, const Tensor& targets, int64_t V, int64_t ignore_index, Tensor& lse,
                             Tensor& count, Tensor* dlogits, float grad, double z_loss, Tensor* log_z) {
  require_device(logits, "cross_entropy");
  const int64_t N = logits.size(0), Vp = logits.size(1);
  const Device dev = logits.device();
  lse = empty({N}, {DType::f32, dev});
  count = empty({}, {DType::i64, dev});
  // The loss is f32 for every storage type the CUDA kernels take (visit_float has no f64).
  Tensor loss = empty({}, {DType::f32, dev});
  Tensor row_loss = empty({N}, {DType::f32, dev});
  if (dlogits) *dlogits = empty({N, Vp}, {logits.dtype(), dev});
  if (log_z) *log_z = empty({2}, {DType::f32, dev});
  const float z = static_cast<float>(z_loss);
  visit_float(logits.dtype(), "cross_entropy", [&]<typename T>() {
    visit_index(targets.dtype(), "cross_entropy", [&]<typename I>() {
      Where w = where(logits);
      launch_kernel(ce_count_kernel<I>, 1, 1024, 0, w.stream, ptr<const I>(targets), N, V, ignore_index,
                    ptr<int64_t>(count));
      KEEL_CHECK_LAUNCH();
      if (N > 0) {
        const T* pl = ptr<const T>(logits);
        T* pd = dlogits ? ptr<T>(*dlogits) : nullptr;
        const bool vec = pd && (reinterpret_cast<uintptr_t>(pl) & 15u) == (reinterpret_cast<uintptr_t>(pd) & 15u);
        const int threads = ce_threads(Vp, sizeof(T));
        auto kernel = pd ? ce_forward_kernel<T, I, true> : ce_forward_kernel<T, I, false>;
        launch_kernel(kernel, ce_blocks(N, threads, w.device), threads, 0, w.stream, pl, ptr<const I>(targets), N, V,
                      Vp, ignore_index, ptr<float>(lse), ptr<float>(row_loss), device_check_slot(w.device),
                      ptr<const int64_t>(count), grad, z, vec, pd);
        KEEL_CHECK_LAUNCH();
      }
      launch_kernel(ce_mean_kernel, 1, 1024, 0, w.stream, ptr<const float>(row_loss), ptr<const float>(lse), N,
                    ptr<const int64_t>(count), ptr<float>(loss), log_z ? ptr<float>(*log_z) : nullptr);
      KEEL_CHECK_LAUNCH();
    });
  });
  return loss;
}

// logits (N, Vp), targets (N), lse (N), grad [], ready (N, Vp) or none -> dlogits (N, Vp); V classes
Tensor cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse, int64_t V,
                              int64_t ignore_index, const Tensor& count, const Tensor& grad, const Tensor& ready,
                              float expected, double z_loss) {
  require_device(logits, "cross_entropy backward");
  const int64_t N = logits.size(0), Vp = logits.size(1);
  Tensor dx = ready.defined() ? ready : empty({N, Vp}, {logits.dtype(), logits.device()});
  if (N == 0 || V == 0) return dx;
  Tensor g = grad.dtype() == DType::f32 ? grad : grad.detach().to(DType::f32);
  visit_float(logits.dtype(), "cross_entropy backward", [&]<typename T>() {
    visit_index(targets.dtype(), "cross_entropy backward", [&]<typename I>() {
      Where w = where(logits);
      const T* pl = ptr<const T>(logits);
      T* pd = ptr<T>(dx);
      const bool vec = (reinterpret_cast<uintptr_t>(pl) & 15u) == (reinterpret_cast<uintptr_t>(pd) & 15u);
      const int threads = ce_threads(Vp, sizeof(T));
      launch_kernel(ce_backward_kernel<T, I>, ce_blocks(N, threads, w.device), threads, 0, w.stream, pl,
                    ptr<const I>(targets), ptr<const float>(lse), ptr<const float>(g), N, V, Vp, ignore_index,
                    ptr<const int64_t>(count), vec, ready.defined(), expected, static_cast<float>(z_loss), pd);
      KEEL_CHECK_LAUNCH();
    });
  });
  return dx;
}

}  // namespace keel::cuda
