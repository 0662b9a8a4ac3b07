#include "core/cuda/caching_allocator.h"

#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/cuda/check.h"
#include "core/cuda/counters.h"
#include "core/cuda/runtime.h"

#if defined(KEEL_CUDA_EMULATED) && defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif

namespace keel::cuda {

namespace {
// On the emulated GPU under AddressSanitizer (preset emu-asan) device memory is host memory, so
// the allocator tells ASan what a kernel may touch: the bytes a tensor asked for, not the rest
// of its rounded block, and nothing of a block back in the cache. A kernel that overruns a
// tensor or uses one after it was freed is then reported. Elsewhere these do nothing.
#if defined(KEEL_CUDA_EMULATED) && defined(__SANITIZE_ADDRESS__)
void mark_in_use(void* p, size_t nbytes, size_t size) {
  ASAN_UNPOISON_MEMORY_REGION(p, nbytes);
  ASAN_POISON_MEMORY_REGION(static_cast<char*>(p) + nbytes, size - nbytes);
}
void mark_cached(void* p, size_t size) { ASAN_POISON_MEMORY_REGION(p, size); }
void mark_returned(void* p, size_t size) { ASAN_UNPOISON_MEMORY_REGION(p, size); }
#else
void mark_in_use(void*, size_t, size_t) {}
void mark_cached(void*, size_t) {}
void mark_returned(void*, size_t) {}
#endif

struct DevicePool {
  std::unordered_map<size_t, std::vector<void*>> free_blocks;  // size class -> cached blocks
  size_t current = 0;   // bytes handed out to tensors (rounded sizes)
  size_t peak = 0;
  size_t reserved = 0;  // bytes obtained from cudaMalloc and not yet returned
};

std::mutex g_mu;
std::unordered_map<int, DevicePool> g_pools;

void release_cached(int device, DevicePool& pool) {
  KEEL_CHECK_CUDA(cudaSetDevice(device));
  detail::count_sync();
  KEEL_CHECK_CUDA(cudaStreamSynchronize(detail::stream(device)));
  for (auto& [size, blocks] : pool.free_blocks) {
    for (void* p : blocks) {
      mark_returned(p, size);
      KEEL_CHECK_CUDA(cudaFree(p));
      pool.reserved -= size;
    }
  }
  pool.free_blocks.clear();
}
}  // namespace

void* caching_allocate(int device, size_t nbytes) {
  check_device(device, "cuda allocate");
  if (nbytes == 0) return nullptr;
  size_t size = round_size(nbytes);
  std::lock_guard<std::mutex> lock(g_mu);
  DevicePool& pool = g_pools[device];
  void* p = nullptr;
  bool reused = false;
  auto it = pool.free_blocks.find(size);
  if (it != pool.free_blocks.end() && !it->second.empty()) {
    reused = true;
    p = it->second.back();
    it->second.pop_back();
  } else {
    KEEL_CHECK_CUDA(cudaSetDevice(device));
    cudaError_t err = cudaMalloc(&p, size);
    if (err == cudaErrorMemoryAllocation) {
      // The cache may hold enough in other size classes: give it back and try once more.
      (void)cudaGetLastError();
      release_cached(device, pool);
      err = cudaMalloc(&p, size);
    }
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      throw OutOfMemoryError("cuda allocate",
                             "could not allocate " + std::to_string(size >> 20) + " MiB on cuda:" + std::to_string(device) +
                                 " (" + std::to_string(pool.current >> 20) + " MiB in use by tensors)",
                             "use a smaller batch or sequence length, or a smaller model");
    }
    KEEL_CHECK_CUDA(err);
    pool.reserved += size;
  }
  detail::count_allocation(/*device_malloc=*/p != nullptr && !reused);
  pool.current += size;
  if (pool.current > pool.peak) pool.peak = pool.current;
  mark_in_use(p, nbytes, size);
  return p;
}

void caching_free(int device, void* ptr, size_t nbytes) {
  if (!ptr) return;
  size_t size = round_size(nbytes);
  std::lock_guard<std::mutex> lock(g_mu);
  DevicePool& pool = g_pools[device];
  pool.current -= size;
  mark_cached(ptr, size);
  pool.free_blocks[size].push_back(ptr);
}

MemoryStats caching_stats(int device) {
  std::lock_guard<std::mutex> lock(g_mu);
  const DevicePool& pool = g_pools[device];
  return {pool.current, pool.peak, pool.reserved};
}

void caching_reset_peak(int device) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_pools[device].peak = g_pools[device].current;
}

void empty_cache(int device) {
  std::lock_guard<std::mutex> lock(g_mu);
  release_cached(device, g_pools[device]);
}

}  // namespace keel::cuda
