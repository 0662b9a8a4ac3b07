// `gpt2 train --cuda-graph 1`: a step's forward and backward replayed as one CUDA graph.
//
// At small B x T a training step is bound by the host: gpt2-124m issues ~900 kernels and library
// calls per step, each costing the host several microseconds while the GPU finishes it in about
// one (docs/gpu-benchmarks.md, "Predicted step"). Captured once (core/cuda/graph.h), the forward
// and backward replay with one launch. What the graph needs, and how the step gives it:
//  - fixed addresses: the step's batch (all its micro-batches: with --grad-accum the replay runs
//    them all, the gradients adding up as in the eager loop) is copied into a buffer of the
//    graph's own before each replay;
//    the bf16/f16 parameters' gradients are their f32 buffers (AdamW::zero_grad), and the other
//    parameters' gradients, allocated in the capture from the graph's memory pool, are kept here
//    and bound to the parameters again after every replay; the step's scalars go into one
//    StepReadback that lives as long as the graph;
//  - fixed host values: the loss factor (loss scale / accumulation) is baked into a kernel, so a
//    new factor captures again (an f16 scale kept on the device, LossScaler::keep_on_device, is
//    read there by the kernel and never changes the factor); dropout draws a new mask from the host's
//    generator every step, which a graph would freeze, so --cuda-graph needs --dropout 0;
//  - no host wait inside: the forward and backward have none (the gradient norm and AdamW stay
//    outside, and a step's scalars are read, when it logs, from the trainer's own table).
// The replay runs the very kernels with the very arguments of the eager step, so the weights,
// the logged numbers and the checkpoints are bit-identical to a run without it
// (tests/train/test_step_graph_cuda.cpp).
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "apps/gpt2/train/train_config.h"
#include "core/cuda/graph.h"
#include "core/tensor.h"
#include "optim/step_readback.h"

namespace keel::app {

class StepGraph {
 public:
  // The step's work on the graph's batch buffer: each micro-batch's forward, backward, and
  // scalars into rb.
  using Body = std::function<void(const Tensor& batch, optim::StepReadback& rb)>;

  // params: the leaves whose gradients the body produces; device: CUDA (DeviceError otherwise);
  // slots: the readback's.
  StepGraph(std::vector<Tensor> params, Device device, int64_t slots);

  // batch (any shape, on any device) is copied into the graph's buffer, then body runs on it:
  // replayed when the graph holds it for this shape and `factor`, else once eagerly (to warm
  // the allocator's cache: a capture may not allocate from the driver), then captured and
  // replayed. Every parameter's gradient must be undefined before (zero_grad): the replay
  // writes them, and binds them to the parameters as the eager body would have.
  void run(const Tensor& batch, double factor, const Body& body);

  // The step's scalars (zeroed by reset(), at the start of every step).
  optim::StepReadback& readback() { return rb_; }
  int64_t captures() const { return captures_; }

 private:
  std::vector<Tensor> params_;
  Device device_;
  cuda::Graph graph_;
  optim::StepReadback rb_;
  Tensor batch_;                // the graph's input buffer
  double factor_ = 0;           // the loss factor the graph was captured with
  std::vector<Tensor> grads_;   // the gradients the graph writes, by parameter (undefined: none)
  int64_t captures_ = 0;
};

// What --cuda-graph 1 needs of a run on `device` with `world` ranks and that dropout: a
// ConfigError naming what it cannot replay and the way out, before any work.
void check_graph_fits(const TrainConfig& cfg, Device device, int world, double dropout);

}  // namespace keel::app
