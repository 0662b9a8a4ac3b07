#include "optim/data_parallel.h"

#include <string>

#include "core/error.h"
#include "optim/clip.h"
#include "optim/grad_math.h"
#include "optim/zero_adamw.h"

namespace keel::optim {

ReplicatedAdamW::ReplicatedAdamW(std::shared_ptr<Communicator> comm, NamedTensors params, AdamWOptions opt,
                                 DType reduce_dtype, size_t bucket_bytes)
    : adamw_(std::move(params), opt),
      sync_(comm, adamw_.param_tensors(), bucket_bytes, reduce_dtype),
      world_(comm->world_size()) {}

ReplicatedAdamW::~ReplicatedAdamW() = default;

std::unique_ptr<GradReadyHookGuard> ReplicatedAdamW::backward_hook() { return sync_.hook(); }

std::vector<Tensor> ReplicatedAdamW::reduce_and_unscale(LossScaler& scaler, double max_norm) {
  adamw_.zero_unreached_gradients();  // zeros to average, as another rank may have reached them
  sync_.finish();                     // every gradient is now the mean over ranks
  std::vector<Tensor> params = adamw_.param_tensors();
  // Divided as unscale_ divides, without its finiteness pass (a read of the device): the norm
  // is inf or NaN exactly when some gradient is. One launch per 48 gradients on a GPU.
  scaler.unscale_in_step(gradients_of(params));
  if (max_norm > 0) check_max_norm(max_norm);  // a bad max_norm fails before the norm's work
  return params;
}

double ReplicatedAdamW::finish_gradients(LossScaler& scaler, double max_norm, StepReadback* readback) {
  const std::vector<Tensor> params = reduce_and_unscale(scaler, max_norm);
  // The clip's factor goes into step(): AdamW reads each gradient times it, rounded as
  // scale_all_ would have written it, and no pass over the gradients scales them first.
  const double norm = grad_norm(params, readback);
  clip_ = max_norm > 0 ? clip_coefficient(norm, max_norm) : 1.0;
  return norm;
}

void ReplicatedAdamW::step(double lr) {
  adamw_.step(lr, clip_);
  clip_ = 1.0;
}

void DataParallelOptimizer::finish_step_on_device(LossScaler&, double, double, StepReadback&, int64_t, int64_t) {
  throw ConfigError("finish_step_on_device", "this optimizer decides its step on the host",
                    "call finish_gradients and step where decides_on_device is false");
}

void ReplicatedAdamW::finish_step_on_device(LossScaler& scaler, double max_norm, double lr, StepReadback& readback,
                                            int64_t loss_slot, int64_t scale_slot) {
  if (world_ != 1)
    throw ConfigError("finish_step_on_device", "each of the " + std::to_string(world_) +
                                                   " ranks holds its own loss until the host averages them",
                      "call finish_gradients and step");
  const std::vector<Tensor> params = reduce_and_unscale(scaler, max_norm);  // the divisor read on the device
  grad_sum_of_squares(params, readback);
  adamw_.step_gated(lr, max_norm, readback.buffer(), StepReadback::kGradSumSq, loss_slot);
  scaler.update_in_step(readback.buffer(), StepReadback::kGradSumSq, scale_slot);
}

std::unique_ptr<DataParallelOptimizer> make_data_parallel_adamw(std::shared_ptr<Communicator> comm,
                                                                NamedTensors params, AdamWOptions opt,
                                                                int64_t zero_stage, DType reduce_dtype,
                                                                size_t bucket_bytes) {
  if (zero_stage == 0)
    return std::make_unique<ReplicatedAdamW>(std::move(comm), std::move(params), opt, reduce_dtype, bucket_bytes);
  if (zero_stage == 1)
    return std::make_unique<ZeroAdamW>(std::move(comm), std::move(params), opt, reduce_dtype, bucket_bytes);
  throw ConfigError("make_data_parallel_adamw", "ZeRO stage " + std::to_string(zero_stage) + " is not available",
                    "use 1 to shard the optimizer state over the ranks, or 0 to replicate it");
}

}  // namespace keel::optim
