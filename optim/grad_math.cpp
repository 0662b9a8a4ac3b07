// Clipping's and loss scaling's passes over gradients: checks, packing, one dispatch on the device.
#include "optim/grad_math.h"

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

}  // namespace keel::optim
