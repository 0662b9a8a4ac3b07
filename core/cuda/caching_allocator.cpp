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

using FreeBlocks = std::unordered_map<size_t, std::vector<void*>>;  // size class -> cached blocks

struct DevicePool {
  FreeBlocks free_blocks;
  size_t current = 0;   // bytes handed out to tensors (rounded sizes)
  size_t peak = 0;
  size_t reserved = 0;  // bytes obtained from cudaMalloc and not yet returned
  std::unordered_map<uint64_t, FreeBlocks> graph_pools;  // a live graph's free blocks, by pool id
  std::unordered_map<void*, uint64_t> graph_owned;       // blocks a graph pool handed out -> its id
  uint64_t capturing = 0;                                // the pool a capture allocates from; 0: none
};

std::mutex g_mu;
std::unordered_map<int, DevicePool> g_pools;
uint64_t g_next_graph_pool = 1;

void* pop(FreeBlocks& blocks, size_t size) {
  auto it = blocks.find(size);
  if (it == blocks.end() || it->second.empty()) return nullptr;
  void* p = it->second.back();
  it->second.pop_back();
  return p;
}

// During a capture: the graph's own block, else a cached one that joins the graph. The cached
// block's earlier users are ahead of every replay on the one stream, so the graph may take it.
void* allocate_for_graph(int device, DevicePool& pool, size_t size) {
  void* p = pop(pool.graph_pools[pool.capturing], size);
  if (!p) p = pop(pool.free_blocks, size);
  if (!p)
    throw CudaError("cuda allocate",
                    "a CUDA graph being captured on cuda:" + std::to_string(device) + " needs a block of " +
                        std::to_string(size) + " bytes that no cached block provides, and cudaMalloc is not allowed "
                        "while capturing",
                    "run the step once eagerly before capturing it, so that the cache holds the blocks it needs");
  pool.graph_owned[p] = pool.capturing;
  return p;
}

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
  void* p = pool.capturing ? allocate_for_graph(device, pool, size) : pop(pool.free_blocks, size);
  const bool reused = p != nullptr;
  if (!p) {
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
  // A graph's block is written at every replay by each tensor the capture placed in it, the
  // largest of its size class included: all of it stays addressable while the graph lives.
  if (pool.capturing) mark_returned(p, size);
  else mark_in_use(p, nbytes, size);
  return p;
}

void caching_free(int device, void* ptr, size_t nbytes) {
  if (!ptr) return;
  size_t size = round_size(nbytes);
  std::lock_guard<std::mutex> lock(g_mu);
  DevicePool& pool = g_pools[device];
  pool.current -= size;
  // A graph's block goes back to its graph, and so does any block freed during a capture: the
  // captured kernels may still use it at every replay.
  FreeBlocks* home = &pool.free_blocks;
  if (auto own = pool.graph_owned.find(ptr); own != pool.graph_owned.end()) {
    home = &pool.graph_pools[own->second];
    pool.graph_owned.erase(own);
  } else if (pool.capturing) {
    home = &pool.graph_pools[pool.capturing];
  }
  if (home == &pool.free_blocks) mark_cached(ptr, size);
  else mark_returned(ptr, size);
  (*home)[size].push_back(ptr);
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

uint64_t begin_graph_pool(int device) {
  check_device(device, "cuda graph capture");
  std::lock_guard<std::mutex> lock(g_mu);
  DevicePool& pool = g_pools[device];
  if (pool.capturing)
    throw CudaError("cuda graph capture", "a graph is being captured on cuda:" + std::to_string(device) + " already",
                    "capture one graph at a time");
  pool.capturing = g_next_graph_pool++;
  pool.graph_pools[pool.capturing];
  return pool.capturing;
}

void end_graph_pool(int device) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_pools[device].capturing = 0;
}

void release_graph_pool(int device, uint64_t id) {
  std::lock_guard<std::mutex> lock(g_mu);
  DevicePool& pool = g_pools[device];
  if (pool.capturing == id) pool.capturing = 0;
  auto it = pool.graph_pools.find(id);
  if (it == pool.graph_pools.end()) return;
  for (auto& [size, blocks] : it->second)
    for (void* p : blocks) {
      mark_cached(p, size);
      pool.free_blocks[size].push_back(p);
    }
  pool.graph_pools.erase(it);
  // Blocks still held by tensors go back to the cache when those are freed.
  std::erase_if(pool.graph_owned, [id](const auto& kv) { return kv.second == id; });
}

}  // namespace keel::cuda
