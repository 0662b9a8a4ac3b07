// Cross-entropy fused with log-softmax on the device, for large vocabularies (V = 50257).
//
// Forward: one block per row makes a single pass over the V logits with online softmax
// (running max and rescaled sum in f32, 16-byte loads after a scalar head: rows of odd length
// start anywhere modulo 16), and writes only lse (N) and the row's loss; probabilities are
// never stored. A one-block kernel then adds the N row losses in a fixed order (deterministic)
// and divides by the number of counted rows, which it counts itself: the targets never travel to
// the host, so the loss costs no synchronisation. A target outside [0, V) is reported through
// core/cuda/device_check.h (the host raises the CPU's IndexError at its next synchronisation)
// and its row counts as ignored, so no kernel reads outside the row.
// Backward: one block per row writes (softmax - onehot) * grad / count straight from the
// logits and lse, zero rows for ignored targets. grad stays on the device (no sync).
// Rows may be padded (Vp >= V columns, a vocabulary padded so that the matmuls around the
// loss run on cuBLAS's aligned kernels): the forward reads only the V classes, the backward
// writes zeros into the padding.
#include <string>
#include <type_traits>
#include <vector>

#include "core/cuda/device_check.h"
#include "ops/cuda/common.cuh"
#include "ops/cuda/cross_entropy.h"

namespace keel::cuda {

namespace {
using namespace dev;

// logits (N, Vp), targets (N) -> lse (N), row_loss (N) (0 for ignored rows), over V classes
// A target outside [0, V) that is not ignore_index goes to `check` and its row_loss is 0.
template <typename T, typename I>
__global__ void ce_forward_kernel(const T* __restrict__ logits, const I* __restrict__ targets, int64_t N, int64_t V,
                                  int64_t Vp, int64_t ignore_index, float* __restrict__ lse,
                                  float* __restrict__ row_loss, DeviceCheckSlot* check) {
  __shared__ float scratch[64];
  for (int64_t r = blockIdx.x; r < N; r += gridDim.x) {
    const T* row = logits + r * Vp;
    MaxSum ms{-INFINITY, 0.0f};
    row_fold<T>(row, nullptr, V, row_head(row, V), [&](int64_t, float v, float) { ms = push(ms, v); });
    ms = block_merge(ms, scratch);
    if (threadIdx.x == 0) {
      const float l = ms.m + logf(ms.s);
      const int64_t t = static_cast<int64_t>(targets[r]);
      const bool bad = t != ignore_index && (t < 0 || t >= V);
      if (bad && atomicCAS(&check->code, int32_t(DeviceCheck::none), int32_t(DeviceCheck::class_target)) ==
                     int32_t(DeviceCheck::none))
        check->value = t, check->index = r, check->bound = V;
      lse[r] = l;
      row_loss[r] = t == ignore_index || bad ? 0.0f : l - to_f32(row[t]);
    }
  }
}

// row_loss (N), targets (N) -> count [] = the rows whose target is in [0, V) and not
// ignore_index, loss [] = sum /
// count (0 when count is 0), in f32 (L = f32, or f64 for f64 logits) whatever the logits' dtype:
// a bf16/f16 loss would be quantized, and overflow under f16 loss scaling. One block of 1024
// threads; integer adds, so the count is exact in any order.
template <typename L, typename I>
__global__ void ce_mean_kernel(const float* __restrict__ row_loss, const I* __restrict__ targets, int64_t N,
                               int64_t V, int64_t ignore_index, L* __restrict__ loss, int64_t* __restrict__ count) {
  __shared__ float scratch[32];
  __shared__ unsigned long long counted;
  if (threadIdx.x == 0) counted = 0;
  __syncthreads();
  float s = 0.0f;
  unsigned long long mine = 0;
  for (int64_t r = threadIdx.x; r < N; r += blockDim.x) {
    s += row_loss[r];
    const int64_t t = static_cast<int64_t>(targets[r]);
    mine += t != ignore_index && t >= 0 && t < V;
  }
  atomicAdd(&counted, mine);
  s = block_sum(s, scratch);  // its barriers order every add to `counted` before the read
  if (threadIdx.x == 0) {
    const int64_t n = static_cast<int64_t>(counted);
    count[0] = n;
    loss[0] = static_cast<L>(n > 0 ? s / static_cast<float>(n) : 0.0f);
  }
}

// logits, dlogits (N, Vp), targets (N), lse (N), grad [] f32 -> dlogits (columns >= V: 0); vec:
// logits and dlogits share their alignment modulo 16, so one head serves both.
template <typename T, typename I>
__global__ void ce_backward_kernel(const T* __restrict__ logits, const I* __restrict__ targets,
                                   const float* __restrict__ lse, const float* __restrict__ grad, int64_t N, int64_t V,
                                   int64_t Vp, int64_t ignore_index, const int64_t* __restrict__ count, bool vec,
                                   T* __restrict__ dlogits) {
  const float inv_count = count[0] > 0 ? 1.0f / static_cast<float>(count[0]) : 0.0f;
  const float scale = grad[0] * inv_count;
  for (int64_t r = blockIdx.x; r < N; r += gridDim.x) {
    const T* row = logits + r * Vp;
    const int64_t t = static_cast<int64_t>(targets[r]), head = vec ? row_head(row, Vp) : Vp;
    if (t == ignore_index || t < 0 || t >= V) {  // ignored (or out of range: reported by the forward)
      row_map<T>(row, nullptr, dlogits + r * Vp, Vp, head, [](int64_t, float, float) { return 0.0f; });
      continue;
    }
    const float l = lse[r];
    row_map<T>(row, nullptr, dlogits + r * Vp, Vp, head, [&](int64_t j, float v, float) {
      return j < V ? (expf(v - l) - (j == t ? 1.0f : 0.0f)) * scale : 0.0f;
    });
  }
}
}  // namespace

// logits (N, Vp), targets (N) -> loss [] f32 (f64 for f64 logits), lse (N) f32, count [] i64; V classes
Tensor cross_entropy_forward(const Tensor& logits, const Tensor& targets, int64_t V, int64_t ignore_index, Tensor& lse,
                             Tensor& count) {
  require_device(logits, "cross_entropy");
  const int64_t N = logits.size(0), Vp = logits.size(1);
  const Device dev = logits.device();
  lse = empty({N}, {DType::f32, dev});
  count = empty({}, {DType::i64, dev});
  const DType loss_dtype = logits.dtype() == DType::f64 ? DType::f64 : DType::f32;
  Tensor loss = empty({}, {loss_dtype, dev});
  Tensor row_loss = empty({N}, {DType::f32, dev});
  visit_float(logits.dtype(), "cross_entropy", [&]<typename T>() {
    visit_index(targets.dtype(), "cross_entropy", [&]<typename I>() {
      Where w = where(logits);
      if (N > 0 && V > 0) {
        const int blocks = static_cast<int>(std::min<int64_t>(N, int64_t(sm_count(w.device)) * 32));
        launch_kernel(ce_forward_kernel<T, I>, blocks, row_threads(V, sizeof(T)), 0, w.stream,
            ptr<const T>(logits), ptr<const I>(targets), N, V, Vp, ignore_index, ptr<float>(lse),
            ptr<float>(row_loss), device_check_slot(w.device));
        KEEL_CHECK_LAUNCH();
      }
      // The loss is f32 for every storage type the CUDA kernels take (visit_float has no f64).
      launch_kernel(ce_mean_kernel<float, I>, 1, 1024, 0, w.stream, ptr<const float>(row_loss),
                    ptr<const I>(targets), N, V, ignore_index, ptr<float>(loss), ptr<int64_t>(count));
      KEEL_CHECK_LAUNCH();
    });
  });
  return loss;
}

// logits (N, Vp), targets (N), lse (N), grad [] -> dlogits (N, Vp); V classes
Tensor cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse, int64_t V,
                              int64_t ignore_index, const Tensor& count, const Tensor& grad) {
  require_device(logits, "cross_entropy backward");
  const int64_t N = logits.size(0), Vp = logits.size(1);
  Tensor dx = empty({N, Vp}, {logits.dtype(), logits.device()});
  if (N == 0 || V == 0) return dx;
  Tensor g = grad.dtype() == DType::f32 ? grad : grad.detach().to(DType::f32);
  visit_float(logits.dtype(), "cross_entropy backward", [&]<typename T>() {
    visit_index(targets.dtype(), "cross_entropy backward", [&]<typename I>() {
      Where w = where(logits);
      const T* pl = ptr<const T>(logits);
      T* pd = ptr<T>(dx);
      const bool vec = (reinterpret_cast<uintptr_t>(pl) & 15u) == (reinterpret_cast<uintptr_t>(pd) & 15u);
      const int blocks = static_cast<int>(std::min<int64_t>(N, int64_t(sm_count(w.device)) * 32));
      launch_kernel(ce_backward_kernel<T, I>, blocks, row_threads(Vp, sizeof(T)), 0, w.stream,
          pl, ptr<const I>(targets), ptr<const float>(lse), ptr<const float>(g), N, V, Vp, ignore_index,
          ptr<const int64_t>(count), vec, pd);
      KEEL_CHECK_LAUNCH();
    });
  });
  return dx;
}

}  // namespace keel::cuda
