#include "core/allocator.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <new>

#include "core/cuda/caching_allocator.h"
#include "core/error.h"

namespace keel {

namespace {
constexpr size_t kCpuAlignment = 64;
std::atomic<size_t> g_cpu_current{0};
std::atomic<size_t> g_cpu_peak{0};

// Freed CPU blocks of at least kCacheMin bytes wait here for the next request of their size.
// The C library maps a block that large fresh from the kernel on every request and returns it on
// every free (glibc: above 32 MB always), so each first touch of each page took a page fault:
// 45,000 faults a step in the demo-shaped CPU step, whose logits and their gradient are 82 MB
// each, about a fifth of the step. A training step asks for the same sizes every time, so a
// cache of exact sizes serves it without the kernel after the first step. The cache holds at
// most the peak of bytes in use, and is emptied when the system refuses memory. Not under
// AddressSanitizer: a reused block would hide a use after free from it.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kCache = false;
#else
constexpr bool kCache = true;
#endif
constexpr size_t kCacheMin = size_t{1} << 20;
struct Cached {
  uint64_t age;  // when it was cached: the oldest goes first when the cache is full
  void* p;
};
std::mutex g_cache_mu;
// Never destroyed, since frees run at exit, after static destructors. Built in static storage
// rather than on the heap, so that LeakSanitizer sees it reachable and reports no leak.
using CacheMap = std::multimap<size_t, Cached>;
alignas(CacheMap) unsigned char g_cache_storage[sizeof(CacheMap)];
CacheMap* const g_cache = new (g_cache_storage) CacheMap;
size_t g_cached = 0;
uint64_t g_age = 0;

void* cache_take(size_t rounded) {
  std::lock_guard<std::mutex> lock(g_cache_mu);
  auto it = g_cache->find(rounded);
  if (it == g_cache->end()) return nullptr;
  void* p = it->second.p;
  g_cache->erase(it);
  g_cached -= rounded;
  return p;
}

// Keeps p (of `rounded` bytes) for reuse, returning the oldest blocks to the system until the
// cache holds at most the peak of bytes in use; false (p not kept) when p alone is more than that.
bool cache_put(void* p, size_t rounded) {
  std::lock_guard<std::mutex> lock(g_cache_mu);
  const size_t cap = std::max(g_cpu_peak.load(), kCacheMin);
  if (rounded > cap) return false;
  while (g_cached + rounded > cap) {
    auto oldest = g_cache->begin();
    for (auto it = g_cache->begin(); it != g_cache->end(); ++it)
      if (it->second.age < oldest->second.age) oldest = it;
    std::free(oldest->second.p);
    g_cached -= oldest->first;
    g_cache->erase(oldest);
  }
  g_cache->emplace(rounded, Cached{g_age++, p});
  g_cached += rounded;
  return true;
}

void cache_clear() {
  std::lock_guard<std::mutex> lock(g_cache_mu);
  for (auto& [size, c] : *g_cache) std::free(c.p);
  g_cache->clear();
  g_cached = 0;
}

size_t cpu_rounded(size_t nbytes) { return (nbytes + kCpuAlignment - 1) / kCpuAlignment * kCpuAlignment; }

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
  const size_t rounded = cpu_rounded(nbytes);
  void* p = kCache && rounded >= kCacheMin ? cache_take(rounded) : nullptr;
  if (!p) p = std::aligned_alloc(kCpuAlignment, rounded);
  if (!p && kCache) {  // the cache's blocks back to the system, then once more
    cache_clear();
    p = std::aligned_alloc(kCpuAlignment, rounded);
  }
  if (!p)
    throw OutOfMemoryError("allocate", "could not allocate " + std::to_string(nbytes) + " bytes on the CPU",
                           "use a smaller batch or sequence length, or a smaller model");
  note_cpu_alloc(nbytes);
  return p;
}

void deallocate(Device device, void* ptr, size_t nbytes) {
  if (!ptr) return;
  if (device.is_cuda()) return cuda::caching_free(device.index, ptr, nbytes);
  const size_t rounded = cpu_rounded(nbytes);
  if (!(kCache && rounded >= kCacheMin && cache_put(ptr, rounded))) std::free(ptr);
  g_cpu_current.fetch_sub(nbytes);
}

MemoryStats memory_stats(Device device) {
  if (device.is_cuda()) return cuda::caching_stats(device.index);
  std::lock_guard<std::mutex> lock(g_cache_mu);
  return {g_cpu_current.load(), g_cpu_peak.load(), g_cpu_current.load() + g_cached};
}

void reset_peak_memory(Device device) {
  if (device.is_cuda()) return cuda::caching_reset_peak(device.index);
  g_cpu_peak.store(g_cpu_current.load());
}

}  // namespace keel
