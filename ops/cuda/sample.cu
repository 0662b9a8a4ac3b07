// One token drawn on the GPU, so that a sampling decoder reads back an id, not the logits.
//
// It follows sample_top_k_host (ops/sample.cpp) step for step, because the point is the same
// tokens on either device for one seed. One block of kThreads (common.cuh): k rounds, each a block-wide
// arg-max over the logits that come after the previous pick in the order (value descending, id
// ascending), which needs no mark per logit and yields the host's partial_sort order, ties
// included. k is small (top_k 40 reads the logits 40 times from L2: microseconds), and the
// decoder waits on the id either way. Then one thread does the host's f64 arithmetic in the
// host's order: p_i = exp((l_i - l_0) / T), their sum, the running sum against u * total. Only
// exp may differ from the host's (CUDA's f64 exp is within 1 ulp, not always correctly rounded):
// the draw can then differ only when u * total falls within a few ulps of a boundary.
#include <cmath>

#include "core/philox.h"
#include "ops/cuda/common.cuh"
#include "ops/cuda/sample.h"
#include "ops/sample.h"

namespace keel::cuda {

namespace {

using namespace dev;

// logits (V) -> out (1): see the top of the file. One block.
template <typename T>
__global__ void __launch_bounds__(kThreads) sample_kernel(const T* __restrict__ logits, int64_t V, double temperature,
                                                          int k, uint64_t key, uint64_t base,
                                                          int64_t* __restrict__ out) {
  KEEL_SHARED(float[kMaxDeviceTopK], pick_v);
  KEEL_SHARED(int64_t[kMaxDeviceTopK], pick_i);
  KEEL_SHARED(float[kThreads], red_v);
  KEEL_SHARED(int64_t[kThreads], red_i);
  const int tid = threadIdx.x;
  float pv = INFINITY;
  int64_t pi = -1;  // the previous pick; -1: none yet, every logit is eligible
  int n = 0;
  for (; n < k; ++n) {
    float bv = 0.0f;
    int64_t bi = -1;
    for (int64_t i = tid; i < V; i += kThreads) {
      const float x = to_f32(logits[i]);
      if (x != x) continue;  // NaN: no place in the order
      if (pi >= 0 && !(x < pv || (x == pv && i > pi))) continue;
      if (bi < 0 || x > bv) bv = x, bi = i;  // i grows: an equal value keeps the smaller id
    }
    red_v[tid] = bv;
    red_i[tid] = bi;
    __syncthreads();
    for (int s = kThreads / 2; s > 0; s >>= 1) {
      if (tid < s) {
        const float ov = red_v[tid + s];
        const int64_t oi = red_i[tid + s];
        if (oi >= 0 && (red_i[tid] < 0 || ov > red_v[tid] || (ov == red_v[tid] && oi < red_i[tid])))
          red_v[tid] = ov, red_i[tid] = oi;
      }
      __syncthreads();
    }
    pv = red_v[0];
    pi = red_i[0];
    if (tid == 0) pick_v[n] = pv, pick_i[n] = pi;
    __syncthreads();  // red_ is rewritten by the next round
    if (pi < 0) break;  // fewer than k numbers (NaNs): draw from those found
  }
  if (tid != 0) return;
  if (n == 0) {  // all NaN: the host's max_element would return the first
    out[0] = 0;
    return;
  }
  if (temperature == 0) {
    out[0] = pick_i[0];
    return;
  }
  const double top = pick_v[0];
  double total = 0;
  for (int i = 0; i < n; ++i) total += ::exp((double(pick_v[i]) - top) / temperature);
  const double target = philox::uniform(key, base, 0) * total;
  double acc = 0;
  for (int i = 0; i < n; ++i)
    if ((acc += ::exp((double(pick_v[i]) - top) / temperature)) >= target) {
      out[0] = pick_i[i];
      return;
    }
  out[0] = pick_i[n - 1];
}

}  // namespace

// logits (V) -> out (1) i64
void sample_top_k(const Tensor& logits, int64_t V, double temperature, int64_t k, uint64_t key, uint64_t base,
                  Tensor& out) {
  constexpr const char* kOp = "sample_top_k (CUDA)";
  const int dev = logits.device().index;
  KEEL_CHECK_CUDA(cudaSetDevice(dev));
  cudaStream_t stream = detail::stream(dev);
  visit_cuda_float(logits.dtype(), kOp, [&]<typename T>() {
    launch_kernel(sample_kernel<T>, dim3(1), dim3(kThreads), 0, stream, static_cast<const T*>(logits.raw_data()), V,
                  temperature, static_cast<int>(k), key, base, static_cast<int64_t*>(out.raw_data()));
    KEEL_CHECK_LAUNCH();
  });
}

}  // namespace keel::cuda
