// A GPT-2 decode step captured once as a CUDA graph (core/cuda/graph.h) and replayed per token.
//
// At batch 1 a decode step is bound by the host: ~10 kernels and library calls per layer, each a
// few microseconds to issue, for the GPU about one each. Replayed as a graph, the whole step is
// one launch. What a graph needs of the step, and how it gets it here:
//  - inputs in fixed device buffers: the token ids go into ids_ (a device copy or a fill), the
//    position into pos_ (a fill, one kernel taking it as an argument: no host wait);
//  - no value of the host's frozen into it that changes per token: the position embedding is a
//    lookup of pos_, and decode attention reads pos_ on the device (DecodeCache::position), with
//    a grid sized for the cache's slots;
//  - the cache's buffers where they were: when they move (a new text, a cache that had to grow),
//    the step is captured again;
//  - its memory from the cache: one eager run of the step before each capture.
// A replayed token costs 2 launches (the position fill and the graph), 1 copy (the ids), no
// allocation, and the one host wait of reading its token (docs/inference.md). Its logits and
// tokens equal those of GPT2::forward_cached bit for bit wherever decode attention splits a row's
// keys the same way (one split up to 256 keys per row; ops/cuda/decode_attention.cu).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/cuda/graph.h"
#include "nn/gpt2.h"

namespace keel::nn {

// One decode step's results, owned by the DecodeGraph: the next step overwrites them.
struct DecodeStep {
  Tensor logits;  // (B, 1, V)
  Tensor next;    // (B, 1) i64: each row's greedy token (argmax of logits, the smallest id on ties)
};

class DecodeGraph {
 public:
  // `model` on a CUDA device (DeviceError otherwise), in eval mode, used under NoGradGuard. Its
  // parameters must stay where they are (no to(), no load) while the DecodeGraph is in use: the
  // captured kernels read them at the addresses of the capture.
  explicit DecodeGraph(GPT2& model);

  // ids (B, 1) integer ids on the model's device: the tokens at position cache.length(), which
  // must be >= 1 (a prompt goes through GPT2::forward_cached). One decode step, appended to the
  // cache. A step whose global slots the cache does not have yet runs eagerly (the cache grows;
  // the next step captures again). ShapeError past the context length, as forward_cached.
  DecodeStep step(const Tensor& ids, KVCache& cache);
  // The same for one text (B = 1) whose next token the host chose: it goes up in a fill.
  DecodeStep step(int64_t token, KVCache& cache);

  int64_t captures() const { return captures_; }  // the step captured so far (warm-ups included)
  int64_t replays() const { return replays_; }

 private:
  DecodeStep run(KVCache& cache, int64_t B);  // after the inputs are in ids_ and pos_
  Tensor forward(KVCache& cache) const;        // ids_, pos_ -> logits (B, 1, V): the captured work

  GPT2& model_;
  std::unique_ptr<cuda::Graph> graph_;
  Tensor ids_, pos_;                   // (B, 1) i64, (1) i64: the step's inputs
  DecodeStep out_;                     // the step's outputs, in the graph's memory
  std::vector<const void*> captured_;  // the cache buffers the graph was captured with
  int64_t captures_ = 0, replays_ = 0;
};

}  // namespace keel::nn
