#include "optim/data_parallel.h"

#include <string>

#include "core/error.h"
#include "optim/clip.h"
#include "optim/grad_math.h"
#include "optim/zero_adamw.h"

namespace keel::optim {

ReplicatedAdamW::ReplicatedAdamW(std::shared_ptr<Communicator> comm, NamedTensors params, AdamWOptions opt,
                                 DType reduce_dtype, size_t bucket_bytes)
    : adamw_(std::move(params), opt), sync_(std::move(comm), adamw_.param_tensors(), bucket_bytes, reduce_dtype) {}

ReplicatedAdamW::~ReplicatedAdamW() = default;

std::unique_ptr<GradReadyHookGuard> ReplicatedAdamW::backward_hook() { return sync_.hook(); }

double ReplicatedAdamW::finish_gradients(LossScaler& scaler, double max_norm, StepReadback* readback) {
  adamw_.zero_unreached_gradients();  // zeros to average, as another rank may have reached them
  sync_.finish();                     // every gradient is now the mean over ranks
  const std::vector<Tensor> params = adamw_.param_tensors();
  // Divided as unscale_ divides, without its finiteness pass (a read of the device): the norm
  // below is inf or NaN exactly when some gradient is. One launch per 48 gradients on a GPU.
  if (scaler.scale() != 1.0) scale_all_(gradients_of(params), 1.0 / scaler.scale());
  // The clip's factor goes into step(): AdamW reads each gradient times it, rounded as
  // scale_all_ would have written it, and no pass over the gradients scales them first.
  if (max_norm > 0) check_max_norm(max_norm);  // a bad max_norm fails before the norm's work
  const double norm = grad_norm(params, readback);
  clip_ = max_norm > 0 ? clip_coefficient(norm, max_norm) : 1.0;
  return norm;
}

void ReplicatedAdamW::step(double lr) {
  adamw_.step(lr, clip_);
  clip_ = 1.0;
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
