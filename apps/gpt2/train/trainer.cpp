// The training loop. Read Trainer::run() top to bottom: set-up (trainer_setup.cpp: data, model,
// optimizer, resume), then one train_step per optimizer step, reported (logged, and checkpointed
// or validated when due) at the steps that need the host to see its numbers.
//
// A step takes two choices, each in one place:
//  - how the forward and backward run (forward_backward): op by op from the host, or, with
//    --cuda-graph 1 on one GPU, as one replay of a captured CUDA graph (step_graph.h) that runs
//    the very same kernels;
//  - who decides whether the step is applied and by what factor it is clipped (train_step): on
//    one process the device does (AdamW::step_gated), so the host never waits for the step and
//    reads its scalars only when it reports; with several ranks or ZeRO-1 the host does, and
//    reads them at once (finish_on_host).
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <vector>

#include "apps/gpt2/infer/eval.h"
#include "apps/gpt2/run/checkpoint.h"
#include "apps/gpt2/run/placement.h"
#include "apps/gpt2/train/step_profiler.h"
#include "apps/gpt2/train/stop_request.h"
#include "apps/gpt2/train/trainer_impl.h"
#include "core/allocator.h"
#include "core/copy.h"
#include "ops/shape.h"

namespace keel::app {

// An event of the step in progress (step_ + 1), or of `step` when given.
void Trainer::event(const std::string& kind, const std::string& message, int64_t step) {
  if (!log_) return;
  MetricsRecord r;
  r.kind = RecordKind::Event;
  r.step = step >= 0 ? step : step_ + 1;
  r.event = kind;
  r.message = message;
  log_->write(r);
}

// One micro-batch: batch (2, B, T), ids then targets (placement.h), on the run's device. Its
// forward and backward; its loss and attention statistics added into the step's scalars.
void Trainer::micro_batch(const Tensor& batch, optim::StepReadback& scalars, bool last) {
  const auto [ids, targets] = split_batch(batch);
  // The loss's gradient is known now, so the loss computes the logits' gradient in its pass.
  const double factor = 1.0 / double(cfg_.grad_accum);
  nn::GPT2Output out = model_->forward(ids, targets, nn::StatsOn::device, scaler_->loss_grad(factor), cfg_.z_loss);
  // Scaling each loss by 1/accum makes the sum of the micro-batches' gradients the gradient of
  // the mean loss (and by the loss scale for f16, in f32). During the last backward, finished
  // gradients start their reduction over the ranks.
  {
    auto hook = last ? opt_->backward_hook() : nullptr;
    scaler_->scale_loss(out.loss, factor).backward();
  }
  // The mean loss as `loss += item / accum` in f64, the statistics merged NaN-first (MaxLogit);
  // log Z's mean as the loss's, its largest |log Z| as the attention's statistics.
  scalars.add_quotient(StepScalars::kLoss, out.loss, double(cfg_.grad_accum));
  scalars.add_quotient(StepScalars::kLogZMean, slice(out.log_z, 0, 0, 1), double(cfg_.grad_accum));
  scalars.merge_max(StepScalars::kLogZMax, slice(out.log_z, 0, 1, 2));
  scalars.merge_max(scalars_.max_logit(), out.max_logit);
  scalars.merge_max(scalars_.max_range(), out.max_range);
}

// The forward and backward of the step's micro-batches, their scalars gathered in `scalars`.
void Trainer::forward_backward(optim::StepReadback& scalars) {
  if (!graph_) {  // op by op
    scalars.reset();
    for (int64_t micro = 0; micro < cfg_.grad_accum; ++micro) {
      const Tensor batch = [&] {
        profiler::Scope prof("batch_to_device", profiler::Phase::host);
        return batch_tensor(loader_->next(), device_);
      }();
      micro_batch(batch, scalars, micro + 1 == cfg_.grad_accum);
    }
    return;
  }
  // --cuda-graph 1: the step's micro-batches as one (2 * accum, B, T) tensor, one copy into the
  // graph's buffer, and one replay that runs them all, each on its slice, as the loop above does.
  // One rank (check_graph_fits), so the backward hook would have nothing to reduce.
  graph_->readback().reset();
  const Tensor batches = [&] {
    profiler::Scope prof("batch_to_device", profiler::Phase::host);
    std::vector<Tensor> micro;
    for (int64_t i = 0; i < cfg_.grad_accum; ++i) micro.push_back(batch_tensor(loader_->next(), Device::cpu()));
    return micro.size() == 1 ? micro[0] : concat(micro, 0);
  }();
  // The graph's key: the loss factor its kernels were captured with. A scale kept on the device
  // is read there by the captured kernel, so the graph holds whatever it becomes.
  graph_->run(batches, scaler_->on_device() ? 1.0 : scaler_->scale(), [&](const Tensor& b, optim::StepReadback& rb) {
    for (int64_t i = 0; i < cfg_.grad_accum; ++i) micro_batch(slice(b, 0, 2 * i, 2 * i + 2), rb, false);
  });
  copy_(scalars.buffer(), graph_->readback().buffer());  // the graph's scalars live at its fixed address
}

// One optimizer step, launched: its scalars go into the newest row of pending_scalars_.
void Trainer::train_step(double lr) {
  if (pending_.empty()) pending_since_ = std::chrono::steady_clock::now();
  const int64_t row = static_cast<int64_t>(pending_.size());
  optim::StepReadback scalars(view(slice(pending_scalars_, 0, row, row + 1), {scalars_.size()}));
  Pending& step = pending_.emplace_back(Pending{step_, lr, std::nullopt});

  opt_->zero_grad();  // bf16/f16 parameters get f32 gradient buffers: the micro-batches add up in f32
  forward_backward(scalars);

  const profiler::PhaseGuard optimizer_phase(profiler::Phase::optimizer);
  if (device_decides_)  // unscale, norm, clip and AdamW, applied on the device when finite; nothing read
    opt_->finish_step_on_device(*scaler_, cfg_.grad_clip, lr, scalars, StepScalars::kLoss, scalars_.loss_scale());
  else
    step.result = finish_on_host(lr, scalars);
}

// Several ranks, or ZeRO-1: the host decides the step, since each rank's loss is its own until
// the ranks average it, and ZeRO's norm sums every rank's slice. The scalars are read now.
StepResult Trainer::finish_on_host(double lr, optim::StepReadback& scalars) {
  const double norm = opt_->finish_gradients(*scaler_, cfg_.grad_clip, &scalars);  // reads them: the step's wait
  StepResult s = scalars_.result(scalars.read(), scaler_->enabled());
  s.grad_norm = norm;  // ZeRO's norm sums every rank's slice; the slot holds this rank's
  s.loss = mean_over_ranks(*dist_.comm, s.loss);
  s.log_z_mean = mean_over_ranks(*dist_.comm, s.log_z_mean);
  s.log_z_max = max_over_ranks(*dist_.comm, s.log_z_max);
  max_over_ranks(*dist_.comm, s.stats.max_logit);
  max_over_ranks(*dist_.comm, s.stats.max_range);
  const bool grads_finite = std::isfinite(s.grad_norm);
  s.finite = grads_finite && std::isfinite(s.loss);
  s.skipped = !s.finite;  // with f16 an overflow is routine: the scaler backs off and we go on
  if (s.finite) opt_->step(lr);
  scaler_->update(!grads_finite);
  s.loss_scale = scaler_->scale();
  return s;
}

// The scalars of every pending step the device decided, in one copy: their one host wait.
void Trainer::read_pending() {
  const int64_t n = static_cast<int64_t>(pending_.size());
  if (n == 0 || pending_.back().result) return;
  profiler::Scope prof("step_readback", profiler::Phase::optimizer);
  const std::vector<double> rows = slice(pending_scalars_, 0, 0, n).to_vector<double>();
  for (int64_t k = 0; k < n; ++k)
    pending_[size_t(k)].result = scalars_.result(rows.data() + k * scalars_.size(), scaler_->enabled());
}

// The pending steps logged in order, as if each had been read when it ran; the time since the
// first of them began is shared out evenly (their work overlapped on the device).
void Trainer::report_pending() {
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - pending_since_).count() /
                         double(std::max<size_t>(1, pending_.size()));
  const std::vector<Pending> steps = std::move(pending_);
  pending_.clear();
  for (const Pending& p : steps) {
    const StepResult& s = *p.result;
    elapsed_ += seconds;
    result_.final_loss = s.loss;
    log_step(p.step, s, p.lr, seconds);
    if (s.finite || scaler_->enabled()) continue;
    std::string what = fmt::format("non-finite {} at step {}; hottest attention: {}",
                                   std::isfinite(s.loss) ? "gradient" : "loss", p.step + 1,
                                   s.stats.hottest_head(cfg_.spike_signal));
    event("nonfinite", what, p.step + 1);
    if (cfg_.on_nonfinite == "stop")
      throw ValueError("train", "training diverged: " + what,
                       "lower --lr, clip harder (--grad-clip), or try --attention ls; "
                       "--on-nonfinite skip skips such steps instead");
  }
}

bool Trainer::progress_line_due(int64_t step) const {
  return step % std::max<int64_t>(1, cfg_.max_steps / 20) == 0 || step + 1 == cfg_.max_steps;
}

void Trainer::log_step(int64_t step, const StepResult& s, double lr, double seconds) {
  if (!dist_.root()) return;
  const double tokens = double(cfg_.batch_size * T_ * cfg_.grad_accum * dist_.world());
  MetricsRecord r;
  r.step = step + 1;
  r.loss = s.loss;
  r.lr = lr;
  r.grad_norm = s.grad_norm;
  r.max_logit = s.stats.max_logit.rows();
  r.max_range = s.stats.max_range.rows();
  r.log_z_mean = s.log_z_mean;
  r.log_z_max = s.log_z_max;
  r.tokens_per_s = tokens / seconds;
  if (peak_ > 0) r.mfu = flops_per_token_ * r.tokens_per_s / peak_;
  r.mem_bytes = int64_t(memory_stats(device_).peak);
  r.loss_scale = s.loss_scale;
  r.skipped = s.skipped;
  r.elapsed_s = elapsed_;
  if (step % cfg_.log_every == 0 || step + 1 == cfg_.max_steps) log_->write(r);

  // A spike: the loss far above its recent mean (the instability this project is about).
  if (auto spike = spikes_.observe(s.loss))
    event("spike", *spike + "; hottest attention: " + s.stats.hottest_head(cfg_.spike_signal), step + 1);

  // Progress: redrawn in place on a terminal, about 20 plain lines otherwise.
  const double eta = seconds * double(cfg_.max_steps - step - 1);
  const bool tty = isatty(STDOUT_FILENO);
  if (tty || progress_line_due(step)) {
    const double top = s.stats.signal(cfg_.spike_signal).top();
    fmt::print("{}step {:>6}/{} | loss {:.4f} | lr {:.2e} | grad {:.3f} | {} {:6.2f} | {:.0f} tok/s | ETA {:.0f}s{}",
               tty ? "\r" : "", step + 1, cfg_.max_steps, s.loss, lr, s.grad_norm,
               cfg_.spike_signal == "max_range" ? "max range" : "max logit", top, r.tokens_per_s, eta,
               tty ? "   " : "\n");
    std::fflush(stdout);
  }
}

void Trainer::validate_now() {
  EvalResult e = evaluate(*model_, val_split_, cfg_.batch_size, T_, cfg_.val_batches, device_, dist_.comm.get());
  result_.val_loss = e.loss;
  result_.val_perplexity = e.perplexity;
  if (!dist_.root()) return;
  MetricsRecord r;
  r.kind = RecordKind::Val;
  r.step = step_ + 1;
  r.val_loss = e.loss;
  r.val_ppl = e.perplexity;
  r.max_logit = e.max_logit.rows();
  r.max_range = e.max_range.rows();
  log_->write(r);
  fmt::print("{}step {:>6} | val loss {:.4f} | val ppl {:.2f}\n", isatty(STDOUT_FILENO) ? "\n" : "", step_ + 1, e.loss,
             e.perplexity);
}

TrainResult Trainer::run() {
  // Handlers first: open_run writes the run's files, and a Ctrl-C (or the launcher's
  // forwarded SIGUSR1) that landed before the handlers would kill the rank instead of letting it
  // finish its first step, checkpoint once and exit 0 like the others.
  const StopRequest stop_request;
  open_run();
  build_model();
  build_optimizer();
  if (cfg_.resume) resume_from(*latest_);
  result_.rank = dist_.rank();
  result_.world = dist_.world();
  if (finished_) {
    // A kill while the last checkpoint's predecessors were pruned can leave a temporary; this
    // launch is the next run that cleans it, even with nothing left to train.
    if (dist_.root()) {
      remove_stale_temporaries(run_dir_);
      fmt::print("gpt2 train: {} already finished: step {} of --max-steps {} (checkpoint {}, metrics {}); "
                 "nothing to do\n",
                 run_dir_.string(), step_, cfg_.max_steps, latest_->string(), (run_dir_ / "metrics.jsonl").string());
    }
    result_.steps = step_;
    result_.already_finished = true;
    return result_;
  }
  write_run_files();
  start_log();
  StepProfiler step_profiler(cfg_, device_, run_dir_, dist_.root(), step_);

  for (; step_ < cfg_.max_steps; ++step_) {
    const double lr = schedule_.lr_at(step_);
    step_profiler.begin(step_);
    train_step(lr);
    const bool last = step_ + 1 == cfg_.max_steps;
    const bool stop = any_rank(*dist_.comm, stop_request.requested());  // any rank's stops all
    const bool save = (cfg_.ckpt_every > 0 && (step_ + 1) % cfg_.ckpt_every == 0) || last || stop;
    const bool validate = (cfg_.val_every > 0 && (step_ + 1) % cfg_.val_every == 0) || last;
    // Report (and so wait for the device) only where the host needs the numbers: a step that
    // logs, one before a checkpoint or validation (a diverged run must stop before it saves), a
    // stop, or a full table of pending steps. Progress lines of the steps between are printed
    // when they are reported.
    const bool report = !device_decides_ || step_ % cfg_.log_every == 0 || last || save || validate ||
                        static_cast<int64_t>(pending_.size()) == pending_scalars_.size(0);
    if (report) read_pending();
    step_profiler.end(step_);
    if (report) report_pending();
    // The checkpoint first: a failing validation must not lose the step's work.
    if (save) checkpoint(step_ + 1);
    if (validate) validate_now();
    if (stop) {
      event("stop", "stopped by a signal; continue with --resume");
      if (dist_.root())
        fmt::print("\ngpt2 train: stopped by a signal after step {}; continue with --resume\n", step_ + 1);
      result_.interrupted = true;
      ++step_;
      break;
    }
  }
  result_.steps = step_;
  return result_;
}

TrainResult train(const TrainConfig& cfg) { return Trainer(cfg).run(); }

}  // namespace keel::app
