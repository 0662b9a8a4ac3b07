// Embedding lookup: front end and backward node.
#include "ops/embedding.h"

#include "ops/common.h"
#include "ops/cpu/embedding.h"
#include "ops/cuda/embedding.h"
#include "ops/op_costs.h"

namespace keel {

namespace {
struct EmbeddingBackward : Node {
  Tensor ids;  // on the weight's device: the CUDA backward groups them there
  Shape weight_shape;
  const char* name() const override { return "EmbeddingBackward"; }
  std::vector<Tensor> backward(const Tensor& g) override {
    Tensor gw = zeros(weight_shape, {g.dtype(), g.device()});
    if (g.device().is_cuda()) cuda::embedding_backward(g.contiguous(), ids, gw);
    else cpu::embedding_backward(g.contiguous(), ids, gw);
    return {gw, Tensor()};
  }
  void release() override { ids = {}; }
  profiler::Cost cost(const Tensor& g) const override { return op_costs::embedding_backward(g, ids, weight_shape); }
};
}  // namespace

Tensor embedding(const Tensor& weight, const Tensor& ids) {
  const char* op = "embedding";
  detail::check_same_device(op, {{"weight", weight}, {"ids", ids}});
  detail::check_floating(op, {{"weight", weight}});
  detail::check_integer(op, {{"ids", ids}});
  detail::check_dim(op, {"weight", weight}, 2);
  profiler::Scope prof(op);
  if (prof) prof.cost(op_costs::embedding(ids, weight));
  Tensor idx = ids.contiguous();
  const int64_t V = weight.size(0), C = weight.size(1);
  const bool grad = needs_grad({weight});
  // Ids on the GPU are range-checked by the kernel, which reports a bad one at the host's next
  // synchronisation (core/cuda/device_check.h), and the backward groups them on the device: neither
  // a lookup in generation nor a training step reads them back.
  const bool host_check = !idx.device().is_cuda();
  // Validate every id before touching memory: an id outside the table is a data bug.
  if (host_check) visit_dtype<IndexDType>(idx.dtype(), op, [&]<typename I>() {
    const I* p = idx.data<I>();
    for (int64_t i = 0; i < idx.numel(); ++i)
      if (p[i] < 0 || p[i] >= V)
        throw IndexError(op, "id " + std::to_string(p[i]) + " at position " + std::to_string(i) +
                                 " is outside the table of " + std::to_string(V) + " rows (" +
                                 detail::describe("weight", weight) + ")",
                         "check that the tokenizer's vocabulary matches the model's vocab_size");
  });
  Shape out_shape = ids.shape();
  out_shape.push_back(C);
  Tensor out = empty(out_shape, {weight.dtype(), weight.device()});
  if (weight.device().is_cuda()) cuda::embedding_forward(weight.contiguous(), idx, out);
  else cpu::embedding_forward(weight.contiguous(), idx, out);
  if (grad) {
    auto n = std::make_shared<EmbeddingBackward>();
    n->ids = idx, n->weight_shape = weight.shape();
    connect(out, n, {weight, ids});
  }
  return out;
}

}  // namespace keel
