// Everything a training run is made of, in one struct: the model, the data, the optimizer,
// the precision and the run's bookkeeping. `gpt2 train` fills it from an optional JSON config
// file and then from flags (flags win), validates it, and writes the resolved result to
// RUN_DIR/config.json, so a run directory always says exactly how it was made.
//
// Defaults that the model or the optimizer also has come from there (nn::GPT2Config,
// optim/defaults.h), so each is written once; tests/train/test_typed_config.cpp checks
// that they agree.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "apps/gpt2/run/seed.h"
#include "nn/config.h"
#include "optim/defaults.h"

namespace keel::app {

// What a run changes in its preset's model. An override that is not given (std::nullopt) keeps
// the preset's value; softcap and dropout always apply, with nn's defaults.
struct ModelOverrides {
  std::optional<std::string> attention;  // a name of nn::kAttentionKinds
  std::optional<int64_t> n_layer, n_head, n_embd;
  std::optional<int64_t> ls_local_heads, ls_window;  // LS-attention's shape
  std::optional<bool> bias, tie_embeddings;
  double softcap = nn::GPT2Config{}.softcap;
  double dropout = nn::GPT2Config{}.dropout;

  // The given overrides written into m (a preset); ConfigError for an unknown attention name.
  void apply_to(nn::GPT2Config& m) const;
  // Whether any override of the model's shape or attention variant is given (softcap and
  // dropout are not shape: they apply to a model loaded with --init-from too).
  bool changes_architecture() const;
};

struct TrainConfig {
  // --- model (a preset, then overrides) ---
  std::string preset = "tiny";  // a name of nn::GPT2Config::preset_names()
  ModelOverrides model;
  std::string init_from;        // a Hugging Face GPT-2 directory to start from

  // --- data ---
  std::string data;  // a directory written by `gpt2 prepare`
  int64_t batch_size = 8, grad_accum = 1;
  std::optional<int64_t> seq_len;  // T; not given = the model's context

  // --- optimisation ---
  int64_t max_steps = 200, warmup_steps = 20;  // a short demo run (the paper's: optim/defaults.h)
  double lr = optim::kDefaultLr, min_lr = optim::kDefaultMinLr, weight_decay = optim::kDefaultWeightDecay;
  double beta1 = optim::kDefaultBeta1, beta2 = optim::kDefaultBeta2, grad_clip = optim::kDefaultGradClip;
  // The z-loss: the training loss adds z_loss * (log Z)^2 per target (ops/cross_entropy.h; 0 = off).
  double z_loss = 0;

  // --- precision and device ---
  std::string dtype = "f32";    // f32 | bf16 | f16
  std::string device = "auto";  // auto | cpu | cuda | cuda:N

  // --- the run ---
  std::string run_dir;
  std::string name;  // a label for reports ("" = the attention variant)
  Seed seed = 1337;
  int64_t log_every = 1, val_every = 50, val_batches = 20, ckpt_every = 100, keep_checkpoints = 2;
  std::string on_nonfinite = "stop";  // stop | skip
  double spike_factor = 2.0;          // log a spike when loss > factor * recent mean
  std::string spike_signal = "max_logit";  // the statistic a spike names its hottest head by: max_logit | max_range
  bool resume = false;
  // --- profiling (docs/training.md, "Profiling a step"): after profile_warmup steps, record
  // `profile` steps per op; predicted times on the emulated GPU are for profile_gpu.
  int64_t profile = 0, profile_warmup = 1;
  std::string profile_gpu = "H100";
  // 1: replay each step's forward and backward as one CUDA graph (apps/gpt2/train/step_graph.h;
  // one GPU, no dropout, no profile). Changes no result, only the launch cost.
  int64_t cuda_graph = 0;
  // The bf16/f16 attention kernels on a GPU (ops/cuda/attention.h): mma, the mma.sync kernels of
  // every GPU; sm90, Hopper's warpgroup kernels on an H100 or H200 (other GPUs keep mma); "" leaves
  // KEEL_ATTENTION's choice, else mma. The two agree to rounding, not bit for bit.
  std::string attention_kernel;

  // --- data parallelism (docs/distributed.md) ---
  std::string dist_backend = "auto";  // auto | local | mpi | nccl
  double bucket_mb = double(optim::kDefaultBucketBytes >> 20);  // gradient all-reduce bucket size
  int64_t nproc = 0;                  // > 0: start this many local ranks (under mpirun)
  int64_t zero = 0;                   // ZeRO stage: 0 (replicated optimizer state) or 1 (sharded)
  std::string reduce_dtype = "f32";   // dtype gradients travel in: f32 | bf16

  // --- reproducibility ---
  // 0: the attention backward on a GPU adds its dQ shares in any order, faster, but its bits (and
  // so the run's) may differ between runs and an interrupted run no longer resumes bit-exactly
  // (core/determinism.h). 1, the default: every result is the same bits on every run.
  int64_t deterministic = 1;

  // Every field by its name; an override that is not given is null.
  nlohmann::json to_json() const;
  // Fields present in j replace this config's; unknown keys are a ConfigError (typos). null
  // leaves an override not given, as do the values files of older keel versions used for it
  // (0 for counts and ls_window, -1 for ls_local_heads, bias and tie_embeddings, "" for attention).
  void merge_json(const nlohmann::json& j, const std::string& source);
  // ConfigError naming the field for anything that cannot work.
  void validate() const;
};

// The fields whose change makes a resumed run a different run (model, data, optimiser,
// precision, seed). Resuming with any of them changed is refused. The knobs of an attention
// variant (softcap, ls_*) count only for a run of that variant.
nlohmann::json identity_of(const TrainConfig& cfg);
// identity_of plus what every rank of one launch must agree on so that they issue the same
// collectives (--zero, --reduce-dtype, --bucket-mb), which a resume may change.
nlohmann::json launch_identity_of(const TrainConfig& cfg);
// "softcap: 30.0 saved, 50.0 now; seed: ...": the keys whose values differ between two identities,
// each value followed by the label of its side.
std::string differing_fields(const nlohmann::json& saved, const nlohmann::json& now,
                             const std::string& saved_label = "saved", const std::string& now_label = "now");

// The model a TrainConfig describes for a dataset with `vocab_size` tokens: its preset, the
// run's sequence length as the context, the overrides; validated (ConfigError).
nn::GPT2Config model_config(const TrainConfig& cfg, uint32_t vocab_size);

}  // namespace keel::app
