// Reverse-mode automatic differentiation, define-by-run.
//
// Each differentiable op that sees an input requiring grad records a Node: what its backward
// needs (and nothing more) plus edges to the nodes that made its inputs. Tensor::backward()
// sorts the nodes reachable from the loss topologically and runs them from the loss down,
// summing (+=) the gradients that reach a node along several paths. Leaves that require grad
// are reached through an AccumulateGrad node, which adds into leaf.grad.
//
// Writing an op (ops/gelu.cpp, in full):
//
//   struct GeluBackward : Node {
//     Tensor x;                                   // saved for backward: the input
//     const char* name() const override { return "GeluBackward"; }
//     std::vector<Tensor> backward(const Tensor& grad) override {  // dL/dy -> {dL/dx}
//       return {x.device().is_cuda() ? cuda::gelu_backward(grad, x) : cpu::gelu_backward(grad, x)};
//     }
//     void release() override { x = {}; }         // free what was saved
//   };
//   Tensor y = ...forward...;
//   if (needs_grad({x})) connect(y, std::make_shared<GeluBackward>(...), {x});
//
// Never save an op's own output as it is (that would be a cycle: output -> node -> output);
// save output.detach() instead.
#pragma once

#include <functional>
#include <initializer_list>
#include <memory>
#include <vector>

#include "core/profiler.h"
#include "core/tensor.h"

namespace keel {

class Node {
 public:
  // Dismantles the chain of predecessors iteratively: a graph of 100k ops destroyed by
  // recursion (node -> next -> next ...) would overflow the stack.
  virtual ~Node();
  virtual const char* name() const = 0;
  // dL/d(output) in, dL/d(input i) out: one entry per input, undefined where next[i] is null.
  virtual std::vector<Tensor> backward(const Tensor& grad_output) = 0;
  // Drop the saved tensors once backward has used them.
  virtual void release() {}
  // What backward(grad_output) will cost, from the saved shapes (ops/op_costs.h); asked only
  // while the profiler records, before backward runs.
  virtual profiler::Cost cost(const Tensor& /*grad_output*/) const { return {}; }

  // For a node of one input: add this backward's gradient into `into`, the input's gradient that
  // other consumers already delivered (a contiguous tensor the engine owns), and return true,
  // instead of returning a new tensor of the input's shape for the engine to sum. SliceBackward
  // does, adding into its window: the pieces of a split (q, k and v of one projection) then
  // fill one gradient, where each would make a zero tensor of the whole input and the engine
  // add them up. add_into_cost is what that costs, for the profiler.
  virtual bool add_into(const Tensor& /*grad_output*/, Tensor& /*into*/) { return false; }
  virtual profiler::Cost add_into_cost(const Tensor& /*grad_output*/) const { return {}; }
  // True when backward() returns new tensors that nothing else holds, which the engine may add
  // the input's other gradients into in place.
  virtual bool fresh_gradients() const { return false; }

  bool needs_input_grad(size_t i) const { return i < next.size() && next[i] != nullptr; }

  std::vector<std::shared_ptr<Node>> next;  // one per input; null = that input needs no grad
  bool released = false;
};

// The node behind every leaf that requires grad: adds the incoming gradient into leaf.grad.
class AccumulateGrad : public Node {
 public:
  explicit AccumulateGrad(const std::shared_ptr<TensorImpl>& leaf) : leaf_(leaf) {}
  const char* name() const override { return "AccumulateGrad"; }
  std::vector<Tensor> backward(const Tensor& grad_output) override;
  profiler::Cost cost(const Tensor& grad_output) const override;
  std::shared_ptr<TensorImpl> leaf() const { return leaf_.lock(); }

 private:
  std::weak_ptr<TensorImpl> leaf_;  // weak: a graph must not keep a dropped parameter alive
};

// Gradient recording is on by default and per thread; NoGradGuard turns it off in a scope.
bool grad_enabled();
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

// True when recording is on and some input requires grad: only then is a node worth making.
bool needs_grad(std::initializer_list<Tensor> inputs);
bool needs_grad(const std::vector<Tensor>& inputs);

// Makes `node` the grad_fn of `output`, with one edge per input.
void connect(Tensor& output, std::shared_ptr<Node> node, std::initializer_list<Tensor> inputs);
void connect(Tensor& output, std::shared_ptr<Node> node, const std::vector<Tensor>& inputs);

// Called by the engine, on the thread running backward, as soon as a leaf's gradient is
// final for this backward (every path into the leaf has delivered): what data-parallel
// training uses to start reducing gradients while the rest of the backward runs.
using GradReadyHook = std::function<void(const std::shared_ptr<TensorImpl>& leaf)>;
// Installs `hook` for the backward passes run on this thread while the guard lives.
class GradReadyHookGuard {
 public:
  explicit GradReadyHookGuard(GradReadyHook hook);
  ~GradReadyHookGuard();
  GradReadyHookGuard(const GradReadyHookGuard&) = delete;
  GradReadyHookGuard& operator=(const GradReadyHookGuard&) = delete;

 private:
  GradReadyHook previous_;
};

// The engine behind Tensor::backward.
void run_backward(const Tensor& root, const Tensor& grad, bool retain_graph);

// dst += src, elementwise, same shape and device (dtypes may differ; dst's is kept), in one
// pass. dst may be a strided view (a window of a larger gradient) when the dtypes match. The one
// piece of arithmetic the engine itself needs; CPU here, a CUDA kernel in core/cuda/.
void accumulate_into(Tensor& dst, const Tensor& src);

}  // namespace keel
