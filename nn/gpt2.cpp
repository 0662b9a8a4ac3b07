#include "nn/gpt2.h"

#include <algorithm>

#include "core/autograd.h"
#include "core/factory.h"
#include "ops/arith.h"
#include "ops/cross_entropy.h"
#include "ops/dropout.h"
#include "ops/matmul.h"
#include "ops/shape.h"

namespace keel::nn {

namespace {
const GPT2Config& validated(const GPT2Config& c) {
  c.validate();
  return c;
}
// Distinct Philox keys for initialisation and dropout, so drawing dropout masks never shifts
// the initial weights of a given seed (and the other way round).
constexpr uint64_t kDropoutKey = 0x9E3779B97F4A7C15ull;

// stats: L max_logit (H) then L max_range (H), log_z (2) or undefined -> out's max_logit,
// max_range (L, H) f32 and log_z (2), on the CPU for StatsOn::host in one transfer (a host wait
// on a GPU), else where they are.
void gather_stats(std::vector<Tensor>& stats, const Tensor& log_z, int64_t H, StatsOn stats_on, GPT2Output& out) {
  NoGradGuard no_grad;
  const int64_t nl = static_cast<int64_t>(stats.size() / 2);
  for (Tensor& m : stats) m = reshape(m, {H});
  // One transfer for all layers: on CUDA the statistics stay on the device until here.
  Tensor flat = concat(stats, 0).to(DType::f32);  // (2L H)
  out.log_z = log_z;
  if (stats_on == StatsOn::host && flat.device().is_cuda()) {
    if (log_z.defined()) flat = concat({flat, log_z.to(DType::f32)}, 0);
    flat = flat.to(Device::cpu());
    if (log_z.defined()) out.log_z = slice(flat, 0, 2 * nl * H, 2 * nl * H + 2).contiguous();
  }
  const Tensor both = view(slice(flat, 0, 0, 2 * nl * H), {2 * nl, H});
  out.max_logit = slice(both, 0, 0, nl).contiguous();
  out.max_range = slice(both, 0, nl, 2 * nl).contiguous();
}
}  // namespace

int64_t padded_vocab(int64_t vocab_size, Device device) {
  constexpr int64_t kAlign = 128;  // as llm.c: 50257 -> 50304
  return device.is_cuda() ? (vocab_size + kAlign - 1) / kAlign * kAlign : vocab_size;
}

GPT2::GPT2(const GPT2Config& config, uint64_t seed)
    : config_(validated(config)),
      init_gen_(seed),
      dropout_gen_(seed ^ kDropoutKey),
      wte(config.vocab_size, config.n_embd, init_gen_, config.init_std),
      wpe(config.block_size, config.n_embd, init_gen_, config.init_std),
      ln_f(config.n_embd, config.bias, config.layer_norm_epsilon) {
  register_module("transformer.wte", &wte);
  register_module("transformer.wpe", &wpe);
  Generator* dg = config.dropout > 0 ? &dropout_gen_ : nullptr;
  for (int64_t l = 0; l < config.n_layer; ++l) {
    h.push_back(std::make_unique<Block>(config, init_gen_, dg));
    register_module("transformer.h." + std::to_string(l), h.back().get());
  }
  register_module("transformer.ln_f", &ln_f);
  lm_head = config.tie_embeddings
                ? std::make_unique<Linear>(wte.weight)
                : std::make_unique<Linear>(config.n_embd, config.vocab_size, false, init_gen_, config.init_std);
  register_module("lm_head", lm_head.get());
}

// ids (B, T), targets (B, T) or undefined -> logits (B, T, V), loss [], max_logit, max_range (L, H), log_z (2)
GPT2Output GPT2::forward(const Tensor& ids, const Tensor& targets, StatsOn stats_on,
                         std::optional<double> loss_grad, double z_loss) {
  static const char* kOp = "GPT2::forward";
  if (!ids.defined() || ids.dim() != 2)
    throw ShapeError(kOp, "ids must be (B, T), got " + (ids.defined() ? shape_str(ids.shape()) : "undefined"));
  if (ids.dtype() != DType::i32 && ids.dtype() != DType::i64)
    throw DTypeError(kOp, std::string("ids must be i32 or i64 token ids, got ") + dtype_name(ids.dtype()));
  const int64_t T = ids.size(1);
  if (T > config_.block_size)
    throw ShapeError(kOp,
                     "sequence length T = " + std::to_string(T) + " exceeds the context length block_size = " +
                         std::to_string(config_.block_size),
                     "feed at most block_size tokens (crop to the last block_size for generation)");
  if (targets.defined() && targets.shape() != ids.shape())
    throw ShapeError(kOp, "targets " + shape_str(targets.shape()) + " must match ids " + shape_str(ids.shape()));

  if (!positions_.defined() || positions_.device() != wpe.weight.device())
    positions_ = arange(config_.block_size, {DType::i64, wpe.weight.device()});
  Tensor pos = slice(positions_, 0, 0, T);
  Tensor x = wte.forward(ids) + wpe.forward(pos);  // (B, T, C) + (T, C)
  if (config_.dropout > 0 && training()) x = dropout(x, config_.dropout, dropout_gen_, true);

  // Per layer: max_logit in [0, L), max_range in [L, 2L), so one concat gathers both.
  const size_t L = h.size();
  std::vector<Tensor> stats(2 * L);
  Residual r{x, {}};  // each block's last add is done by the next LayerNorm (nn/block.h)
  for (size_t l = 0; l < L; ++l) r = h[l]->forward(r, &stats[l], &stats[L + l]);

  GPT2Output out;
  Tensor log_z;
  x = normalize(r, ln_f).out;
  const int64_t V = config_.vocab_size, Vp = padded_vocab(V, x.device());
  Tensor* lz = targets.defined() ? &log_z : nullptr;
  if (Vp == V) {
    out.logits = lm_head->forward(x);
    // padded targets are cross_entropy's ignore index
    if (targets.defined()) out.loss = cross_entropy(out.logits, targets, kIgnoreIndex, 0, loss_grad, z_loss, lz);
  } else {
    // The output layer over Vp >= V rows, the extra ones zero: every dimension of its three
    // matmuls (forward, both gradients) is then a multiple of 128, which cuBLAS's fast kernels
    // need (N = 50257 runs at a fifth of their speed). The weight stays (V, C) everywhere else
    // (checkpoints, the HF export, sampling); the loss reads only the V real columns, and the
    // padding's gradient is 0, so the result is the unpadded one.
    const Tensor& w = lm_head->weight;
    const Tensor wp = concat({w, zeros({Vp - V, w.size(1)}, {w.dtype(), w.device()})}, 0);  // (Vp, C)
    const Tensor logits = linear(x, wp);                                                    // (B, T, Vp)
    out.logits = narrow(logits, 2, 0, V);
    if (targets.defined()) out.loss = cross_entropy(logits, targets, kIgnoreIndex, V, loss_grad, z_loss, lz);
  }
  gather_stats(stats, log_z, config_.n_head, stats_on, out);
  return out;
}

KVCache GPT2::make_cache(int64_t capacity) const {
  return KVCache(config_.n_layer, config_.block_size, std::min(capacity, config_.block_size));
}

// ids (B, t) after cache.length() cached tokens -> logits (B, t, V), or (B, 1, V) for Logits::last
Tensor GPT2::forward_cached(const Tensor& ids, KVCache& cache, Logits which) {
  static const char* kOp = "GPT2::forward_cached";
  if (!ids.defined() || ids.dim() != 2 || ids.size(1) < 1)
    throw ShapeError(kOp, "ids must be (B, t) with t >= 1, got " + (ids.defined() ? shape_str(ids.shape()) : "undefined"));
  const int64_t P = cache.length(), t = ids.size(1);
  if (P + t > config_.block_size)
    throw ShapeError(kOp,
                     "position " + std::to_string(P + t) + " is past the context length " +
                         std::to_string(config_.block_size),
                     "crop the text to its last tokens and start a new cache");
  if (static_cast<int64_t>(cache.layers.size()) != config_.n_layer)
    throw ShapeError(kOp, "the cache has " + std::to_string(cache.layers.size()) + " layers, the model " +
                              std::to_string(config_.n_layer), "make it with make_cache()");
  // Positions [P, P + t) are rows P.. of the position table: a view of it, so a decode step
  // builds and uploads no position ids (a host synchronisation per token on a GPU).
  Residual r = embedded(wte.forward(ids), narrow(wpe.weight, 0, P, t));  // (B, t, C), (t, C)
  for (size_t l = 0; l < h.size(); ++l) r = h[l]->forward_cached(r, cache, static_cast<int64_t>(l));
  cache.advance(t);
  if (which == Logits::last) {
    r.base = narrow(r.base, 1, t - 1, 1);
    if (r.delta.defined()) r.delta = narrow(r.delta, 1, t - 1, 1);
  }
  return normalize_linear(r, ln_f, *lm_head).out;
}

}  // namespace keel::nn
