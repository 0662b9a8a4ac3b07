#include "optim/clip.h"

#include <cmath>
#include <optional>
#include <string>

#include "ops/op_costs.h"
#include "optim/grad_math.h"

namespace keel::optim {

std::vector<Tensor> gradients_of(const std::vector<Tensor>& params) {
  std::vector<Tensor> grads;
  grads.reserve(params.size());
  for (const Tensor& p : params)
    if (Tensor g = p.grad(); g.defined()) grads.push_back(g);
  return grads;
}

namespace {
// Squares summed in f64 per tensor, then across tensors in list order: deterministic, and on a
// GPU read with the step's other scalars in one copy. Inside the caller's profiler scope.
void sum_into(const std::vector<Tensor>& grads, StepReadback& readback, profiler::Scope& prof) {
  if (prof) {  // reads every gradient once, a multiply-add per element
    profiler::Cost c;
    for (const Tensor& g : grads) c.flops += 2.0 * double(g.numel()), c.bytes += op_costs::bytes_of(g);
    prof.cost(c);
  }
  sum_of_squares_into(grads, readback.buffer(), StepReadback::kGradSumSq);
}
}  // namespace

void grad_sum_of_squares(const std::vector<Tensor>& params, StepReadback& readback) {
  profiler::Scope prof("grad_norm", profiler::Phase::optimizer);
  sum_into(gradients_of(params), readback, prof);
}

double grad_norm(const std::vector<Tensor>& params, StepReadback* readback) {
  profiler::Scope prof("grad_norm", profiler::Phase::optimizer);
  const std::vector<Tensor> grads = gradients_of(params);
  if (!readback && grads.empty()) return 0.0;
  std::optional<StepReadback> own;
  if (!readback) readback = &own.emplace(grads.front().device(), 1);
  sum_into(grads, *readback, prof);
  return std::sqrt(readback->read()[StepReadback::kGradSumSq]);
}

void check_max_norm(double max_norm) {
  if (!(max_norm > 0) || !std::isfinite(max_norm))
    throw ValueError("clip_grad_norm", "max_norm must be a positive finite number, got " + std::to_string(max_norm),
                     "pass e.g. 1.0, or skip clipping");
}

double clip_coefficient(double norm, double max_norm) {
  check_max_norm(max_norm);
  return std::isfinite(norm) && norm > max_norm ? max_norm / (norm + 1e-6) : 1.0;
}

double clip_grad_norm(const std::vector<Tensor>& params, double max_norm, StepReadback* readback) {
  check_max_norm(max_norm);  // before any work
  double norm = grad_norm(params, readback);
  const double coef = clip_coefficient(norm, max_norm);
  if (coef == 1.0) return norm;
  profiler::Scope prof("clip_scale", profiler::Phase::optimizer);
  if (prof) {  // reads and writes every gradient
    profiler::Cost c;
    for (const Tensor& p : params)
      if (Tensor g = p.grad(); g.defined()) c.flops += double(g.numel()), c.bytes += 2 * op_costs::bytes_of(g);
    prof.cost(c);
  }
  scale_all_(gradients_of(params), coef);
  return norm;
}

}  // namespace keel::optim
