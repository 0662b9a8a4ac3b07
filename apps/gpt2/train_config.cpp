#include "apps/gpt2/train_config.h"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <set>

#include "core/error.h"

namespace keel::app {

namespace {
// One table drives JSON reading, writing and flag registration, so a field cannot be added to
// one and forgotten in another.
template <typename F>
void for_each_field(TrainConfig& c, F&& f) {
  f("preset", c.preset, "model preset: tiny | paper | gpt2-124m");
  f("attention", c.attention, "attention: mhsa | ls | qk_norm | softcap (default: the preset's)");
  f("n_layer", c.n_layer, "layers (0 = the preset's)");
  f("n_head", c.n_head, "heads per layer (0 = the preset's)");
  f("n_embd", c.n_embd, "model width C (0 = the preset's)");
  f("ls_local_heads", c.ls_local_heads, "LS-attention: local heads per layer, placed first (-1 = the preset's)");
  f("ls_window", c.ls_window, "LS-attention: window w of the local heads (0 = the preset's)");
  f("bias", c.bias, "biases in Linear and LayerNorm: 1 or 0 (-1 = the preset's)");
  f("tie_embeddings", c.tie_embeddings, "lm_head shares the token embedding: 1 or 0 (-1 = the preset's)");
  f("softcap", c.softcap, "softcap attention: the cap c in c * tanh(logit / c)");
  f("dropout", c.dropout, "dropout probability");
  f("init_from", c.init_from, "start from a Hugging Face GPT-2 directory (config.json + model.safetensors)");
  f("data", c.data, "dataset directory written by `gpt2 prepare`");
  f("batch_size", c.batch_size, "sequences per micro-batch B");
  f("seq_len", c.seq_len, "sequence length T (0 = the model's context length)");
  f("grad_accum", c.grad_accum, "micro-batches per optimizer step");
  f("max_steps", c.max_steps, "optimizer steps");
  f("warmup_steps", c.warmup_steps, "linear warmup steps");
  f("lr", c.lr, "peak learning rate");
  f("min_lr", c.min_lr, "learning rate at the end of the cosine decay");
  f("weight_decay", c.weight_decay, "AdamW decoupled weight decay (matrices only)");
  f("beta1", c.beta1, "AdamW beta1");
  f("beta2", c.beta2, "AdamW beta2");
  f("grad_clip", c.grad_clip, "clip the global gradient norm to this (0 = off)");
  f("dtype", c.dtype, "compute dtype: f32 | bf16 | f16 (bf16/f16 need CUDA)");
  f("device", c.device, "auto | cpu | cuda | cuda:N");
  f("run_dir", c.run_dir, "run directory (config, metrics, checkpoints)");
  f("name", c.name, "label of the run in reports (default: the attention variant)");
  f("seed", c.seed, "seed of initialisation, data order and dropout");
  f("log_every", c.log_every, "write a metrics line every N steps");
  f("val_every", c.val_every, "evaluate on the validation split every N steps (0 = only at the end)");
  f("val_batches", c.val_batches, "validation batches per evaluation (0 = the whole split)");
  f("ckpt_every", c.ckpt_every, "checkpoint every N steps (0 = only at the end)");
  f("keep_checkpoints", c.keep_checkpoints, "how many checkpoints to keep");
  f("on_nonfinite", c.on_nonfinite, "on a NaN/inf loss or gradient: stop | skip");
  f("spike_factor", c.spike_factor, "log a loss spike when loss > factor * recent mean");
  f("dist_backend", c.dist_backend, "data-parallel backend: auto | local | mpi | nccl (auto: mpi on CPUs, nccl on GPUs)");
  f("bucket_mb", c.bucket_mb, "data parallelism: gradient all-reduce bucket size in MB");
  f("nproc", c.nproc, "start N local ranks of this command under mpirun (data parallelism on one machine)");
}
}  // namespace

nlohmann::json TrainConfig::to_json() const {
  nlohmann::json j;
  TrainConfig copy = *this;
  for_each_field(copy, [&](const char* key, auto& value, const char*) { j[key] = value; });
  return j;
}

void TrainConfig::merge_json(const nlohmann::json& j, const std::string& source) {
  if (!j.is_object()) throw ConfigError("config", source + ": expected a JSON object");
  std::set<std::string> known;
  for_each_field(*this, [&](const char* key, auto& value, const char*) {
    known.insert(key);
    if (!j.contains(key)) return;
    try {
      value = j.at(key).get<std::decay_t<decltype(value)>>();
    } catch (const nlohmann::json::exception&) {
      throw ConfigError("config", fmt::format("{}: field '{}' has the wrong type ({})", source, key, j.at(key).dump()));
    }
  });
  for (const auto& [key, _] : j.items())
    if (!known.count(key) && key != "resume")
      throw ConfigError("config", fmt::format("{}: unknown field '{}'", source, key),
                        "see `gpt2 train --help` for the fields");
}

void add_train_flags(CLI::App& cmd, TrainConfig* cfg, std::string* config_file) {
  cmd.add_option("--config", *config_file, "JSON file with any of the fields below (flags override it)");
  for_each_field(*cfg, [&](const char* key, auto& value, const char* help) {
    std::string flag = std::string("--") + key;
    for (char& ch : flag)
      if (ch == '_') ch = '-';
    cmd.add_option(flag, value, help);
  });
  cmd.add_flag("--resume", cfg->resume, "continue the run in --run-dir from its latest checkpoint");
}

void TrainConfig::validate() const {
  auto need = [](bool ok, const std::string& field, const std::string& what, const std::string& hint = {}) {
    if (!ok) throw ConfigError("train", fmt::format("--{}: {}", field, what), hint);
  };
  need(preset == "tiny" || preset == "paper" || preset == "gpt2-124m", "preset",
       "unknown preset '" + preset + "'", "use tiny, paper or gpt2-124m");
  need(attention.empty() || attention == "mhsa" || attention == "ls" || attention == "qk_norm" ||
           attention == "softcap",
       "attention", "unknown variant '" + attention + "'", "use mhsa, ls, qk_norm or softcap");
  need(n_layer >= 0 && n_head >= 0 && n_embd >= 0, "n-layer", "layer, head and width counts cannot be negative");
  need(bias >= -1 && bias <= 1 && tie_embeddings >= -1 && tie_embeddings <= 1, "bias",
       "--bias and --tie-embeddings take 1, 0 or -1 (the preset's)");
  need(batch_size >= 1, "batch-size", "must be at least 1");
  need(seq_len >= 0, "seq-len", "cannot be negative");
  need(grad_accum >= 1, "grad-accum", "must be at least 1");
  need(max_steps >= 1, "max-steps", "must be at least 1");
  need(warmup_steps >= 0, "warmup-steps", "cannot be negative");
  need(std::isfinite(lr) && lr >= 0, "lr", "must be a non-negative number");
  need(std::isfinite(min_lr) && min_lr >= 0 && min_lr <= lr, "min-lr", "must be in [0, lr]");
  need(weight_decay >= 0, "weight-decay", "cannot be negative");
  need(beta1 >= 0 && beta1 < 1 && beta2 >= 0 && beta2 < 1, "beta1", "betas must be in [0, 1)");
  need(grad_clip >= 0, "grad-clip", "cannot be negative (0 turns clipping off)");
  need(dropout >= 0 && dropout < 1, "dropout", "must be in [0, 1)");
  need(softcap > 0, "softcap", "the cap must be positive");
  need(dtype == "f32" || dtype == "bf16" || dtype == "f16", "dtype", "unknown dtype '" + dtype + "'",
       "use f32, bf16 or f16");
  need(on_nonfinite == "stop" || on_nonfinite == "skip", "on-nonfinite", "use stop or skip");
  need(log_every >= 1, "log-every", "must be at least 1");
  need(val_every >= 0 && val_batches >= 0 && ckpt_every >= 0, "val-every", "cannot be negative");
  need(keep_checkpoints >= 1, "keep-checkpoints", "must be at least 1");
  need(spike_factor > 1, "spike-factor", "must be above 1");
  need(dist_backend == "auto" || dist_backend == "local" || dist_backend == "mpi" || dist_backend == "nccl",
       "dist-backend", "unknown backend '" + dist_backend + "'", "use auto, local, mpi or nccl");
  need(bucket_mb > 0, "bucket-mb", "must be positive");
  need(nproc >= 0, "nproc", "cannot be negative");
  need(!run_dir.empty(), "run-dir", "a run directory is required", "e.g. --run-dir runs/mhsa");
  need(!data.empty(), "data", "a dataset directory is required", "make one with `gpt2 prepare`");
}

nlohmann::json identity_of(const TrainConfig& cfg) {
  nlohmann::json j = cfg.to_json();
  // What may change between an interrupted run and its resumption without changing the run.
  for (const char* key : {"run_dir", "name", "log_every", "val_every", "val_batches", "ckpt_every",
                          "keep_checkpoints", "on_nonfinite", "spike_factor", "device", "data", "dist_backend",
                          "bucket_mb", "nproc"})
    j.erase(key);
  return j;
}

}  // namespace keel::app
