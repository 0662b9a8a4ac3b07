// What the CUDA runtime keeps per kernel, on the emulated GPU, and the checks of a launch: the
// dynamic shared-memory limit cudaFuncSetAttribute sets, the static shared memory the kernel's
// blocks have declared (KEEL_SHARED: the emulator learns it when a block runs, shared_memory.cpp,
// where a GPU's runtime has it from the compiler), cudaFuncGetAttributes, and check_launch, whose
// errors are what the next cudaGetLastError() returns.
#include <cuda_runtime.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <string>

#include <fmt/format.h>

#include "core/cuda/emu/gpu_model.h"
#include "core/cuda/emu/launch.h"

namespace {

struct Kernels {
  std::mutex mu;
  std::map<const void*, int> max_dynamic_shared;  // kernel -> cudaFuncSetAttribute's limit
  std::map<const void*, size_t> static_shared;    // kernel -> static shared bytes its blocks declared
};
Kernels& kernels() {
  static Kernels* k = new Kernels;  // never destroyed: launches may come from static destructors
  return *k;
}

cudaError_t record(cudaError_t err, std::string detail) { return keel::emu::set_error(err, std::move(detail)); }

}  // namespace

namespace keel::emu {

size_t known_static_shared(const void* kernel) {
  Kernels& r = kernels();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.static_shared.find(kernel);
  return it == r.static_shared.end() ? 0 : it->second;
}

void learn_static_shared(const void* kernel, size_t bytes) {
  Kernels& r = kernels();
  std::lock_guard<std::mutex> lock(r.mu);
  size_t& known = r.static_shared[kernel];
  if (bytes > known) known = bytes;
}

}  // namespace keel::emu

cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaSuccess;  // hints (carveout): nothing to do
  const keel::emu::GpuModel& m = keel::emu::gpu_model();
  const size_t static_bytes = keel::emu::known_static_shared(func);
  if (value < 0 || static_bytes + static_cast<size_t>(value) > m.shared_per_block_optin)
    return record(cudaErrorInvalidValue,
                  fmt::format("cudaFuncSetAttribute: {} bytes of dynamic shared memory asked for a kernel with {} of "
                              "static shared memory, the {} allows {} per block",
                              value, static_bytes, m.name, m.shared_per_block_optin));
  Kernels& r = kernels();
  std::lock_guard<std::mutex> lock(r.mu);
  r.max_dynamic_shared[func] = value;
  return cudaSuccess;
}

// What a GPU's runtime says of a kernel, as far as the emulator knows it: the static shared
// memory its blocks have declared (0 until one ran), and the dynamic shared memory a launch may
// ask for: cudaFuncSetAttribute's value, else what 48 KB leaves beside the static bytes.
cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attr, const void* func) {
  if (!attr || !func) return record(cudaErrorInvalidDeviceFunction, "cudaFuncGetAttributes: no kernel");
  const keel::emu::GpuModel& m = keel::emu::gpu_model();
  const size_t static_bytes = keel::emu::known_static_shared(func);
  int max_dynamic = static_cast<int>(m.shared_per_block - std::min(static_bytes, m.shared_per_block));
  {
    Kernels& r = kernels();
    std::lock_guard<std::mutex> lock(r.mu);
    if (auto it = r.max_dynamic_shared.find(func); it != r.max_dynamic_shared.end()) max_dynamic = it->second;
  }
  *attr = cudaFuncAttributes{};
  attr->sharedSizeBytes = static_bytes;
  attr->maxDynamicSharedSizeBytes = max_dynamic;
  attr->maxThreadsPerBlock = 1024;
  attr->ptxVersion = attr->binaryVersion = 10 * m.major + m.minor;
  return cudaSuccess;
}

namespace keel::emu {

namespace {
// Static plus dynamic shared memory against the kernel's limit, as a GPU checks a launch.
bool check_shared(Launch& l) {
  const GpuModel& m = gpu_model();
  const size_t static_bytes = known_static_shared(l.kernel), dynamic = l.dynamic_shared;
  {
    Kernels& r = kernels();
    std::lock_guard<std::mutex> lock(r.mu);
    auto it = r.max_dynamic_shared.find(l.kernel);
    l.max_dynamic_attribute = it == r.max_dynamic_shared.end() ? -1 : it->second;
  }
  const size_t limit = l.max_dynamic_attribute >= 0 ? static_cast<size_t>(l.max_dynamic_attribute)
                                                    : m.shared_per_block - std::min(static_bytes, m.shared_per_block);
  if (dynamic <= limit && static_bytes + dynamic <= m.shared_per_block_optin) return true;
  const std::string statics = static_bytes ? fmt::format(" beside its {} bytes of static shared memory", static_bytes) : "";
  record(cudaErrorInvalidValue,
         fmt::format("{} bytes of dynamic shared memory{} for a kernel allowed {}{}", dynamic, statics, limit,
                     static_bytes + dynamic <= m.shared_per_block_optin
                         ? " (raise it with cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, n))"
                         : fmt::format("; the {} has at most {} per block", m.name, m.shared_per_block_optin)));
  return false;
}
}  // namespace

bool check_launch(Launch& l, cudaStream_t) {
  const dim3 g = l.grid, b = l.block;
  const uint64_t threads = uint64_t(b.x) * b.y * b.z;
  if (threads == 0 || uint64_t(g.x) * g.y * g.z == 0) {
    record(cudaErrorInvalidConfiguration, fmt::format("empty launch: grid ({},{},{}), block ({},{},{})", g.x, g.y, g.z,
                                                      b.x, b.y, b.z));
    return false;
  }
  if (threads > 1024 || b.x > 1024 || b.y > 1024 || b.z > 64) {
    record(cudaErrorInvalidConfiguration,
           fmt::format("block ({},{},{}) has {} threads; CUDA allows at most 1024 (x, y <= 1024, z <= 64)", b.x, b.y,
                       b.z, threads));
    return false;
  }
  if (g.x > 2147483647u || g.y > 65535 || g.z > 65535) {
    record(cudaErrorInvalidConfiguration,
           fmt::format("grid ({},{},{}): grid.x must be below 2^31 and grid.y, grid.z at most 65535", g.x, g.y, g.z));
    return false;
  }
  return check_shared(l);
}

}  // namespace keel::emu
