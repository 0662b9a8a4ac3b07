// The dropout mask on the device, from the very Philox stream the CPU uses
// (core/philox.h): element i keeps iff uniform(seed, base, i) > p, so a run masks the
// same elements on either device for the same generator state.
#include "core/philox.h"
#include "ops/cuda/common.cuh"
#include "ops/cuda/dropout.h"

namespace keel::cuda {

namespace {
using namespace dev;

// mask (N): one thread per Philox block, i.e. per 4 consecutive elements (counter base + k
// serves elements 4k .. 4k + 3, lane i % 4, as in keel::philox_uniform).
template <typename T>
__global__ void dropout_mask_kernel(T* __restrict__ mask, int64_t n, uint64_t key, uint64_t base, float p, T keep) {
  const int64_t blocks = (n + 3) / 4;
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < blocks; k += int64_t(gridDim.x) * blockDim.x) {
    const philox::Block r = philox::philox4x32(base + static_cast<uint64_t>(k), key);
#pragma unroll
    for (int lane = 0; lane < 4; ++lane) {
      const int64_t i = 4 * k + lane;
      if (i < n) mask[i] = philox::to_unit(r.x[lane]) > p ? keep : from_f32<T>(0.0f);
    }
  }
}
}  // namespace

// mask (N) contiguous
void dropout_mask(Tensor& mask, uint64_t key, uint64_t base, float p, double keep_scale) {
  require_device(mask, "dropout");
  const int64_t n = mask.numel();
  if (n == 0) return;
  visit_float(mask.dtype(), "dropout", [&]<typename T>() {
    Where w = where(mask);
    // keep_scale rounds to f32 first, as the CPU's static_cast<float>(1.0 / (1.0 - p)).
    const T keep = from_f32<T>(static_cast<float>(keep_scale));
    launch_kernel(dropout_mask_kernel<T>, grid_for((n + 3) / 4, kThreads, w.device), kThreads, 0, w.stream, ptr<T>(mask), n, key,
                                                                                                 base, p, keep);
    KEEL_CHECK_LAUNCH();
  });
}

}  // namespace keel::cuda
