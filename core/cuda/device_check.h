// Checks that kernels make of their input, reported without a synchronisation of their own.
//
// A kernel cannot throw. When one finds input it cannot use (an embedding id outside the table),
// it records the first such finding in a slot of pinned, mapped host memory that the device
// writes directly, and goes on without touching memory it must not. The host looks at the slot
// after each of its own synchronisations (synchronize(), every copy to or from host memory) and
// throws the finding there as the keel error the op would have thrown. So a check costs the host
// nothing: generation reads one token id per step and learns of a bad id with it, instead of
// reading every id back before each lookup (a synchronisation per embedding), and a training step
// computes its loss without reading the targets back (cross_entropy).
//
// Device side, in a kernel (the first finding wins; later ones are dropped):
//   if (id < 0 || id >= V) { report_device_check(slot, DeviceCheck::embedding_id, id, n, V); return; }
#pragma once

#include <cstdint>

namespace keel::cuda {

enum class DeviceCheck : int32_t { none = 0, embedding_id = 1, class_target = 2 };

struct DeviceCheckSlot {
  int32_t code;  // a DeviceCheck; none while nothing was found
  int32_t pad;
  int64_t value, index, bound;  // what was found, where, and the limit it broke
};

// The slot kernels on `device` report to (a device-visible pointer). Made on first use.
DeviceCheckSlot* device_check_slot(int device);

// Throws the finding recorded on `device` since the last call (clearing it), if any. The
// caller has synchronised with the device, so every kernel that could report has finished.
void raise_device_check(int device);

}  // namespace keel::cuda
