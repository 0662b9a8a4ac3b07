// The emulated mbarrier and bulk copy (mbarrier.h).
#include "core/cuda/emu/mbarrier.h"

#include <fmt/format.h>

#include <atomic>
#include <cstring>

#include "core/cuda/emu/block_state.h"
#include "core/cuda/emu/ptx.h"

namespace keel::emu::ptx {

namespace {

using detail::Block;
using detail::MbarrierState;

constexpr uint32_t kMaxCount = (1u << 20) - 1;  // the ISA's arrival count range is [1, 2^20 - 1]
constexpr int64_t kMaxTx = (int64_t{1} << 20) - 1;

// The object's two words: the tagged phase parity, and the state's index in the block.
uint32_t* words(uint64_t* bar) { return reinterpret_cast<uint32_t*>(bar); }
uint32_t load_phase(uint64_t* bar) {
  return std::atomic_ref<uint32_t>(words(bar)[0]).load(std::memory_order_acquire);
}

std::string at(const std::source_location& w) { return detail::where_str(w) + " in " + w.function_name(); }

// The state of an initialized barrier; a CudaError for one that is not.
MbarrierState& state_of(Block& b, uint64_t* bar, const char* op, const std::source_location& where) {
  if (reinterpret_cast<uintptr_t>(bar) % 8 != 0) fail_misaligned(bar, 8, op, where);
  const uint32_t phase = load_phase(bar), slot = words(bar)[1];
  if ((phase & ~1u) != kPhaseTag || slot >= uint32_t(b.mbarriers.count) || b.mbarriers.slots[slot].addr != bar)
    detail::fail(b, fmt::format("{} on the mbarrier at {} ({}), which mbarrier.init has not initialized", op,
                                static_cast<const void*>(bar), at(where)),
                 "initialize it first (one thread), then fence.proxy.async and __syncthreads before any "
                 "thread or bulk copy uses it; on a GPU the result is undefined");
  return b.mbarriers.slots[slot];
}

void land(MbarrierState& m, const MbarrierState::Copy& c) {
  KEEL_TSAN_ACQUIRE(&m);  // after the issuing thread's NaN fill
  if (c.src)
    std::memcpy(c.dst, c.src, c.bytes);
  else
    detail::land_box(c.dst, c.box, c.bytes);
  m.tx -= c.bytes;
}

// Lands the copies that are due (all arrivals in) and completes the phase when nothing is pending.
void progress(Block& b, MbarrierState& m, uint64_t* bar, const std::source_location& where) {
  if (m.pending > 0) return;
  for (int i = 0; i < m.ncopies; ++i) land(m, m.copies[i]);
  m.ncopies = 0;
  if (m.tx < 0)
    detail::fail(b, fmt::format("bulk copies landed {} bytes more on the mbarrier at {} than its phase's expect_tx "
                                "announced ({})", -m.tx, static_cast<const void*>(bar), at(where)),
                 "announce every byte the phase's copies bring (mbarrier.arrive.expect_tx)");
  if (m.tx > 0) return;  // bytes announced that have not landed: the phase waits for them
  m.pending = m.expected;
  KEEL_TSAN_RELEASE(bar);  // the arrivals' writes and the landed bytes, to the waiting threads
  std::atomic_ref<uint32_t>(words(bar)[0]).store(load_phase(bar) ^ 1u, std::memory_order_release);
}

// Whether a thread of the block sleeps in mbarrier_wait_parity on this barrier.
bool has_waiter(const Block& b, uint64_t* bar) {
  for (int i = 0; i < b.n; ++i)
    if (b.threads[i].state == detail::State::spinning && b.threads[i].spin_flag == reinterpret_cast<int*>(bar))
      return true;
  return false;
}

// A bulk copy (plain or TMA) in flight on its barrier: its destination NaN until it lands.
void issue(Block& b, MbarrierState& m, uint64_t* bar, const MbarrierState::Copy& c, const std::source_location& where) {
  if (m.ncopies == MbarrierState::kCopies)
    detail::fail(b, fmt::format("more than {} bulk copies in flight on one mbarrier ({})", m.ncopies, at(where)),
                 "the emulator holds that many per barrier and phase");
  std::memset(c.dst, 0xff, c.bytes);
  KEEL_TSAN_RELEASE(&m);
  m.copies[m.ncopies++] = c;
  // Due now (the phase has its arrivals) lands it only for a thread already asleep on the barrier;
  // otherwise the next wait or arrival on it lands it, as late as a GPU may.
  if (has_waiter(b, bar)) progress(b, m, bar, where);
}

}  // namespace

void mbarrier_init(uint64_t* bar, uint32_t count, const std::source_location& where) {
  Block& b = detail::block();
  if (reinterpret_cast<uintptr_t>(bar) % 8 != 0) fail_misaligned(bar, 8, "mbarrier.init", where);
  if (count < 1 || count > kMaxCount)
    detail::fail(b, fmt::format("mbarrier.init with an arrival count of {} ({}); the ISA allows 1 to {}", count,
                                at(where), kMaxCount));
  detail::Mbarriers& all = b.mbarriers;
  int slot = 0;
  while (slot < all.count && all.slots[slot].addr != bar) ++slot;  // initialized again: its slot anew
  if (slot == all.count) {
    if (all.count == detail::Mbarriers::kCapacity)
      detail::fail(b, fmt::format("more than {} mbarriers in one block ({})", all.count, at(where)),
                   "the emulator holds that many per block");
    ++all.count;
  }
  MbarrierState& m = all.slots[slot];
  m.addr = bar, m.expected = m.pending = int(count), m.tx = 0, m.ncopies = 0;
  words(bar)[1] = uint32_t(slot);
  KEEL_TSAN_RELEASE(bar);
  std::atomic_ref<uint32_t>(words(bar)[0]).store(kPhaseTag, std::memory_order_release);
}

uint64_t mbarrier_arrive(uint64_t* bar, uint32_t expect_tx, const std::source_location& where) {
  Block& b = detail::block();
  MbarrierState& m = state_of(b, bar, expect_tx ? "mbarrier.arrive.expect_tx" : "mbarrier.arrive", where);
  if (m.tx + expect_tx > kMaxTx)
    detail::fail(b, fmt::format("mbarrier.arrive.expect_tx of {} bytes takes the transaction count of the mbarrier "
                                "at {} past {} ({})", expect_tx, static_cast<const void*>(bar), kMaxTx, at(where)));
  if (m.pending == 0)
    detail::fail(b, fmt::format("an arrival on the mbarrier at {} ({}) beyond its count of {}: its phase has all its "
                                "arrivals and waits only for bytes to land", static_cast<const void*>(bar), at(where),
                                m.expected));
  const uint64_t token = load_phase(bar) & 1u;
  m.tx += expect_tx;
  KEEL_TSAN_RELEASE(bar);
  --m.pending;
  progress(b, m, bar, where);
  return token;
}

bool mbarrier_try_wait_parity(uint64_t* bar, uint32_t parity, const std::source_location& where) {
  Block& b = detail::block();
  progress(b, state_of(b, bar, "mbarrier.try_wait.parity", where), bar, where);
  const bool complete = (load_phase(bar) & 1u) != (parity & 1u);
  if (complete) KEEL_TSAN_ACQUIRE(bar);
  return complete;
}

void mbarrier_wait_parity(uint64_t* bar, uint32_t parity, const std::source_location& where) {
  while (!mbarrier_try_wait_parity(bar, parity, where))
    wait_for_phase(bar, parity, where);
}

void bulk_copy_global_to_shared(void* dst, const void* src, uint32_t bytes, uint64_t* bar,
                                const std::source_location& where) {
  Block& b = detail::block();
  MbarrierState& m = state_of(b, bar, "cp.async.bulk", where);
  if (bytes == 0 || bytes % 16 != 0)
    detail::fail(b, fmt::format("cp.async.bulk of {} bytes ({}); the size must be a positive multiple of 16", bytes,
                                at(where)));
  if (reinterpret_cast<uintptr_t>(dst) % 16 != 0) fail_misaligned(dst, 16, "cp.async.bulk's destination", where);
  if (reinterpret_cast<uintptr_t>(src) % 16 != 0) fail_misaligned(src, 16, "cp.async.bulk's source", where);
  issue(b, m, bar, {dst, src, bytes, {}}, where);
}

void tma_load(void* dst, const void* map, const int32_t* coords, int rank, uint64_t* bar,
              const std::source_location& where) {
  Block& b = detail::block();
  MbarrierState& m = state_of(b, bar, "cp.async.bulk.tensor", where);
  detail::TmaBox box = detail::decode_tensor_map(b, map, where);
  if (box.rank != rank)
    detail::fail(b, fmt::format("cp.async.bulk.tensor.{}d ({}) with a tensor map of rank {}", rank, at(where), box.rank));
  if (reinterpret_cast<uintptr_t>(dst) % 128 != 0) fail_misaligned(dst, 128, "cp.async.bulk.tensor's destination", where);
  uint32_t bytes = box.esize;
  for (int i = 0; i < rank; ++i) box.coords[i] = coords[i], bytes *= box.box[i];
  box.dst_addr = shared_address(dst);
  issue(b, m, bar, {dst, nullptr, bytes, box}, where);
}

void fence_proxy_async() { (void)detail::block(); }

}  // namespace keel::emu::ptx
