// The table of TrainConfig's fields: each field's JSON key, its member and its help text, in one
// place, so that reading and writing config.json (train_config.cpp) and registering the flags
// (apps/gpt2/cli/train_flags.cpp) cannot disagree about a field.
#pragma once

#include <optional>
#include <string>
#include <type_traits>

#include "apps/gpt2/train/train_config.h"
#include "nn/config.h"

namespace keel::app {

// std::optional<T>: an override that may be not given.
template <typename T>
struct is_optional : std::false_type {};
template <typename T>
struct is_optional<std::optional<T>> : std::true_type {};

// nn's preset names joined for help and hints.
inline std::string preset_names(const std::string& separator) {
  std::string out;
  for (const std::string& p : nn::GPT2Config::preset_names()) out += (out.empty() ? "" : separator) + p;
  return out;
}

// One table drives JSON reading, writing and flag registration, so a field cannot be added to
// one and forgotten in another.
// f(key, member, help) for every field, in the order of `gpt2 train --help`.
template <typename F>
void for_each_field(TrainConfig& c, F&& f) {
  f("preset", c.preset, "model preset: " + preset_names(" | "));
  f("attention", c.model.attention, "attention: " + nn::attention_kind_names(" | ") + " (default: the preset's)");
  f("n_layer", c.model.n_layer, "layers (default: the preset's)");
  f("n_head", c.model.n_head, "heads per layer (default: the preset's)");
  f("n_embd", c.model.n_embd, "model width C (default: the preset's)");
  f("ls_local_heads", c.model.ls_local_heads, "LS-attention: local heads per layer, placed first (default: the preset's)");
  f("ls_window", c.model.ls_window, "LS-attention: window w of the local heads (default: the preset's)");
  f("bias", c.model.bias, "biases in Linear and LayerNorm: 1 or 0 (default: the preset's)");
  f("tie_embeddings", c.model.tie_embeddings, "lm_head shares the token embedding: 1 or 0 (default: the preset's)");
  f("softcap", c.model.softcap, "softcap attention: the cap c in c * tanh(logit / c)");
  f("dropout", c.model.dropout, "dropout probability");
  f("init_from", c.init_from, "start from a Hugging Face GPT-2 directory (config.json + model.safetensors)");
  f("data", c.data, "dataset directory written by `gpt2 prepare`");
  f("batch_size", c.batch_size, "sequences per micro-batch B");
  f("seq_len", c.seq_len, "sequence length T (default: the model's context length)");
  f("grad_accum", c.grad_accum, "micro-batches per optimizer step");
  f("max_steps", c.max_steps, "optimizer steps");
  f("warmup_steps", c.warmup_steps, "linear warmup steps");
  f("lr", c.lr, "peak learning rate");
  f("min_lr", c.min_lr, "learning rate at the end of the cosine decay");
  f("weight_decay", c.weight_decay, "AdamW decoupled weight decay (matrices only)");
  f("beta1", c.beta1, "AdamW beta1");
  f("beta2", c.beta2, "AdamW beta2");
  f("grad_clip", c.grad_clip, "clip the global gradient norm to this (0 = off)");
  f("z_loss", c.z_loss,
    "z-loss: the training loss adds COEF * (log Z)^2 per token, log Z the output softmax's log partition "
    "function (1e-4 in arXiv 2309.14322; 0 = off; the validation loss never has it)");
  f("dtype", c.dtype, "compute dtype: f32 | bf16 | f16 (bf16/f16 need CUDA)");
  f("device", c.device, "auto | cpu | cuda | cuda:N");
  f("run_dir", c.run_dir, "run directory (config, metrics, checkpoints)");
  f("name", c.name, "label of the run in reports (default: the attention variant)");
  f("seed", c.seed, "seed of initialisation, data order and dropout");
  f("log_every", c.log_every, "write a metrics line every N steps (on one GPU the steps between never wait for it)");
  f("val_every", c.val_every, "evaluate on the validation split every N steps (0 = only at the end)");
  f("val_batches", c.val_batches, "validation batches per evaluation (0 = the whole split)");
  f("ckpt_every", c.ckpt_every, "checkpoint every N steps (0 = only at the end)");
  f("keep_checkpoints", c.keep_checkpoints, "how many checkpoints to keep");
  f("on_nonfinite", c.on_nonfinite, "on a NaN/inf loss or gradient: stop | skip");
  f("spike_factor", c.spike_factor, "log a loss spike when loss > factor * recent mean");
  f("spike_signal", c.spike_signal,
    "attention statistic that spike and divergence messages and the progress line report: max_logit | max_range "
    "(the largest max - min of one row's logits, which a shift of the row does not move)");
  f("profile", c.profile,
    "profile N steps after the warm-up: a table per op, profile.json and profile_trace.json (Chrome trace) "
    "in the run directory (0 = off)");
  f("profile_warmup", c.profile_warmup, "steps to run before profiling");
  f("profile_gpu", c.profile_gpu, "GPU the emulated device's profile predicts times for: H100 | H200");
  f("cuda_graph", c.cuda_graph,
    "1: replay each step's forwards and backwards as one CUDA graph (one GPU, --dropout 0; "
    "the same results, far fewer launches)");
  f("attention_kernel", c.attention_kernel,
    "bf16/f16 attention on a GPU: mma (every GPU) | sm90 (an H100 or H200 runs the forward and backward on its "
    "warpgroup kernels, FlashAttention-3's way; other GPUs keep mma); not given: KEEL_ATTENTION, else mma");
  f("deterministic", c.deterministic,
    "0: the attention backward on a GPU adds dQ in any order (faster; runs and resumes are no longer "
    "bit-exact); 1: the same bits on every run");
  f("dist_backend", c.dist_backend, "data-parallel backend: auto | local | mpi | nccl (auto: mpi on CPUs, nccl on GPUs)");
  f("bucket_mb", c.bucket_mb, "data parallelism: gradient all-reduce bucket size in MB");
  f("nproc", c.nproc, "start N local ranks of this command under mpirun (data parallelism on one machine)");
  f("zero", c.zero, "data parallelism: 1 shards the AdamW state over the ranks (ZeRO-1), 0 replicates it");
  f("reduce_dtype", c.reduce_dtype, "data parallelism: dtype the gradients travel in, f32 | bf16 (half the bytes)");
}

}  // namespace keel::app
