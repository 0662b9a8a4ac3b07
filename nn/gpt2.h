// The GPT-2 language model: token + learned position embeddings, n_layer pre-LN blocks, a final
// LayerNorm and the lm_head projection to the vocabulary.
//
// Parameter names are Hugging Face's (transformer.wte.weight, transformer.h.0.attn.c_attn.weight,
// ..., lm_head.weight), so a state dict moves between keel and PyTorch by name (nn/hf.h converts
// the Conv1D layout). With tied embeddings lm_head.weight IS transformer.wte.weight: one tensor,
// listed once, as transformer.wte.weight.
//
// Initialisation is GPT-2's, drawn from a Philox generator in a fixed order, so a seed fixes the
// model: Linear/Embedding weights N(0, 0.02^2), the residual projections (attn.c_proj,
// mlp.c_proj) N(0, (0.02 / sqrt(2 n_layer))^2), biases 0, LayerNorm gains 1.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "nn/block.h"
#include "nn/config.h"
#include "nn/embedding.h"
#include "nn/kv_cache.h"

namespace keel::nn {

struct GPT2Output {
  Tensor logits;     // (B, T, V), the parameters' dtype and device (on a GPU a view of padded rows)
  Tensor loss;       // [] mean cross-entropy over non-ignored targets; undefined without targets
  Tensor max_logit;  // (L, H) f32 on the CPU: largest |pre-softmax logit| per layer and head
  Tensor max_range;  // (L, H) f32 on the CPU: largest logit range of one row (ops/attention.h)
  // (2) [mean log Z, max |log Z|] of the output softmax over the non-ignored targets (the log of
  // its partition function: the loss's lse; cross_entropy's log_z), on the CPU like max_logit, f32
  // (f64 for an f64 model on the CPU); undefined without targets.
  Tensor log_z;
};

// Where GPT2::forward leaves max_logit, max_range and log_z: on the CPU (one transfer per call, a host
// wait on a GPU), or on the parameters' device for a caller that gathers them there and reads
// them later with other values (the trainer, once per step: optim/step_readback.h).
enum class StatsOn { host, device };

// The vocabulary size the output layer computes over in training and evaluation on `device`:
// on a GPU vocab_size rounded up to a multiple of 128 (GPT2::forward says why), else vocab_size.
int64_t padded_vocab(int64_t vocab_size, Device device);

class GPT2 : public Module {
 public:
  // Validates the config (ConfigError) and initialises on the CPU in f32; move with to().
  explicit GPT2(const GPT2Config& config, uint64_t seed = 0);

  // ids (B, T) i32/i64 token ids, T <= block_size; targets (B, T) token ids, -100 = ignore, or
  // undefined -> logits (B, T, V), loss [], max_logit (L, H), max_range (L, H), log_z (2). ShapeError when
  // T > block_size. loss_grad: the gradient the loss will get in backward (1 for
  // loss.backward(); a trainer's loss scale / grad_accum; none when unknown): the logits'
  // gradient is then computed with the loss, in one pass over the logits (cross_entropy's
  // expected_grad); a wrong value costs time, never correctness. z_loss: the loss adds z_loss *
  // (log Z)^2 per target (cross_entropy's z-loss; 0: none).
  GPT2Output forward(const Tensor& ids, const Tensor& targets = {}, StatsOn stats = StatsOn::host,
                     std::optional<double> loss_grad = 1.0, double z_loss = 0);

  // Generation. An empty cache for this model (local heads keep only their window); `capacity`
  // positions of the global heads are allocated at the first step (0: what it needs, then
  // doubling), so a caller that knows the length of its text never grows the cache.
  KVCache make_cache(int64_t capacity = 0) const;
  // ids (B, t): the next t tokens after the cache.length() already cached -> logits (B, t, V), or
  // with Logits::last only the last position's (B, 1, V): a prompt needs no more, and the output
  // layer is the largest matmul per token. Appends to the cache. ShapeError when the text would
  // outgrow block_size (learned positions end there): crop the context and start a new cache.
  enum class Logits { all, last };
  Tensor forward_cached(const Tensor& ids, KVCache& cache, Logits which = Logits::all);

  const GPT2Config& config() const { return config_; }
  // Drives dropout; its state belongs in a checkpoint for a bit-exact resume with dropout > 0.
  Generator& dropout_generator() { return dropout_gen_; }

 private:
  GPT2Config config_;
  Generator init_gen_;
  Generator dropout_gen_;
  // arange(block_size) i64 on the parameters' device, made once: forward takes its first T, as an
  // upload per forward would make the host wait for a GPU every micro-batch.
  Tensor positions_;

 public:
  Embedding wte;  // (V, C)
  Embedding wpe;  // (block_size, C)
  std::vector<std::unique_ptr<Block>> h;
  LayerNorm ln_f;
  std::unique_ptr<Linear> lm_head;  // weight (V, C), no bias; shares wte.weight when tied
};

}  // namespace keel::nn
