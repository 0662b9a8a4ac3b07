// Clipping's and loss scaling's passes over gradients: checks, packing, one dispatch on the device.
#include "optim/grad_math.h"

#include <string>

#include "core/copy.h"
#include "optim/cpu/grad_math.h"
#include "optim/cuda/grad_math.h"

namespace keel::optim {

namespace {
void check_floating(const Tensor& t, const char* op) {
  if (!is_floating(t.dtype()))
    throw DTypeError(op, std::string("gradients must be floating, got ") + dtype_name(t.dtype()));
}
}  // namespace

double sum_of_squares(const Tensor& t_in) {
  check_floating(t_in, "sum_of_squares");
  Tensor t = t_in.detach().contiguous();
  if (t.numel() == 0) return 0.0;
  return t.device().is_cuda() ? cuda::sum_of_squares(t) : cpu::sum_of_squares(t);
}

void sum_of_squares_into(const std::vector<Tensor>& ts, Tensor& out, int64_t slot) {
  static const char* kOp = "sum_of_squares_into";
  if (out.dtype() != DType::f64 || !out.is_contiguous() || slot < 0 || slot >= out.numel())
    throw ShapeError(kOp, "out must be a contiguous f64 tensor with a slot " + std::to_string(slot) + ", got " +
                              dtype_name(out.dtype()) + " " + shape_str(out.shape()));
  std::vector<Tensor> packed;  // zero elements add 0 to a sum of squares: left out
  packed.reserve(ts.size());
  for (const Tensor& t : ts) {
    if (!t.defined()) continue;
    check_floating(t, kOp);
    if (t.device() != out.device())
      throw DeviceError(kOp, "a tensor on " + t.device().str() + " beside an output on " + out.device().str(),
                        "keep every gradient on one device");
    if (t.numel() > 0) packed.push_back(t.detach().contiguous());
  }
  if (out.device().is_cuda()) cuda::sum_of_squares_into(packed, out, slot);
  else cpu::sum_of_squares_into(packed, out, slot);
}

void scale_(Tensor& t_in, double s) {
  check_floating(t_in, "scale_");
  Tensor t = t_in.detach();
  if (t.numel() == 0) return;
  if (!t.is_contiguous()) {  // scale a packed copy, then put it back where it came from
    Tensor packed = t.contiguous();
    scale_(packed, s);
    copy_(t, packed);
    return;
  }
  if (t.device().is_cuda()) cuda::scale_inplace(t, s);
  else cpu::scale_inplace(t, s);
}

void scale_all_(const std::vector<Tensor>& ts, double s) {
  std::vector<Tensor> batch;
  for (const Tensor& t_in : ts) {
    if (!t_in.defined()) continue;
    check_floating(t_in, "scale_all_");
    Tensor t = t_in.detach();
    if (t.numel() == 0) continue;
    const bool batched = t.device().is_cuda() && t.is_contiguous() && (batch.empty() || batch.front().device() == t.device());
    if (batched) batch.push_back(t);
    else scale_(t, s);
  }
  if (!batch.empty()) cuda::scale_inplace_multi(batch, s);
}

}  // namespace keel::optim
