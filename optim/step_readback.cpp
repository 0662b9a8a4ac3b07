#include "optim/step_readback.h"

#include <string>
#include <utility>

#include "core/error.h"
#include "core/factory.h"
#include "optim/cpu/step_readback.h"
#include "optim/cuda/step_readback.h"

namespace keel::optim {

StepReadback::StepReadback(Device device, int64_t slots) {
  if (slots < 1)
    throw ValueError("StepReadback", "a readback needs at least one slot (the gradient norm's), got " +
                                         std::to_string(slots));
  buffer_ = zeros({slots}, {DType::f64, device});
}

StepReadback::StepReadback(Tensor buffer) : buffer_(std::move(buffer)) {
  if (!buffer_.defined() || buffer_.dim() != 1 || buffer_.numel() < 1 || buffer_.dtype() != DType::f64 ||
      !buffer_.is_contiguous())
    throw ShapeError("StepReadback", "a readback's buffer must be a contiguous (slots >= 1) f64 tensor");
}

void StepReadback::reset() {
  fill_(buffer_, 0.0);
  fresh_ = false;
}

Tensor& StepReadback::buffer() {
  fresh_ = false;  // the caller may write through it
  return buffer_;
}

void StepReadback::check_slots(int64_t first, int64_t n, const char* op) const {
  if (first < 0 || n < 0 || first + n > slots())
    throw ShapeError(op, "slots [" + std::to_string(first) + ", " + std::to_string(first + n) +
                             ") are outside a readback of " + std::to_string(slots()));
}

void StepReadback::add_quotient(int64_t slot, const Tensor& x, double divisor) {
  static const char* kOp = "StepReadback::add_quotient";
  if (!x.defined() || x.numel() != 1 || !is_floating(x.dtype()))
    throw ShapeError(kOp, "expected a floating scalar, got " + (x.defined() ? shape_str(x.shape()) : "undefined"));
  if (x.device() != buffer_.device())
    throw DeviceError(kOp, "a value on " + x.device().str() + " for a readback on " + buffer_.device().str());
  check_slots(slot, 1, kOp);
  const Tensor xc = x.detach().contiguous();
  fresh_ = false;
  if (buffer_.device().is_cuda()) cuda::add_quotient(buffer_, slot, xc, divisor);
  else cpu::add_quotient(buffer_, slot, xc, divisor);
}

void StepReadback::merge_max(int64_t first, const Tensor& v) {
  static const char* kOp = "StepReadback::merge_max";
  if (!v.defined() || !is_floating(v.dtype()))
    throw DTypeError(kOp, "expected floating values, got " + std::string(v.defined() ? dtype_name(v.dtype()) : "undefined"));
  if (v.device() != buffer_.device())
    throw DeviceError(kOp, "values on " + v.device().str() + " for a readback on " + buffer_.device().str());
  check_slots(first, v.numel(), kOp);
  if (v.numel() == 0) return;
  const Tensor vc = v.detach().contiguous();
  fresh_ = false;
  if (buffer_.device().is_cuda()) cuda::merge_max(buffer_, first, vc);
  else cpu::merge_max(buffer_, first, vc);
}

const std::vector<double>& StepReadback::read() {
  if (!fresh_) {
    host_ = buffer_.to_vector<double>();
    fresh_ = true;
  }
  return host_;
}

}  // namespace keel::optim
