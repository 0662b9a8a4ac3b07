// The host side of core/cuda/device_check.h: one slot per device in pinned, mapped host memory.
#include "core/cuda/device_check.h"

#include <cuda_runtime.h>

#include <mutex>
#include <string>

#include "core/cuda/check.h"
#include "core/cuda/runtime.h"
#include "core/error.h"

namespace keel::cuda {

namespace {
// The slots live as long as the process. Plain arrays, not vectors: they have no destructor, so
// the slots stay reachable (and LeakSanitizer quiet) through the end of the process.
constexpr int kMaxDevices = 64;
std::mutex g_mu;
DeviceCheckSlot* g_host[kMaxDevices];    // the host's view of each device's slot
DeviceCheckSlot* g_device[kMaxDevices];  // the device's view of the same memory

// Makes device's slot if it has none yet; g_mu held.
void make_slot(int device) {
  check_device(device, "device_check_slot");
  if (device >= kMaxDevices)
    throw DeviceError("device_check_slot", "cuda:" + std::to_string(device) + " is beyond the " +
                                               std::to_string(kMaxDevices) + " devices keel supports in one process");
  if (g_host[device]) return;
  KEEL_CHECK_CUDA(cudaSetDevice(device));
  void* p = nullptr;
  KEEL_CHECK_CUDA(cudaHostAlloc(&p, sizeof(DeviceCheckSlot), cudaHostAllocMapped));
  *static_cast<DeviceCheckSlot*>(p) = DeviceCheckSlot{};
  void* d = nullptr;
  KEEL_CHECK_CUDA(cudaHostGetDevicePointer(&d, p, 0));
  g_host[device] = static_cast<DeviceCheckSlot*>(p);
  g_device[device] = static_cast<DeviceCheckSlot*>(d);
}
}  // namespace

DeviceCheckSlot* device_check_slot(int device) {
  std::lock_guard<std::mutex> lock(g_mu);
  make_slot(device);
  return g_device[device];
}

void raise_device_check(int device) {
  DeviceCheckSlot* s = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (device < 0 || device >= kMaxDevices || !g_host[device]) return;  // no kernel ever checked
    s = g_host[device];
  }
  const DeviceCheckSlot found = *s;
  if (found.code == int32_t(DeviceCheck::none)) return;
  *s = DeviceCheckSlot{};
  if (found.code == int32_t(DeviceCheck::embedding_id))
    throw IndexError("embedding", "id " + std::to_string(found.value) + " at position " + std::to_string(found.index) +
                                      " is outside the table of " + std::to_string(found.bound) +
                                      " rows (found by the kernel on cuda:" + std::to_string(device) + ")",
                     "check that the tokenizer's vocabulary matches the model's vocab_size");
  if (found.code == int32_t(DeviceCheck::class_target))
    throw IndexError("cross_entropy", "target " + std::to_string(found.value) + " at position " +
                                          std::to_string(found.index) + " is out of range for V = " +
                                          std::to_string(found.bound) + " classes (found by the kernel on cuda:" +
                                          std::to_string(device) + ")",
                     "targets must be in [0, V) or equal ignore_index; check that the data's vocabulary "
                     "matches the model's vocab_size");
  throw CudaError("cuda", "a kernel on cuda:" + std::to_string(device) + " reported check " +
                              std::to_string(found.code) + " (value " + std::to_string(found.value) + ")");
}

}  // namespace keel::cuda
