// The training loop. Read train() top to bottom: set-up (data, model, optimizer, resume), then
// one iteration per optimizer step (train_step), then logging, evaluation and checkpoints.
#include "apps/gpt2/infer/eval.h"
#include "apps/gpt2/train/trainer.h"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>

#include "apps/gpt2/run/checkpoint.h"
#include "apps/gpt2/run/metrics.h"
#include "apps/gpt2/train/distributed.h"
#include "apps/gpt2/train/memory_check.h"
#include "apps/gpt2/train/resume.h"
#include "apps/gpt2/train/step_graph.h"
#include "apps/gpt2/train/step_profiler.h"
#include "apps/gpt2/train/step_signals.h"
#include "apps/gpt2/train/stop_request.h"
#include "core/allocator.h"
#include "core/factory.h"
#include "core/io.h"
#include "data/loader.h"
#include "nn/hf.h"
#include "ops/arith.h"
#include "ops/shape.h"
#include "optim/data_parallel.h"
#include "optim/loss_scaler.h"
#include "optim/schedule.h"
#include "optim/step_readback.h"

namespace fs = std::filesystem;

namespace keel::app {

namespace {

struct StepResult {
  double loss = 0, grad_norm = 0;
  bool finite = true, skipped = false;
  StepStats stats;  // the attention statistics, merged over micro-batches and ranks
};

class Trainer {
 public:
  explicit Trainer(const TrainConfig& cfg) : cfg_(cfg) {}
  TrainResult run();

 private:
  void open_run();
  void write_run_files();
  void build_model();
  void build_optimizer();
  void resume_from(const fs::path& ckpt);
  void start_log();
  StepResult train_step(double lr);
  void micro_batch(const Tensor& batch, optim::StepReadback& rb, bool last);
  void log_step(const StepResult& s, double lr, double seconds);
  void validate_now();
  void checkpoint(int64_t next_step);
  nlohmann::json trainer_state(int64_t next_step) const;
  void event(const std::string& kind, const std::string& message, int64_t step = -1);

  TrainConfig cfg_;
  Device device_;
  DType dtype_ = DType::f32;
  fs::path run_dir_;
  nn::GPT2Config mcfg_;
  int64_t T_ = 0;
  std::unique_ptr<nn::GPT2> model_;
  std::unique_ptr<optim::DataParallelOptimizer> opt_;  // replicated AdamW, or ZeRO-1's sharded one
  std::unique_ptr<optim::LossScaler> scaler_;
  std::unique_ptr<StepGraph> graph_;  // --cuda-graph 1
  optim::CosineSchedule schedule_;
  std::shared_ptr<const data::TokenSplit> train_split_, val_split_;
  std::unique_ptr<data::TrainLoader> loader_;
  std::unique_ptr<MetricsLog> log_;  // rank 0 only: one writer of metrics, reports, checkpoints
  Distributed dist_;
  // With --resume: the checkpoint to start from, and the run as its config.json recorded it
  // before this launch rewrote it.
  std::optional<fs::path> latest_;
  SavedRun saved_;
  uint64_t dropout_seed_ = 0;  // the seed of the dropout stream that rank 0 of this run starts from
  int64_t step_ = 0;  // the next optimizer step to take
  bool finished_ = false;  // --resume of a run that already took its --max-steps
  double flops_per_token_ = 0, peak_ = 0, elapsed_ = 0;
  SpikeDetector spikes_{cfg_.spike_factor};  // on the losses of recent steps
  TrainResult result_;
  // The step's scalars on the device until the gradient norm is read (optim/step_readback.h):
  // the norm's slot, the loss, then max_logit and max_range (L * H each).
  int64_t heads() const { return mcfg_.n_layer * mcfg_.n_head; }
  static constexpr int64_t kLoss = 1, kMaxLogit = 2;
  int64_t max_range_slot() const { return kMaxLogit + heads(); }
  int64_t readback_slots() const { return kMaxLogit + 2 * heads(); }
};

// Device, ranks, data and loader, the model's configuration, and the run directory: a fresh run
// must not clobber one that has checkpoints, a resume must continue the very same run.
void Trainer::open_run() {
  cfg_.validate();
  device_ = resolve_device(cfg_.device);
  dtype_ = parse_dtype(cfg_.dtype);
  if (dtype_ != DType::f32 && device_.is_cpu())
    throw ConfigError("train", "--dtype " + cfg_.dtype + " needs a GPU: CPU kernels compute in f32",
                      "use --dtype f32 on the CPU");
  dist_ = start_distributed(cfg_, &device_);
  run_dir_ = cfg_.run_dir;
  if (cfg_.name.empty()) cfg_.name = cfg_.model.attention.value_or(cfg_.preset);

  data::DatasetMeta meta = data::read_dataset_meta(cfg_.data);
  if (!cfg_.init_from.empty()) {
    model_ = nn::load_pretrained(cfg_.init_from);
    mcfg_ = model_->config();
    if (mcfg_.vocab_size != int64_t(meta.vocab_size))
      throw ConfigError("train", fmt::format("--init-from {} has a vocabulary of {} but --data {} has {}",
                                             cfg_.init_from, mcfg_.vocab_size, cfg_.data, meta.vocab_size),
                        "prepare the data with the model's vocabulary (--vocab)");
  } else {
    mcfg_ = model_config(cfg_, meta.vocab_size);
  }
  check_model_fits(mcfg_, device_);
  T_ = cfg_.seq_len.value_or(mcfg_.block_size);
  if (T_ > mcfg_.block_size)
    throw ConfigError("train", fmt::format("--seq-len {} is longer than the model's context {}", T_, mcfg_.block_size));
  train_split_ = data::TokenSplit::open(cfg_.data, "train", meta.vocab_size);
  val_split_ = data::TokenSplit::open(cfg_.data, "val", meta.vocab_size);
  // Caught now, not after the last step (which would end the run before its final checkpoint).
  if (val_split_->size() < 2)
    throw ConfigError("train", "--data " + cfg_.data + ": the dataset has no validation split",
                      "prepare it again with --val-fraction above 0 (e.g. 0.01)");
  loader_ = std::make_unique<data::TrainLoader>(
      train_split_, data::LoaderOptions{cfg_.batch_size, T_, cfg_.seed, dist_.rank(), dist_.world()});

  latest_ = latest_checkpoint(run_dir_);
  if (cfg_.resume) {
    if (!latest_)
      throw ConfigError("train", "--resume: " + run_dir_.string() + " has no checkpoint to resume from",
                        "start it without --resume");
    saved_ = read_saved_run(run_dir_);
    // Another world size keeps the global batch: B stays, the accumulation makes up the rest.
    cfg_.grad_accum = grad_accum_for_resume(saved_.cfg, saved_.world, cfg_, dist_.world());
    cfg_.validate();  // the accumulation that makes up the global batch must be one a fresh run could ask for
    check_same_run(saved_, cfg_);
  } else if (latest_) {
    throw ConfigError("train", run_dir_.string() + " already holds a run (checkpoints in it)",
                      "continue it with --resume, or choose another --run-dir");
  }
  check_same_on_all_ranks(*dist_.comm, "configuration", launch_identity_of(cfg_).dump());
  if (cfg_.cuda_graph) check_graph_fits(cfg_, device_, dist_.world(), mcfg_.dropout);
}

// The run's own files, written only once everything they describe has loaded and agrees (the
// model, and on --resume the checkpoint, optimizer and trainer state): a launch that fails
// before this point, for any reason, leaves every file of the run as it was.
void Trainer::write_run_files() {
  if (dist_.root()) {
    io::create_directories(run_dir_, "train");
    nlohmann::json resolved{{"name", cfg_.name},
                            {"train", cfg_.to_json()},
                            {"model", nlohmann::json::parse(mcfg_.to_json())},
                            {"distributed", dist_.describe()}};
    resolved["distributed"]["zero"] = cfg_.zero;
    resolved["distributed"]["reduce_dtype"] = cfg_.reduce_dtype;
    io::write_file_atomic(run_dir_ / "config.json", resolved.dump(2) + "\n", "train");
    remove_stale_temporaries(run_dir_);  // of runs killed while writing a checkpoint
  }
}

// The weights on the run's device and dtype, identical on every rank; each rank's dropout stream.
void Trainer::build_model() {
  if (!model_) model_ = std::make_unique<nn::GPT2>(mcfg_, cfg_.seed);
  model_->to(device_);
  model_->to(dtype_);
  model_->train();
  // Every rank starts from rank 0's weights (before AdamW copies them into f32 masters).
  broadcast_parameters(*dist_.comm, model_->parameters());
  Generator& dropout_rng = model_->dropout_generator();
  dropout_seed_ = dropout_rng.seed();
  dropout_rng.set_state(dropout_seed_for_rank(dropout_rng.seed(), dist_.rank()), dropout_rng.offset());
}

void Trainer::build_optimizer() {
  const optim::AdamWOptions adamw{.lr = cfg_.lr, .beta1 = cfg_.beta1, .beta2 = cfg_.beta2,
                                  .weight_decay = cfg_.weight_decay};
  opt_ = optim::make_data_parallel_adamw(dist_.comm, model_->named_parameters(), adamw, cfg_.zero,
                                         parse_dtype(cfg_.reduce_dtype), size_t(cfg_.bucket_mb * (1 << 20)));
  scaler_ = std::make_unique<optim::LossScaler>(dtype_);
  if (cfg_.cuda_graph) graph_ = std::make_unique<StepGraph>(model_->parameters(), device_, readback_slots());
  schedule_ = {cfg_.lr, cfg_.min_lr, std::min(cfg_.warmup_steps, cfg_.max_steps), cfg_.max_steps};
  schedule_.validate();
  flops_per_token_ = train_flops_per_token(mcfg_, T_);
  peak_ = peak_flops(device_, dtype_);
}

void Trainer::start_log() {
  if (!dist_.root()) return;
  // Records carry the 1-based number of the step they belong to (as the progress line shows),
  // so after step_ completed steps the log keeps exactly the records of steps <= step_.
  log_ = std::make_unique<MetricsLog>(run_dir_, cfg_.resume ? std::optional<int64_t>(step_) : std::nullopt);
  if (cfg_.resume) event("resume", "resumed from " + latest_->string(), step_);
  if (dist_.world() > 1)
    fmt::print("gpt2 train: data parallel, backend {}, world {} ({}), global batch {} x {} sequences\n",
               dist_.comm->backend(), dist_.world(), dist_.env.launcher, dist_.world() * cfg_.batch_size,
               cfg_.grad_accum);
  if (const std::string line = opt_->summary(); !line.empty()) fmt::print("gpt2 train: {}\n", line);
  fmt::print("gpt2 train: {} on {} ({}), {} parameters, B={} T={} accum={}, {} steps -> {}\n", mcfg_.summary(),
             device_.str(), cfg_.dtype, model_->num_parameters(), cfg_.batch_size, T_, cfg_.grad_accum,
             cfg_.max_steps, run_dir_.string());
}

nlohmann::json Trainer::trainer_state(int64_t next_step) const {
  Generator& g = model_->dropout_generator();
  return {{"step", next_step},
          {"recent_losses", spikes_.recent()},
          {"loader", nlohmann::json::parse(loader_->state().to_json())},
          {"dropout_rng", {{"seed", g.seed()}, {"offset", g.offset()}}},
          {"elapsed_s", elapsed_},
          {"identity", identity_of(cfg_)}};
}

void Trainer::resume_from(const fs::path& ckpt) {
  Checkpoint c = load_checkpoint(ckpt);
  data::LoaderState saved =
      checked_loader_state(c, saved_, {T_, train_split_->size(), cfg_.data, dropout_seed_});
  try {
    model_->load_state(c.model);
  } catch (const Error& e) {  // name the file: the tensor's name alone does not say which
    throw IoError("train", (ckpt / "model.safetensors").string() + ": " + e.message(), e.hint());
  }
  NamedTensors opt_state, scaler_state;
  // optimizer.safetensors holds AdamW's state and, under "scaler.", the loss scaler's.
  for (auto& [name, t] : c.optimizer) {
    if (name.rfind("scaler.", 0) == 0)
      scaler_state.emplace_back(name.substr(7), t);
    else
      opt_state.emplace_back(name, t);
  }
  // Named as the model's errors are: "state entry 'x.m' is missing" alone does not say which file.
  const std::string optimizer_file = (ckpt / "optimizer.safetensors").string();
  try {
    opt_->load_state(opt_state);
  } catch (const Error& e) {
    throw IoError("train", optimizer_file + ": " + e.message(), e.hint());
  }
  try {
    scaler_->load_state(scaler_state);
  } catch (const Error& e) {
    throw IoError("train", optimizer_file + ": loss scaler (entries \"scaler.*\"): " + e.message(), e.hint());
  }
  try {
    step_ = c.trainer.at("step").get<int64_t>();
    // The loader position in global sequences, whatever world size and batch saved it.
    data::LoaderState now = loader_->state();
    const uint64_t sequences = saved.step * uint64_t(saved.world_size * saved.batch_size);
    const uint64_t per_step = uint64_t(now.world_size * now.batch_size);
    if (saved.world_size != now.world_size || saved.batch_size != now.batch_size) {
      if (sequences % per_step != 0)
        throw ConfigError("train", fmt::format("--resume: the run read {} sequences, not a whole number of this "
                                               "launch's {} ranks x batch {}", sequences, now.world_size,
                                               now.batch_size));
      saved.step = sequences / per_step;
      saved.world_size = now.world_size;
      saved.batch_size = now.batch_size;
    }
    loader_->restore(saved);
    // The checkpoint holds rank 0's generator; every rank derives its own stream from it.
    model_->dropout_generator().set_state(
        dropout_seed_for_rank(c.trainer.at("dropout_rng").at("seed").get<uint64_t>(), dist_.rank()),
        c.trainer.at("dropout_rng").at("offset").get<uint64_t>());
    elapsed_ = c.trainer.value("elapsed_s", 0.0);
    spikes_.restore(c.trainer.value("recent_losses", std::vector<double>{}));
  } catch (const nlohmann::json::exception& e) {
    throw IoError("train", (ckpt / "trainer.json").string() + ": " + e.what(), "the checkpoint is corrupt");
  }
  // A scheduler re-queues a job killed after its last checkpoint with the same command: there
  // is nothing left to do, and that is success, not an error.
  finished_ = step_ >= cfg_.max_steps;
}

// Saves the state after step_ has been taken; next_step is where a resume starts.
void Trainer::checkpoint(int64_t next_step) {
  check_parameters_identical(*dist_.comm, model_->parameters(), next_step);
  // With ZeRO every rank takes part in gathering the whole state; rank 0 writes it.
  NamedTensors opt_state = opt_->gather_state(dist_.root());
  if (!dist_.root()) return;
  for (auto& [name, t] : scaler_->state()) opt_state.emplace_back("scaler." + name, t);
  fs::path dir =
      save_checkpoint(run_dir_, next_step, model_->state(), opt_state, trainer_state(next_step), cfg_.keep_checkpoints);
  event("checkpoint", dir.string());
}

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

// One micro-batch: batch (2, B, T), ids then targets (placement.h), on the run's device.
void Trainer::micro_batch(const Tensor& batch, optim::StepReadback& rb, bool last) {
  const auto [ids, targets] = split_batch(batch);
  nn::GPT2Output out = model_->forward(ids, targets, nn::StatsOn::device);
  // Scaling each loss by 1/accum makes the sum of the micro-batches' gradients the gradient of
  // the mean loss (and by the loss scale for f16, in f32). During the last backward, finished
  // gradients start their reduction over the ranks.
  {
    auto hook = last ? opt_->backward_hook() : nullptr;
    scaler_->scale_loss(out.loss, 1.0 / double(cfg_.grad_accum)).backward();
  }
  // The mean loss as `loss += item / accum` in f64, the statistics merged NaN-first (MaxLogit).
  rb.add_quotient(kLoss, out.loss, double(cfg_.grad_accum));
  rb.merge_max(kMaxLogit, out.max_logit);
  rb.merge_max(max_range_slot(), out.max_range);
}

StepResult Trainer::train_step(double lr) {
  StepResult s;
  s.stats.max_logit = MaxLogit(mcfg_.n_layer, mcfg_.n_head);
  s.stats.max_range = MaxLogit(mcfg_.n_layer, mcfg_.n_head);
  // The step's scalars stay on the device until the gradient norm is read: one host wait per step.
  std::optional<optim::StepReadback> eager;
  optim::StepReadback& readback = graph_ ? graph_->readback() : eager.emplace(device_, readback_slots());
  opt_->zero_grad();  // bf16/f16 parameters get f32 gradient buffers: the micro-batches add up in f32
  if (graph_) {
    readback.reset();
    // The step's micro-batches as one (2 * accum, B, T) tensor: one copy into the graph's buffer,
    // and the replay runs them all, each on its slice, as the loop below does.
    const Tensor batches = [&] {
      profiler::Scope prof("batch_to_device", profiler::Phase::host);
      std::vector<Tensor> micro;
      for (int64_t i = 0; i < cfg_.grad_accum; ++i) micro.push_back(batch_tensor(loader_->next(), Device::cpu()));
      return micro.size() == 1 ? micro[0] : concat(micro, 0);
    }();
    graph_->run(batches, scaler_->scale(), [&](const Tensor& b, optim::StepReadback& rb) {
      // One rank (check_graph_fits), so the backward hook would have nothing to reduce.
      for (int64_t i = 0; i < cfg_.grad_accum; ++i) micro_batch(slice(b, 0, 2 * i, 2 * i + 2), rb, false);
    });
  } else {
    for (int64_t micro = 0; micro < cfg_.grad_accum; ++micro) {
      const Tensor batch = [&] {
        profiler::Scope prof("batch_to_device", profiler::Phase::host);
        return batch_tensor(loader_->next(), device_);
      }();
      micro_batch(batch, readback, micro + 1 == cfg_.grad_accum);
    }
  }
  const profiler::PhaseGuard optimizer_phase(profiler::Phase::optimizer);
  s.grad_norm = opt_->finish_gradients(*scaler_, cfg_.grad_clip, &readback);
  {
    const std::vector<double>& host = readback.read();  // read by finish_gradients: no second copy
    s.loss = host[kLoss];
    auto stat = [&](int64_t first) { return std::vector<float>(host.begin() + first, host.begin() + first + heads()); };
    s.stats.max_logit.merge(stat(kMaxLogit));
    s.stats.max_range.merge(stat(max_range_slot()));
  }
  s.loss = mean_over_ranks(*dist_.comm, s.loss);
  max_over_ranks(*dist_.comm, s.stats.max_logit);
  max_over_ranks(*dist_.comm, s.stats.max_range);
  const bool grads_finite = std::isfinite(s.grad_norm);
  s.finite = grads_finite && std::isfinite(s.loss);
  if (s.finite) opt_->step(lr);
  s.skipped = !s.finite;  // with f16 an overflow is routine: the scaler backs off and we go on
  scaler_->update(!grads_finite);
  return s;
}

void Trainer::log_step(const StepResult& s, double lr, double seconds) {
  if (!dist_.root()) return;
  const double tokens = double(cfg_.batch_size * T_ * cfg_.grad_accum * dist_.world());
  MetricsRecord r;
  r.step = step_ + 1;
  r.loss = s.loss;
  r.lr = lr;
  r.grad_norm = s.grad_norm;
  r.max_logit = s.stats.max_logit.rows();
  r.max_range = s.stats.max_range.rows();
  r.tokens_per_s = tokens / seconds;
  if (peak_ > 0) r.mfu = flops_per_token_ * r.tokens_per_s / peak_;
  r.mem_bytes = int64_t(memory_stats(device_).peak);
  r.loss_scale = scaler_->scale();
  r.skipped = s.skipped;
  r.elapsed_s = elapsed_;
  if (step_ % cfg_.log_every == 0 || step_ + 1 == cfg_.max_steps) log_->write(r);

  // A spike: the loss far above its recent mean (the instability this project is about).
  if (auto spike = spikes_.observe(s.loss))
    event("spike", *spike + "; hottest attention: " + s.stats.hottest_head(cfg_.spike_signal));

  // Progress: redrawn in place on a terminal, about 20 plain lines otherwise.
  const double eta = seconds * double(cfg_.max_steps - step_ - 1);
  const bool tty = isatty(STDOUT_FILENO);
  const int64_t every = std::max<int64_t>(1, cfg_.max_steps / 20);
  if (tty || step_ % every == 0 || step_ + 1 == cfg_.max_steps) {
    const double top = s.stats.signal(cfg_.spike_signal).top();
    fmt::print("{}step {:>6}/{} | loss {:.4f} | lr {:.2e} | grad {:.3f} | {} {:6.2f} | {:.0f} tok/s | ETA {:.0f}s{}",
               tty ? "\r" : "", step_ + 1, cfg_.max_steps, s.loss, lr, s.grad_norm,
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
    if (dist_.root())
      fmt::print("gpt2 train: {} already finished: step {} of --max-steps {} (checkpoint {}, metrics {}); "
                 "nothing to do\n",
                 run_dir_.string(), step_, cfg_.max_steps, latest_->string(), (run_dir_ / "metrics.jsonl").string());
    result_.steps = step_;
    result_.already_finished = true;
    return result_;
  }
  write_run_files();
  start_log();
  StepProfiler step_profiler(cfg_, device_, run_dir_, dist_.root(), step_);

  for (; step_ < cfg_.max_steps; ++step_) {
    const double lr = schedule_.lr_at(step_);
    auto t0 = std::chrono::steady_clock::now();
    step_profiler.begin(step_);
    StepResult s = train_step(lr);
    step_profiler.end(step_);
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    elapsed_ += seconds;
    result_.final_loss = s.loss;
    log_step(s, lr, seconds);
    if (!s.finite && !scaler_->enabled()) {
      std::string what = fmt::format("non-finite {} at step {}; hottest attention: {}",
                                     std::isfinite(s.loss) ? "gradient" : "loss", step_ + 1,
                                     s.stats.hottest_head(cfg_.spike_signal));
      event("nonfinite", what);
      if (cfg_.on_nonfinite == "stop")
        throw ValueError("train", "training diverged: " + what,
                         "lower --lr, clip harder (--grad-clip), or try --attention ls; "
                         "--on-nonfinite skip skips such steps instead");
    }
    const bool last = step_ + 1 == cfg_.max_steps;
    const bool stop = any_rank(*dist_.comm, stop_request.requested());  // any rank's stops all
    // The checkpoint first: a failing validation must not lose the step's work.
    if ((cfg_.ckpt_every > 0 && (step_ + 1) % cfg_.ckpt_every == 0) || last || stop) checkpoint(step_ + 1);
    if ((cfg_.val_every > 0 && (step_ + 1) % cfg_.val_every == 0) || last) validate_now();
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

}  // namespace

TrainResult train(const TrainConfig& cfg) { return Trainer(cfg).run(); }

}  // namespace keel::app
