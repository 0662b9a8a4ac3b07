// The process-wide counters of core/cuda/counters.h: relaxed atomics, since only totals matter
// and every caller is on the host side of a CUDA call that costs far more.
#include "core/cuda/counters.h"

#include <fmt/format.h>

#include <atomic>

namespace keel::cuda {

namespace {
std::atomic<uint64_t> g_launches{0}, g_library_calls{0}, g_copies{0}, g_syncs{0}, g_allocations{0},
    g_device_mallocs{0}, g_tensor_maps{0};
}  // namespace

Counters Counters::operator-(const Counters& o) const {
  return {launches - o.launches, library_calls - o.library_calls, copies - o.copies,
          syncs - o.syncs,       allocations - o.allocations,     device_mallocs - o.device_mallocs,
          tensor_maps - o.tensor_maps};
}

std::string Counters::summary() const {
  auto n = [](uint64_t v, const char* one, const char* many) { return fmt::format("{} {}", v, v == 1 ? one : many); };
  return fmt::format("{}, {}, {}, {}, {}{}", n(launches, "launch", "launches"),
                     n(library_calls, "library call", "library calls"), n(copies, "copy", "copies"),
                     n(syncs, "sync", "syncs"), n(allocations, "allocation", "allocations"),
                     tensor_maps ? ", " + n(tensor_maps, "tensor map", "tensor maps") : "");
}

Counters counters() {
  constexpr auto r = std::memory_order_relaxed;
  return {g_launches.load(r), g_library_calls.load(r), g_copies.load(r),
          g_syncs.load(r),    g_allocations.load(r),   g_device_mallocs.load(r), g_tensor_maps.load(r)};
}

namespace detail {
void count_launch() { g_launches.fetch_add(1, std::memory_order_relaxed); }
void count_library_call() { g_library_calls.fetch_add(1, std::memory_order_relaxed); }
void count_copy() { g_copies.fetch_add(1, std::memory_order_relaxed); }
void count_sync() { g_syncs.fetch_add(1, std::memory_order_relaxed); }
void count_allocation(bool device_malloc) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (device_malloc) g_device_mallocs.fetch_add(1, std::memory_order_relaxed);
}
void count_tensor_map() { g_tensor_maps.fetch_add(1, std::memory_order_relaxed); }
}  // namespace detail

}  // namespace keel::cuda
