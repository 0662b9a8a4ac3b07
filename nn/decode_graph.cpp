#include "nn/decode_graph.h"

#include <string>

#include "core/copy.h"
#include "core/factory.h"
#include "ops/arith.h"
#include "ops/reduce.h"

namespace keel::nn {

namespace {
constexpr const char* kOp = "DecodeGraph::step";

// The device buffers of the cache that a captured step reads and writes.
std::vector<const void*> buffers(const KVCache& cache) {
  std::vector<const void*> out;
  for (const LayerKV& l : cache.layers)
    for (const Tensor* t : {&l.k_local, &l.v_local, &l.k_global, &l.v_global, &l.done})
      out.push_back(t->defined() ? t->raw_data() : nullptr);
  return out;
}

// Whether every layer has its buffers and a global slot for `position`: the step then writes
// into them in place and allocates none.
bool has_slot(const KVCache& cache, int64_t position) {
  for (const LayerKV& l : cache.layers) {
    if (!l.k_local.defined() && !l.k_global.defined()) return false;
    if (l.k_global.defined() && l.k_global.size(2) <= position) return false;
  }
  return true;
}
}  // namespace

DecodeGraph::DecodeGraph(GPT2& model) : model_(model) {
  const Device dev = model.wte.weight.device();
  if (!dev.is_cuda())
    throw DeviceError("DecodeGraph", "a CUDA graph needs the model on a CUDA device, it is on " + dev.str(),
                      "decode on the CPU with GPT2::forward_cached");
  graph_ = std::make_unique<cuda::Graph>(dev.index);
}

// ids (B, 1) -> logits (B, 1, V), greedy ids (B, 1)
DecodeStep DecodeGraph::step(const Tensor& ids, KVCache& cache) {
  if (!ids.defined() || ids.dim() != 2 || ids.size(1) != 1)
    throw ShapeError(kOp, "ids must be (B, 1), got " + (ids.defined() ? shape_str(ids.shape()) : "undefined"));
  const int64_t B = ids.size(0);
  if (!has_slot(cache, cache.length()) || cache.length() < 1) {
    Tensor logits = model_.forward_cached(ids, cache, GPT2::Logits::last);
    return {logits, argmax(logits, 2)};
  }
  if (!ids_.defined() || ids_.size(0) != B) ids_ = empty({B, 1}, {DType::i64, ids.device()});
  if (ids.raw_data() != ids_.raw_data()) copy_(ids_, ids);
  return run(cache, B);
}

DecodeStep DecodeGraph::step(int64_t token, KVCache& cache) {
  const Device dev = model_.wte.weight.device();
  if (!has_slot(cache, cache.length()) || cache.length() < 1) return step(full({1, 1}, double(token), {DType::i64, dev}), cache);
  if (!ids_.defined() || ids_.size(0) != 1) ids_ = empty({1, 1}, {DType::i64, dev});
  fill_(ids_, double(token));
  return run(cache, 1);
}

DecodeStep DecodeGraph::run(KVCache& cache, int64_t B) {
  const int64_t P = cache.length();
  if (P + 1 > model_.config().block_size)
    throw ShapeError(kOp, "position " + std::to_string(P + 1) + " is past the context length " +
                              std::to_string(model_.config().block_size),
                     "crop the text to its last tokens and start a new cache");
  if (static_cast<int64_t>(cache.layers.size()) != model_.config().n_layer)
    throw ShapeError(kOp, "the cache has " + std::to_string(cache.layers.size()) + " layers, the model " +
                              std::to_string(model_.config().n_layer), "make it with make_cache()");
  if (!pos_.defined()) pos_ = empty({1}, {DType::i64, ids_.device()});
  fill_(pos_, double(P));
  std::vector<const void*> now = buffers(cache);
  if (graph_->empty() || now != captured_ || out_.next.size(0) != B) {
    for (LayerKV& l : cache.layers) l.position = pos_;
    try {
      out_ = {};
      {  // eagerly once: what the capture allocates is then in the cache (a capture may not cudaMalloc)
        Tensor logits = forward(cache);
        Tensor next = argmax(logits, 2);
      }
      graph_->capture([&] {
        out_.logits = forward(cache);
        out_.next = argmax(out_.logits, 2);
      });
    } catch (...) {
      for (LayerKV& l : cache.layers) l.position = Tensor();
      out_ = {};
      throw;
    }
    // Eager steps on this cache take the host's position again.
    for (LayerKV& l : cache.layers) l.position = Tensor();
    captured_ = buffers(cache);  // as the capture left them (the eager run may have made decode counters)
    ++captures_;
  }
  graph_->replay();
  ++replays_;
  cache.advance(1);
  return out_;
}

// ids_ (B, 1) at position pos_ -> logits (B, 1, V); the cache's length is pos_'s value
Tensor DecodeGraph::forward(KVCache& cache) const {
  // The position embedding as a lookup of pos_: a view of row P would freeze P into the graph.
  Residual r = embedded(model_.wte.forward(ids_), model_.wpe.forward(pos_));  // (B, 1, C), (1, C)
  for (size_t l = 0; l < model_.h.size(); ++l) r = model_.h[l]->forward_cached(r, cache, static_cast<int64_t>(l));
  return normalize_linear(r, model_.ln_f, *model_.lm_head).out;
}

}  // namespace keel::nn
