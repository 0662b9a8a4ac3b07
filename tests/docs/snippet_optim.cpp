// docs/optim.md, "One training step": the loop as printed there trains a tiny GPT-2.
#include <doctest/doctest.h>

#include <cmath>
#include <utility>

#include "core/dist/comm.h"
#include "core/factory.h"
#include "nn/gpt2.h"
#include "optim/adamw.h"
#include "optim/clip.h"
#include "optim/grad_sync.h"
#include "optim/loss_scaler.h"
#include "optim/schedule.h"

TEST_CASE("docs/optim.md: one training step") {
  keel::nn::GPT2Config cfg = keel::nn::GPT2Config::preset("tiny");
  cfg.vocab_size = 64;
  cfg.block_size = 16;
  keel::nn::GPT2 model(cfg, 1);
  // The stand-ins for a run's data and settings: a fixed batch that counts up modulo 64.
  std::vector<int32_t> tokens(4 * 17);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t((3 * i) % 64);
  auto next_batch = [&] {
    std::vector<int32_t> in, out;
    for (int b = 0; b < 4; ++b)
      for (int t = 0; t < 16; ++t) in.push_back(tokens[b * 17 + t]), out.push_back(tokens[b * 17 + t + 1]);
    return std::pair{keel::from_vector(in, {4, 16}), keel::from_vector(out, {4, 16})};
  };
  const keel::DType train_dtype = keel::DType::f32;
  const int64_t start_step = 0, max_steps = 20;
  const int accum = 2;
  keel::LocalCommunicator comm;
  double first_loss = 0, last_loss = 0;
  // snippet-begin
  using namespace keel;
  using namespace keel::optim;

  auto params = model.named_parameters();          // (name, tensor) pairs
  AdamW opt(params, {.lr = 6e-4, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1});
  CosineSchedule sched{.lr = 6e-4, .min_lr = 6e-5, .warmup = 2000, .max_steps = 50000};
  LossScaler scaler(train_dtype);                  // enabled only when train_dtype is f16
  auto ps = opt.param_tensors();
  // snippet-end
  sched = {.lr = 3e-3, .min_lr = 3e-4, .warmup = 2, .max_steps = max_steps};  // a short run
  // snippet-begin

  for (int64_t step = start_step; step < max_steps; ++step) {
    // 1. Gradient accumulation: zero_grad() first (bf16/f16 parameters keep f32 gradient
    //    buffers), then the first micro-batch writes .grad and the others add into it (+=, in
    //    the buffer's f32). Each micro-loss is divided by `accum` so that the sum of the
    //    micro-gradients is the gradient of the mean loss over the whole batch.
    opt.zero_grad();
    for (int micro = 0; micro < accum; ++micro) {
      auto [ids, targets] = next_batch();              // (B, T) token ids and next tokens
      Tensor loss = model.forward(ids, targets).loss;  // f32, whatever the compute dtype
      scaler.scale_loss(loss, 1.0 / accum).backward(); // loss * scale / accum in f32; scale is 1 unless f16
      // snippet-end
      (step == 0 ? first_loss : last_loss) = loss.item();
      // snippet-begin
    }
    // 2. Data parallel: every rank gets the mean gradient over ranks (one rank: returns at once).
    //    Mean over ranks x mean over micro-batches = mean over the global batch.
    allreduce_gradients(comm, ps);
    // 3. f16 only: divide out the loss scale and look for overflow (a no-op returning true otherwise).
    bool finite = scaler.unscale_(ps);
    // 4. Clip on the true (unscaled) gradients. The returned norm goes into the metrics log;
    //    it is inf/NaN when a gradient is, and then nothing was scaled.
    double norm = clip_grad_norm(ps, 1.0);
    finite = finite && std::isfinite(norm);
    // 5. Update with the schedule's lr for this step, unless the gradients are garbage.
    if (finite) opt.step(sched.lr_at(step));
    scaler.update(!finite);                            // f16: backoff on overflow, growth after 2000 good steps
  }
  // snippet-end
  CHECK(std::isfinite(last_loss));
  CHECK(last_loss < first_loss - 0.5);  // it learns the fixed batch
}
