#include "optim/clip.h"

#include <cmath>
#include <string>

#include "ops/op_costs.h"
#include "optim/grad_math.h"

namespace keel::optim {

double grad_norm(const std::vector<Tensor>& params) {
  // Squares summed in f64 per tensor, then across tensors in list order: deterministic.
  profiler::Scope prof("grad_norm", profiler::Phase::optimizer);
  if (prof) {  // reads every gradient once, a multiply-add per element
    profiler::Cost c;
    for (const Tensor& p : params)
      if (Tensor g = p.grad(); g.defined()) c.flops += 2.0 * double(g.numel()), c.bytes += op_costs::bytes_of(g);
    prof.cost(c);
  }
  double total = 0;
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (g.defined()) total += sum_of_squares(g);
  }
  return std::sqrt(total);
}

double clip_grad_norm(const std::vector<Tensor>& params, double max_norm) {
  if (!(max_norm > 0) || !std::isfinite(max_norm))
    throw ValueError("clip_grad_norm", "max_norm must be a positive finite number, got " + std::to_string(max_norm),
                     "pass e.g. 1.0, or skip clipping");
  double norm = grad_norm(params);
  if (!std::isfinite(norm) || norm <= max_norm) return norm;
  const double coef = max_norm / (norm + 1e-6);
  profiler::Scope prof("clip_scale", profiler::Phase::optimizer);
  if (prof) {  // reads and writes every gradient
    profiler::Cost c;
    for (const Tensor& p : params)
      if (Tensor g = p.grad(); g.defined()) c.flops += double(g.numel()), c.bytes += 2 * op_costs::bytes_of(g);
    prof.cost(c);
  }
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (g.defined()) scale_(g, coef);
  }
  return norm;
}

}  // namespace keel::optim
