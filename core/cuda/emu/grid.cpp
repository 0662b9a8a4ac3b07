// The grid: which block starts when, and turns among the resident ones.
//
// Blocks start in the order of the block schedule (cuda::BlockSchedule: index order, reverse, or
// a permutation drawn per launch from a seed), and up to `resident` of them are resident at once.
// The grid runs one resident block at a time on the launching host thread (block.cpp) until it
// finishes, gives way (after a __syncthreads, when several are resident) or blocks (every thread
// that can still run waits, and one spins on a flag only another block can set); then the next
// resident block that can run takes its turn, round robin, and a finished block's place goes to
// the next block in the order. When every resident block waits on a flag and no block can start,
// nothing can ever set those flags: that is a GPU hang, reported here as a CudaError naming each
// waiting block, its kernel, its flag and the schedule.
//
// A GPU promises neither an order nor that more than one block of a launch is resident, so a
// kernel correct on a GPU is correct under every schedule here; index order with one block
// resident is the default, and the cheapest.
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <numeric>
#include <vector>

#include "core/cuda/emu/block_state.h"
#include "core/cuda/emu/launch.h"

namespace keel::emu {

using namespace detail;

namespace {

using Order = cuda::BlockSchedule::Order;
constexpr int kMaxResident = 64;

const char* order_name(Order o) { return o == Order::index ? "index" : o == Order::reverse ? "reverse" : "shuffle"; }

cuda::BlockSchedule from_environment() {
  cuda::BlockSchedule s;
  if (const char* v = std::getenv("KEEL_EMU_BLOCK_ORDER"); v && *v) {
    char* end = nullptr;
    if (std::strcmp(v, "index") == 0) s.order = Order::index;
    else if (std::strcmp(v, "reverse") == 0) s.order = Order::reverse;
    else if (std::strcmp(v, "shuffle") == 0) s.order = Order::shuffle;
    else if (std::strncmp(v, "shuffle:", 8) == 0 && v[8] && (s.seed = std::strtoull(v + 8, &end, 10), !*end))
      s.order = Order::shuffle;
    else
      throw ConfigError("emulated CUDA", std::string("KEEL_EMU_BLOCK_ORDER=") + v + " names no block order",
                        "use index (the default), reverse, shuffle or shuffle:SEED (a whole number)");
  }
  if (const char* v = std::getenv("KEEL_EMU_RESIDENT_BLOCKS"); v && *v) {
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);
    if (*end || n < 1 || n > kMaxResident)
      throw ConfigError("emulated CUDA", std::string("KEEL_EMU_RESIDENT_BLOCKS=") + v + " is not in [1, 64]");
    s.resident = static_cast<int>(n);
  }
  return s;
}

std::mutex g_schedule_mu;
cuda::BlockSchedule& schedule_slot() {
  static cuda::BlockSchedule s = from_environment();
  return s;
}
std::atomic<uint64_t> g_launches{0};  // this process's launches so far: a shuffle's second seed

uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Position in the start order -> linear block index (x fastest).
struct StartOrder {
  Order order;
  uint64_t total;
  std::vector<uint64_t> permutation;  // shuffle only
  StartOrder(const cuda::BlockSchedule& s, uint64_t n) : order(s.order), total(n) {
    if (order != Order::shuffle) return;
    permutation.resize(n);
    std::iota(permutation.begin(), permutation.end(), uint64_t{0});
    uint64_t state = s.seed ^ (0x5851f42d4c957f2dull * (g_launches.fetch_add(1, std::memory_order_relaxed) + 1));
    for (uint64_t i = n; i > 1; --i) std::swap(permutation[i - 1], permutation[splitmix64(state) % i]);
  }
  uint64_t at(uint64_t pos) const {
    return order == Order::index ? pos : order == Order::reverse ? total - 1 - pos : permutation[pos];
  }
};

uint3 block_index(uint64_t linear, dim3 grid) {
  return {static_cast<unsigned>(linear % grid.x), static_cast<unsigned>(linear / grid.x % grid.y),
          static_cast<unsigned>(linear / (uint64_t(grid.x) * grid.y))};
}

std::unique_ptr<Block> make_block() {
  auto b = std::make_unique<Block>();
  // Capacity for every stack the block can need, so that nothing reallocates while it runs.
  b->stacks.reserve(2 * kMaxThreads + 1);
  b->stacks.resize(kMaxThreads);  // the CUDA threads' own stacks, made when first used
  b->free_stacks.reserve(kMaxThreads + 1);
  for (Warp& w : b->warps) w.pending.reserve(32);
  return b;
}

// Every resident block waits on a flag no block that can run would set.
[[noreturn]] void deadlock(const std::vector<Block*>& resident, uint64_t not_started, const cuda::BlockSchedule& s) {
  using Spin = Thread::Spin;
  std::string waits;
  bool kinds[3] = {};
  for (const Block* b : resident) {
    bool named_here = false;
    for (int i = 0; b && i < b->n; ++i) {
      const Thread& t = b->threads[i];
      if (t.state != State::spinning) continue;
      kinds[static_cast<int>(t.spin_kind)] = true;
      std::string until;
      if (t.spin_kind == Spin::phase) {
        until = fmt::format("the mbarrier at {} completes its phase of parity {}", static_cast<const void*>(t.spin_flag),
                            (t.spin_expected & 1) ^ 1);
      } else if (t.spin_kind == Spin::named) {
        named_here = true;
        int id = 0;
        while (id + 1 < kNamedBarriers && &b->named[id].generation != t.spin_flag) ++id;
        until = fmt::format("named barrier {} has its {} threads; {} have arrived", id, b->named[id].count,
                            b->named[id].arrived);
      } else {
        until = fmt::format("the int at {} is {}; it is {}", static_cast<const void*>(t.spin_flag), t.spin_expected,
                            __atomic_load_n(t.spin_flag, __ATOMIC_RELAXED));
      }
      waits += fmt::format("{}block {} (thread {}) waits at {} in {} until {}", waits.empty() ? "" : "; ",
                           dim_str(b->idx), dim_str(t.idx), where_str(t.spin_where), t.spin_where.function_name(),
                           until);
    }
    // An exited thread arrives at no barrier again: the usual cause of a phase that never fills.
    if (named_here && b->finished > 0)
      waits += fmt::format("; block {}'s threads {} have exited", dim_str(b->idx),
                           thread_list(*b, [&](int i) { return b->threads[i].state == State::done; }));
  }
  const bool named = kinds[static_cast<int>(Spin::named)], phases = kinds[static_cast<int>(Spin::phase)];
  throw CudaError("emulated CUDA",
                  fmt::format("deadlock {} grid {}: {}. No other block can run: {} blocks have not "
                              "started and at most {} may be resident (block order {}, seed {})",
                              named ? "at a named barrier in" : phases ? "on an mbarrier in" : "between blocks of",
                              dim_str(gridDim), waits, not_started, s.resident, order_name(s.order), s.seed),
                  named ? "a named barrier's phase completes when as many threads as its count have arrived (bar.sync "
                          "or bar.arrive): check that every thread it counts arrives once a phase, the same number "
                          "of times on each side of a hand-over (ptx::named_barrier_sync, core/cuda/ptx.cuh)"
                  : phases
                      ? "a phase completes only when its count of arrivals and every byte its expect_tx announced "
                        "have come: check the counts, the bytes, and the parity each round waits on (round & 1 "
                        "for a slot's full barrier, (round & 1) ^ 1 for its empty one; core/cuda/ptx_sm90.cuh)"
                      : "a block may wait only for blocks that started before it: a GPU promises no order, and may "
                        "run one block at a time. Let the blocks take their work in the order they start (an "
                        "atomic ticket), as ops/cuda/attention_mma_backward.cu does");
}

}  // namespace

cuda::BlockSchedule block_schedule() {
  std::lock_guard<std::mutex> lock(g_schedule_mu);
  return schedule_slot();
}

void set_block_schedule(const cuda::BlockSchedule& s) {
  if (s.resident < 1 || s.resident > kMaxResident)
    throw ConfigError("emulated CUDA", fmt::format("{} resident blocks: the emulator takes 1 to 64", s.resident));
  std::lock_guard<std::mutex> lock(g_schedule_mu);
  schedule_slot() = s;
}

void run_grid(const Launch& launch) {
  thread_local std::vector<std::unique_ptr<Block>> pool;
  if (t_block) throw CudaError("emulated CUDA", "a kernel launched another kernel from device code",
                               "keel's emulator does not support dynamic parallelism");
  if (count_only()) return;  // the launch was checked and counted; its work is skipped
  const cuda::BlockSchedule schedule = block_schedule();
  const dim3 g = launch.grid;
  const uint64_t total = uint64_t(g.x) * g.y * g.z;
  const StartOrder order(schedule, total);
  const int resident = static_cast<int>(std::min<uint64_t>(schedule.resident, total));
  while (static_cast<int>(pool.size()) < resident) pool.push_back(make_block());
  GridState grid{&launch, known_static_shared(launch.kernel), resident > 1};
  for (int r = 0; r < resident; ++r) {
    Block& b = *pool[r];
    b.n = static_cast<int>(launch.block.x * launch.block.y * launch.block.z);
    b.body = launch.body;
    b.ctx = launch.ctx;
    b.grid = &grid;
    b.started = false;
    prepare_shared(b, launch.dynamic_shared);
  }
  blockDim = launch.block;
  gridDim = g;
  struct Reset {
    ~Reset() { t_block = nullptr; }
  } reset;
  std::vector<Block*> slots(resident, nullptr);
  uint64_t next = 0;
  int cursor = 0;
  try {
    for (;;) {
      for (int r = 0; r < resident; ++r)
        if (!slots[r] && next < total) {
          slots[r] = pool[r].get();
          slots[r]->idx = block_index(order.at(next++), g);
        }
      int pick = -1;
      bool any = false;
      for (int k = 0; k < resident && pick < 0; ++k) {
        const int r = (cursor + k) % resident;
        Block* b = slots[r];
        if (!b) continue;
        any = true;
        if (!b->started || b->exit == Block::Exit::turn || wake_spinners(*b)) pick = r;
      }
      if (!any) break;
      if (pick < 0) deadlock(slots, total - next, schedule);
      cursor = pick + 1;
      Block& b = *slots[pick];
      run_block(b);
      if (b.error) std::rethrow_exception(b.error);
      if (b.exit == Block::Exit::finished) slots[pick] = nullptr;
    }
  } catch (...) {
    for (Block* b : slots)
      if (b && b->started) abandon_block(*b);
    throw;
  }
}

}  // namespace keel::emu
