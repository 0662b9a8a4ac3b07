// The loss scaler's arithmetic on the GPU, for a training step that does not read its scale
// back: the loss times the scale, and the scale's update after the step. Both are the host's
// operations on the same values (f32 products of the f32-rounded scalar; f64 max, min and
// multiplications), so the scale, the gradients and the weights keep the host path's bits.
#include "core/cuda/check.h"
#include "core/cuda/launch.cuh"
#include "core/cuda/runtime.h"
#include "optim/cuda/loss_scaler.h"
#include "optim/loss_scaler.h"

namespace keel::optim::cuda {

namespace {
// x [], state (3) -> out []
__global__ void scale_by_state_kernel(const float* __restrict__ x, const double* __restrict__ state, double factor,
                                      float* __restrict__ out) {
  out[0] = x[0] * static_cast<float>(state[0] * factor);
}

// The options the kernel needs, by value.
struct Update {
  double growth_factor, backoff_factor, min_scale, max_scale;
  int64_t growth_interval;
};

// state (3) f64, scalars (S) f64 -> state updated, scalars[scale_slot] = state[0].
__global__ void update_state_kernel(double* __restrict__ state, Update u, double* __restrict__ scalars,
                                    int64_t sumsq_slot, int64_t scale_slot) {
  const double norm = ::sqrt(scalars[sumsq_slot]);
  double scale = state[0];
  int64_t tracker = static_cast<int64_t>(state[1]), skipped = static_cast<int64_t>(state[2]);
  if (!(norm - norm == 0.0)) {  // not finite: inf - inf and NaN - NaN are NaN
    scale = scale * u.backoff_factor;
    scale = scale > u.min_scale ? scale : u.min_scale;  // std::max(min_scale, scale)
    tracker = 0;
    ++skipped;
  } else if (++tracker >= u.growth_interval) {
    scale = scale * u.growth_factor;
    scale = u.max_scale < scale ? u.max_scale : scale;  // std::min(max_scale, scale)
    tracker = 0;
  }
  state[0] = scale;
  state[1] = static_cast<double>(tracker);
  state[2] = static_cast<double>(skipped);
  scalars[scale_slot] = scale;
}

void check_state(const Tensor& state, const Tensor& t, const char* op) {
  if (!state.device().is_cuda() || state.dtype() != DType::f64 || state.numel() != 3 || !state.is_contiguous() ||
      t.device() != state.device() || !t.is_contiguous())
    throw DeviceError(op, "expected the scaler's (3) f64 state and a contiguous tensor on one GPU");
}
}  // namespace

void scale_by_state(const Tensor& x, const Tensor& state, double factor, Tensor& out) {
  check_state(state, x, "LossScaler::scale_loss");
  if (x.dtype() != DType::f32 || x.numel() != 1 || out.dtype() != DType::f32 || out.numel() != 1 || out.device() != x.device())
    throw DTypeError("LossScaler::scale_loss", "expected f32 scalars on the scaler's GPU");
  const int dev = x.device().index;
  KEEL_CHECK_CUDA(cudaSetDevice(dev));
  keel::cuda::launch_kernel(scale_by_state_kernel, 1, 1, 0, ::keel::cuda::detail::stream(dev),
                            static_cast<const float*>(x.raw_data()), static_cast<const double*>(state.raw_data()), factor,
                            static_cast<float*>(out.raw_data()));
  KEEL_CHECK_LAUNCH();
}

void update_state(Tensor& state, const LossScalerOptions& opt, Tensor& scalars, int64_t sumsq_slot,
                  int64_t scale_slot) {
  check_state(state, scalars, "LossScaler::update");
  if (scalars.dtype() != DType::f64 || sumsq_slot < 0 || sumsq_slot >= scalars.numel() || scale_slot < 0 ||
      scale_slot >= scalars.numel())
    throw ShapeError("LossScaler::update", "the step's scalars must be f64 and hold both slots");
  const int dev = state.device().index;
  KEEL_CHECK_CUDA(cudaSetDevice(dev));
  const Update u{opt.growth_factor, opt.backoff_factor, opt.min_scale, opt.max_scale, opt.growth_interval};
  keel::cuda::launch_kernel(update_state_kernel, 1, 1, 0, ::keel::cuda::detail::stream(dev),
                            static_cast<double*>(state.raw_data()), u, static_cast<double*>(scalars.raw_data()),
                            sumsq_slot, scale_slot);
  KEEL_CHECK_LAUNCH();
}

}  // namespace keel::optim::cuda
