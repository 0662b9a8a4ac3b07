// Setting up, saving and restoring a training run (the Trainer of trainer_impl.h): the run
// directory and what must agree before it is written to, the model on its device and dtype, the
// optimizer and schedule, the log, checkpoints, and a resume from one. The loop is trainer.cpp.
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

#include "apps/gpt2/run/checkpoint.h"
#include "apps/gpt2/run/placement.h"
#include "apps/gpt2/train/memory_check.h"
#include "apps/gpt2/train/mfu.h"
#include "apps/gpt2/train/trainer_impl.h"
#include "core/factory.h"
#include "core/io.h"
#include "nn/hf.h"

namespace fs = std::filesystem;

namespace keel::app {

// Device, ranks, data and loader, the model's configuration, and the run directory: a fresh run
// must not clobber one that has checkpoints, a resume must continue the very same run.
void Trainer::open_run() {
  cfg_.validate();
  device_ = resolve_device(cfg_.device);
  dtype_ = parse_dtype(cfg_.dtype);
  if (dtype_ != DType::f32 && device_.is_cpu())
    throw ConfigError("train", "--dtype " + cfg_.dtype + " needs a GPU: CPU kernels compute in f32",
                      "use --dtype f32 on the CPU");
  if (!cfg_.attention_kernel.empty()) {
    if (!device_.is_cuda())
      throw ConfigError("train",
                        "--attention-kernel " + cfg_.attention_kernel + " picks GPU kernels; this run is on " +
                            device_.str(),
                        "drop --attention-kernel on the CPU");
    attention_kernel_.emplace(cfg_.attention_kernel == "sm90" ? cuda::AttentionKernel::sm90
                                                              : cuda::AttentionKernel::mma);
  }
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
  scalars_ = StepScalars{mcfg_.n_layer, mcfg_.n_head};
  if (cfg_.cuda_graph) graph_ = std::make_unique<StepGraph>(model_->parameters(), device_, scalars_.size());
  // One process: the device decides each step, and steps queue between reports (trainer.cpp).
  device_decides_ = opt_->decides_on_device();
  if (device_decides_) scaler_->keep_on_device(device_);  // f16's scale, read and updated there
  const int64_t rows = device_decides_ ? std::min<int64_t>(cfg_.log_every, kMaxPending) : 1;
  pending_scalars_ = zeros({rows, scalars_.size()}, {DType::f64, device_});
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

}  // namespace keel::app
