// sm_90's bulk groups on the emulated GPU (mbarrier.h says what a GPU promises and what the
// emulator checks): the asynchronous copies out of shared memory that complete by group rather
// than on an mbarrier, TMA stores (cp.async.bulk.tensor, global <- shared; the box is written in
// tma.cpp) and bulk reductions (cp.reduce.async.bulk .add.f32), and the thread's commits and waits.
//
// A copy joins its thread's open group; commit_group closes it; wait_group N returns once every
// group but the N most recently committed is done. A GPU reads the shared memory at any moment
// between the copy and that wait, so the emulator hashes it at both ends, lets the block's other
// threads run before the wait, and writes the global side then: shared memory that changed in
// between (this thread's writes, or another's that no barrier held back) is an error naming the
// copy and the wait, and a thread that exits with a copy no wait covered is one too (block.cpp).
#include <fmt/format.h>

#include <atomic>

#include "core/cuda/emu/block_state.h"
#include "core/cuda/emu/mbarrier.h"
#include "core/cuda/emu/ptx.h"

namespace keel::emu::detail {

namespace {

uint64_t fnv1a(const unsigned char* p, uint32_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (uint32_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

const char* kind_name(const BulkStores::Store& s) {
  return s.reduce_to ? "cp.reduce.async.bulk" : "TMA store";
}

}  // namespace

std::string unwaited_stores(const Block& b, int i) {
  const BulkStores& q = b.bulk[i];
  if (q.count == 0) return {};
  const BulkStores::Store& s = q.stores[0];
  return fmt::format("{} bulk cop{} that no cp.async.bulk.wait_group covered{}, the first a {} issued at {}", q.count,
                     q.count > 1 ? "ies" : "y", s.group == q.committed ? " (never committed)" : "", kind_name(s),
                     where_str(s.where));
}

}  // namespace keel::emu::detail

namespace keel::emu::ptx {

using detail::Block;
using detail::BulkStores;

namespace {

// The issuing thread's groups, with room for one more copy.
BulkStores& groups_for_one_more(Block& b, const std::source_location& where) {
  BulkStores& q = b.bulk[detail::current_index(b)];
  if (q.count == BulkStores::kCapacity)
    detail::fail(b, fmt::format("more than {} bulk copies of one thread in flight ({})", q.count,
                                detail::where_str(where)),
                 "the emulator holds that many per thread: wait for older ones (ptx::bulk_wait_group_read)");
  return q;
}

}  // namespace

void tma_store(const void* map, const int32_t* coords, int rank, const void* src, const std::source_location& where) {
  Block& b = detail::block();
  BulkStores& q = groups_for_one_more(b, where);
  detail::TmaBox box = detail::decode_tensor_map(b, map, where);
  if (box.rank != rank)
    detail::fail(b, fmt::format("cp.async.bulk.tensor.{}d ({}) with a tensor map of rank {}", rank,
                                detail::where_str(where), box.rank));
  if (reinterpret_cast<uintptr_t>(src) % 128 != 0) fail_misaligned(src, 128, "cp.async.bulk.tensor's source", where);
  uint32_t bytes = box.esize;
  for (int i = 0; i < rank; ++i) box.coords[i] = coords[i], bytes *= box.box[i];
  box.dst_addr = shared_address(src);
  const auto* from = static_cast<const unsigned char*>(src);
  q.stores[q.count++] = {from, box, nullptr, bytes, q.committed, detail::fnv1a(from, bytes), where};
}

void bulk_reduce_add_f32(float* dst, const float* src, uint32_t bytes, const std::source_location& where) {
  Block& b = detail::block();
  BulkStores& q = groups_for_one_more(b, where);
  if (bytes == 0 || bytes % 16 != 0)
    detail::fail(b, fmt::format("cp.reduce.async.bulk of {} bytes ({}); the size must be a positive multiple of 16",
                                bytes, detail::where_str(where)));
  if (reinterpret_cast<uintptr_t>(src) % 16 != 0) fail_misaligned(src, 16, "cp.reduce.async.bulk's source", where);
  if (reinterpret_cast<uintptr_t>(dst) % 16 != 0) fail_misaligned(dst, 16, "cp.reduce.async.bulk's destination", where);
  (void)shared_address(src);  // a CudaError unless src is in the block's shared memory
  const auto* from = reinterpret_cast<const unsigned char*>(src);
  q.stores[q.count++] = {from, {}, dst, bytes, q.committed, detail::fnv1a(from, bytes), where};
}

void bulk_commit_group(const std::source_location&) {
  Block& b = detail::block();
  BulkStores& q = b.bulk[detail::current_index(b)];
  if (q.count > 0 && q.stores[q.count - 1].group == q.committed) ++q.committed;  // an empty group is no group
}

void bulk_wait_group(int keep, bool read_only, const std::source_location& where) {
  Block& b = detail::block();
  BulkStores& q = b.bulk[detail::current_index(b)];
  const char* wait = read_only ? "cp.async.bulk.wait_group.read" : "cp.async.bulk.wait_group";
  // The copies this wait covers read their shared memory at some moment before it returns: the
  // block's other threads run first, so that one that writes that memory too early (no barrier
  // held it back until the wait) does so inside the window the hashes check.
  if (q.count > 0 && q.stores[0].group + keep < q.committed) detail::let_others_run(b);
  int done = 0;
  for (; done < q.count && q.stores[done].group + keep < q.committed; ++done) {
    const BulkStores::Store& s = q.stores[done];
    if (detail::fnv1a(s.src, s.bytes) != s.hash)
      detail::fail(b, fmt::format("the shared memory at {} that the {} issued at {} reads changed between the copy "
                                  "and the {} at {}", static_cast<const void*>(s.src), detail::kind_name(s),
                                  detail::where_str(s.where), wait, detail::where_str(where)),
                   "a GPU reads it at any moment in between: write it before the copy (each writer's "
                   "ptx::fence_proxy_async, then a barrier of the writers) and again only after a wait covers it");
    if (s.reduce_to) {  // each element an atomic add, as the copy engine's reductions are
      const auto* add = reinterpret_cast<const float*>(s.src);
      for (uint32_t i = 0; i < s.bytes / 4; ++i)
        std::atomic_ref<float>(s.reduce_to[i]).fetch_add(add[i], std::memory_order_relaxed);
    } else {
      detail::store_box(s.src, s.box, s.bytes);
    }
  }
  for (int i = done; i < q.count; ++i) q.stores[i - done] = q.stores[i];
  q.count -= done;
}

}  // namespace keel::emu::ptx
