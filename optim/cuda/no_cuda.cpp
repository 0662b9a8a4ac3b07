// The CUDA kernels of optim in a build without CUDA (presets `cpu`, `debug`, `fuzz`): each
// raises DeviceError with the way out, so optim/*.cpp dispatch on the device with no `#if`.
// CMake compiles this file instead of optim/cuda/*.cu when KEEL_CUDA is OFF.
#include "core/error.h"
#include "optim/cuda/adamw.h"
#include "optim/cuda/grad_math.h"
#include "optim/cuda/loss_scaler.h"
#include "optim/cuda/step_readback.h"

namespace keel::optim::cuda {

namespace {
[[noreturn]] void no_cuda(const char* op) {
  throw DeviceError(op, "a CUDA tensor reached keel built without CUDA",
                    "rebuild with the `cuda` preset on a machine with nvcc, or move the tensors to the CPU");
}
}  // namespace

void adamw_step(Tensor&, const Tensor&, Tensor&, Tensor&, Tensor&, const AdamWScalars&) { no_cuda("AdamW::step"); }
double sum_of_squares(const Tensor&) { no_cuda("sum_of_squares"); }
void sum_of_squares_into(const std::vector<Tensor>&, Tensor&, int64_t) { no_cuda("sum_of_squares_into"); }
void scale_inplace(Tensor&, double) { no_cuda("scale_"); }
void scale_inplace_multi(const std::vector<Tensor>&, double) { no_cuda("scale_all_"); }
void unscale_inplace_multi(const std::vector<Tensor>&, const Tensor&) { no_cuda("LossScaler"); }
void scale_by_state(const Tensor&, const Tensor&, double, Tensor&) { no_cuda("LossScaler::scale_loss"); }
void update_state(Tensor&, const LossScalerOptions&, Tensor&, int64_t, int64_t) { no_cuda("LossScaler::update"); }
void adamw_step_multi(std::vector<AdamWTensors>&) { no_cuda("AdamW::step"); }
void adamw_decide(AdamWGate&) { no_cuda("AdamW::step_gated"); }
void adamw_step_multi_gated(std::vector<AdamWTensors>&, const std::vector<int>&, const AdamWGate&) {
  no_cuda("AdamW::step_gated");
}
void add_quotient(Tensor&, int64_t, const Tensor&, double) { no_cuda("StepReadback::add_quotient"); }
void merge_max(Tensor&, int64_t, const Tensor&) { no_cuda("StepReadback::merge_max"); }

}  // namespace keel::optim::cuda
