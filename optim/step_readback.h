// The scalars a training step reports (its gradient norm, its loss, its attention statistics),
// gathered on the step's device and brought to the host in one copy.
//
// Each host read of a GPU value waits for the device to finish everything queued before it. A
// step that read its loss and statistics after every micro-batch, and the gradient norm tensor by
// tensor, waited on the device a hundred times and more, which leaves the GPU idle while the host
// catches up. Here the values accumulate in one small f64 buffer on the device instead, with the
// arithmetic the host loop did (so the logged numbers keep their bits), and read() copies it once:
//
//   StepReadback rb(device, slots);              // zeros; slot kGradSumSq is the optimizer's
//   for each micro-batch: rb.add_quotient(kLoss, out.loss, accum); rb.merge_max(kStats, out.max_logit);
//   double norm = opt.finish_gradients(scaler, clip, &rb);  // writes kGradSumSq, then read(): one copy
//   double loss = rb.read()[kLoss];               // already on the host
//
// On the CPU the same calls do the same arithmetic in place, and read() copies nothing.
#pragma once

#include <cstdint>
#include <vector>

#include "core/device.h"
#include "core/tensor.h"

namespace keel::optim {

class StepReadback {
 public:
  // The slot where DataParallelOptimizer::finish_gradients puts the gradients' sum of squares.
  static constexpr int64_t kGradSumSq = 0;

  // slots (>= 1) f64 zeros on device.
  StepReadback(Device device, int64_t slots);
  // Over buffer (slots) f64, contiguous, as it is: a view whose writes land where it points (a
  // row of a table that holds many steps' scalars, read in one copy).
  explicit StepReadback(Tensor buffer);

  int64_t slots() const { return buffer_.numel(); }
  // (slots) f64 on the device, for kernels that write a slot (optim::sum_of_squares_into).
  Tensor& buffer();

  // x [] floating -> slot += double(x) / divisor, in f64: what `sum += x.item() / divisor` adds
  // on the host.
  void add_quotient(int64_t slot, const Tensor& x, double divisor);
  // v (any shape, N elements, row-major) floating -> slot first + i = nan_max(slot first + i,
  // double(v[i])) for i < N: the merge of the attention statistics (ops/nan_max.h), NaN winning.
  void merge_max(int64_t first, const Tensor& v);

  // Every slot back to zero (one fill on a GPU), for a readback that serves step after step.
  void reset();

  // The slots on the host: one device-to-host copy (a host sync on a GPU) the first time after
  // a change, none after that.
  const std::vector<double>& read();

 private:
  void check_slots(int64_t first, int64_t n, const char* op) const;
  Tensor buffer_;
  std::vector<double> host_;
  bool fresh_ = false;  // host_ holds buffer_ as it is now
};

}  // namespace keel::optim
