#include "core/cuda/caching_allocator.h"

#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/cuda/check.h"
#include "core/cuda/runtime.h"

namespace keel::cuda {

namespace {
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
  KEEL_CHECK_CUDA(cudaStreamSynchronize(detail::stream(device)));
  for (auto& [size, blocks] : pool.free_blocks) {
    for (void* p : blocks) {
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
  auto it = pool.free_blocks.find(size);
  if (it != pool.free_blocks.end() && !it->second.empty()) {
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
  pool.current += size;
  if (pool.current > pool.peak) pool.peak = pool.current;
  return p;
}

void caching_free(int device, void* ptr, size_t nbytes) {
  if (!ptr) return;
  size_t size = round_size(nbytes);
  std::lock_guard<std::mutex> lock(g_mu);
  DevicePool& pool = g_pools[device];
  pool.current -= size;
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
