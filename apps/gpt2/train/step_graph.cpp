#include "apps/gpt2/train/step_graph.h"

#include <string>
#include <utility>

#include "core/copy.h"
#include "core/error.h"
#include "core/factory.h"

namespace keel::app {

namespace {
int device_index(Device device) {
  if (!device.is_cuda())
    throw DeviceError("StepGraph", "a CUDA graph needs a CUDA device, the run is on " + device.str(),
                      "drop --cuda-graph on the CPU");
  return device.index;
}
}  // namespace

void check_graph_fits(const TrainConfig& cfg, Device device, int world, double dropout) {
  auto refuse = [](const std::string& why, const std::string& hint) {
    throw ConfigError("train", "--cuda-graph 1 " + why, hint);
  };
  if (!device.is_cuda()) refuse("needs a CUDA device, the run is on " + device.str(), "drop --cuda-graph on the CPU");
  if (world > 1)
    refuse("runs on one GPU: data parallelism reduces the gradients on the host during the backward",
           "drop --cuda-graph, or train on one GPU");
  if (dropout > 0)
    refuse("would freeze dropout's mask, which the host's generator draws anew every step",
           "use --dropout 0, or drop --cuda-graph");
  if (cfg.profile > 0)
    refuse("replays a step as one launch, which the profiler cannot split into ops", "profile without --cuda-graph");
}

StepGraph::StepGraph(std::vector<Tensor> params, Device device, int64_t slots)
    : params_(std::move(params)), device_(device), graph_(device_index(device)), rb_(device, slots) {}

void StepGraph::run(const Tensor& batch, double factor, const Body& body) {
  for (const Tensor& p : params_)
    if (p.grad().defined())
      throw ValueError("StepGraph::run", "a parameter already has a gradient; the graph writes, not adds",
                       "call zero_grad() before the step");
  if (!batch_.defined() || batch_.shape() != batch.shape() || batch_.dtype() != batch.dtype()) {
    graph_.reset();
    batch_ = empty(batch.shape(), {batch.dtype(), device_});
  }
  copy_(batch_, batch);
  if (graph_.empty() || factor != factor_) {
    graph_.reset();
    {  // eagerly once, into a scratch readback: the blocks it allocates are then in the cache
      optim::StepReadback scratch(device_, rb_.slots());
      body(batch_, scratch);
      for (Tensor p : params_) p.zero_grad();
    }
    graph_.capture([&] { body(batch_, rb_); });
    // The capture ran the host's side of the body: the parameters now hold the gradients the
    // replays write, in the graph's memory.
    grads_.clear();
    for (const Tensor& p : params_) grads_.push_back(p.grad());
    factor_ = factor;
    ++captures_;
  }
  graph_.replay();
  for (size_t i = 0; i < params_.size(); ++i)
    if (grads_[i].defined()) params_[i].set_grad(grads_[i]);
}

}  // namespace keel::app
