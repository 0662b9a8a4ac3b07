// What the emulated device's tests share: device buffers, and a launch's error as text.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <functional>
#include <string>

#include "core/cuda/check.h"
#include "core/error.h"

namespace keel::emu_test {

// n elements of T in device memory (NaN bytes until written, as the emulated cudaMalloc leaves them).
template <typename T>
T* device_array(size_t n) {
  void* p = nullptr;
  KEEL_CHECK_CUDA(cudaMalloc(&p, n * sizeof(T)));
  return static_cast<T*>(p);
}

// What f (a launch) raises, at the launch or at the check after it; "(no error)" when nothing.
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
    KEEL_CHECK_LAUNCH();
  } catch (const keel::Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace keel::emu_test
