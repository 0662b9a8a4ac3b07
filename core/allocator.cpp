#include "core/allocator.h"

#include <atomic>
#include <cstdlib>
#include <new>

#include "core/cuda/caching_allocator.h"
#include "core/error.h"

namespace keel {

namespace {
constexpr size_t kCpuAlignment = 64;
std::atomic<size_t> g_cpu_current{0};
std::atomic<size_t> g_cpu_peak{0};

void note_cpu_alloc(size_t n) {
  size_t now = g_cpu_current.fetch_add(n) + n;
  size_t peak = g_cpu_peak.load();
  while (now > peak && !g_cpu_peak.compare_exchange_weak(peak, now)) {
  }
}
}  // namespace

void* allocate(Device device, size_t nbytes) {
  // Empty tensors own no memory on any device (so their metadata works on a CPU-only build).
  if (nbytes == 0) return nullptr;
  if (device.is_cuda()) return cuda::caching_allocate(device.index, nbytes);
  size_t rounded = (nbytes + kCpuAlignment - 1) / kCpuAlignment * kCpuAlignment;
  void* p = std::aligned_alloc(kCpuAlignment, rounded);
  if (!p)
    throw OutOfMemoryError("allocate", "could not allocate " + std::to_string(nbytes) + " bytes on the CPU",
                           "use a smaller batch or sequence length, or a smaller model");
  note_cpu_alloc(nbytes);
  return p;
}

void deallocate(Device device, void* ptr, size_t nbytes) {
  if (!ptr) return;
  if (device.is_cuda()) return cuda::caching_free(device.index, ptr, nbytes);
  std::free(ptr);
  g_cpu_current.fetch_sub(nbytes);
}

MemoryStats memory_stats(Device device) {
  if (device.is_cuda()) return cuda::caching_stats(device.index);
  return {g_cpu_current.load(), g_cpu_peak.load(), g_cpu_current.load()};
}

void reset_peak_memory(Device device) {
  if (device.is_cuda()) return cuda::caching_reset_peak(device.index);
  g_cpu_peak.store(g_cpu_current.load());
}

}  // namespace keel
