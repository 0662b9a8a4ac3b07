// Where CUDA threads wait for each other, and the CUDA rules of each wait: __syncthreads, named
// barriers, warp collectives (shuffles, votes, __syncwarp, PTX mma.sync and ldmatrix), spin-waits on
// another block's flag, and each thread's queue of cp.async copies. The scheduler that runs and suspends the threads is
// block.cpp; under TSan, the release/acquire pairs here are the happens-before edges CUDA
// guarantees, and nothing more.
#include <cstdint>

#include "core/cuda/emu/block_state.h"
#include "core/cuda/emu/mbarrier.h"

namespace keel::emu {

using namespace detail;

const char* collective_name(Collective kind) {
  switch (kind) {
    case Collective::syncwarp: return "__syncwarp";
    case Collective::shfl: return "__shfl_sync";
    case Collective::shfl_up: return "__shfl_up_sync";
    case Collective::shfl_down: return "__shfl_down_sync";
    case Collective::shfl_xor: return "__shfl_xor_sync";
    case Collective::vote: return "a warp vote (__ballot_sync / __any_sync / __all_sync)";
    case Collective::mma_ptx: return "mma.sync.aligned.m16n8k16";
    case Collective::ldmatrix: return "ldmatrix.sync.aligned.m8n8";
  }
  return "?";
}

void sync_block(const std::source_location& where) {
  Block& b = block();
  const int me = current_index(b);
  if (b.finished > 0)
    fail(b, fmt::format("__syncthreads ({}) reached by thread {} after threads {} of its block exited",
                        where_str(where), dim_str(b.threads[me].idx),
                        thread_list(b, [&](int i) { return b.threads[i].state == State::done; })),
         "every thread of a block must reach each __syncthreads: do not return early from a kernel that "
         "synchronises, or make the whole block return together");
  if (b.at_barrier == 0) b.barrier_where = where;
  const unsigned gen = b.barrier_generation;
  KEEL_TSAN_RELEASE(&b.barrier_token[gen & 1]);
  if (++b.at_barrier == b.n) {  // the last to arrive releases the others and goes on
    b.at_barrier = 0;
    ++b.barrier_generation;
    for (int i = 0; i < b.n; ++i)
      if (i != me && b.threads[i].state == State::at_barrier) {
        b.threads[i].state = State::runnable;
        b.ready.push_back(i);
      }
    // With other blocks resident, this block gives way to them as soon as its scheduler runs:
    // blocks take turns at barriers, so a hand-over between running blocks happens between them.
    if (b.grid->turns) b.give_way = true;
  } else {
    b.threads[me].state = State::at_barrier;
    wait_here(b);
  }
  KEEL_TSAN_ACQUIRE(&b.barrier_token[gen & 1]);
}

// Rounds of the ready queue, each until the others wait again, with spinners whose flag is set
// woken in between: as far as the block can go without this thread. Threads that let the others
// run themselves (a warpgroup's 128 at a wgmma wait) do not count as others, so that they go on
// once only they are left; and the rounds are bounded, whatever the others do.
void detail::let_others_run(Block& b) {
  const int me = current_index(b);
  for (int round = 0; round < 64 && !b.error && !b.give_way; ++round) {
    const bool others = b.ready.count > b.yielders || (b.spinning > 0 && wake_spinners(b));
    if (!others) return;  // nobody else can go on
    b.threads[me].state = State::runnable;
    b.ready.push_back(me);
    ++b.yielders;
    wait_here(b);
    --b.yielders;
  }
}

void wait_for_flag(const int* flag, int expected, const std::source_location& where) {
  Block& b = block();
  Thread& t = b.threads[current_index(b)];
  t.state = State::spinning;
  t.spin_flag = flag;
  t.spin_expected = expected;
  t.spin_where = where;
  t.spin_kind = Thread::Spin::flag;
  ++b.spinning;
  wait_here(b);
}

void wait_for_phase(const uint64_t* bar, uint32_t parity, const std::source_location& where) {
  Block& b = block();
  Thread& t = b.threads[current_index(b)];
  t.state = State::spinning;
  t.spin_flag = reinterpret_cast<const int*>(bar);  // the phase word: ptx::kPhaseTag | parity
  t.spin_expected = static_cast<int>(ptx::kPhaseTag | ((parity & 1u) ^ 1u));
  t.spin_where = where;
  t.spin_kind = Thread::Spin::phase;
  ++b.spinning;
  wait_here(b);
}

void named_barrier(int id, int count, bool wait, const std::source_location& where) {
  Block& b = block();
  const int me = current_index(b);
  const char* op = wait ? "bar.sync" : "bar.arrive";
  if (id < 1 || id >= kNamedBarriers)
    fail(b, fmt::format("{} {} ({}) by thread {}: named barriers are 1 to {}", op, id, where_str(where),
                        dim_str(b.threads[me].idx), kNamedBarriers - 1),
         "barrier 0 is the one __syncthreads uses: give the named barriers ids from 1");
  if (count <= 0 || count % 32 != 0 || count > (b.n + 31) / 32 * 32)
    fail(b, fmt::format("{} {}, {} ({}): the count must be a positive multiple of 32, at most the block's {} threads",
                        op, id, count, where_str(where), b.n),
         "count the threads of whole warps that take part (a warpgroup is 128)");
  NamedBarrier& nb = b.named[id];
  if (nb.count == 0) {
    nb.count = count;
    nb.where = where;
  } else if (nb.count != count) {
    fail(b, fmt::format("{} {}, {} ({}) by thread {} while its phase counts {} threads ({})", op, id, count,
                        where_str(where), dim_str(b.threads[me].idx), nb.count, where_str(nb.where)),
         "every arrival of a phase must give the same thread count");
  }
  const int gen = nb.generation;
  KEEL_TSAN_RELEASE(&nb.token[gen & 1]);
  if (++nb.arrived == nb.count) {  // the last arrival opens the barrier for the next phase
    nb.count = nb.arrived = 0;
    __atomic_store_n(&nb.generation, gen + 1, __ATOMIC_RELAXED);
    wake_spinners(b);
  } else if (wait) {
    Thread& t = b.threads[me];
    t.state = State::spinning;
    t.spin_flag = &nb.generation;
    t.spin_expected = gen + 1;
    t.spin_where = where;
    t.spin_kind = Thread::Spin::named;
    ++b.spinning;
    wait_here(b);
  }
  if (wait) KEEL_TSAN_ACQUIRE(&nb.token[gen & 1]);
}

// The scheduler's look at a flag: a plain atomic load, invisible to TSan. The spinning thread
// loads the flag again itself with acquire (ptx.h), which is the edge TSan sees.
bool detail::wake_spinners(Block& b) {
  bool woke = false;
  for (int i = 0; b.spinning > 0 && i < b.n; ++i) {
    Thread& t = b.threads[i];
    if (t.state != State::spinning || __atomic_load_n(t.spin_flag, __ATOMIC_RELAXED) != t.spin_expected) continue;
    t.state = State::runnable;
    --b.spinning;
    b.ready.push_back(i);
    woke = true;
  }
  return woke;
}

int lane_id() { return current_index(block()) % 32; }

unsigned active_lanes() {
  Block& b = block();
  const int me = current_index(b), w0 = me / 32 * 32;
  unsigned m = 0;
  for (int l = 0; l < 32 && w0 + l < b.n; ++l)
    if (b.threads[w0 + l].state != State::done) m |= 1u << l;
  return m;
}

void warp_collective(Collective kind, unsigned mask, const void* in, void* out, CombineFn combine, const void* state,
                     const std::source_location& where) {
  Block& b = block();
  const int me = current_index(b), lane = me % 32, w0 = me - lane;
  Warp& warp = b.warps[me / 32];
  Thread& self = b.threads[me];
  if (!(mask >> lane & 1u))
    fail(b, fmt::format("{} ({}) called by lane {} of warp {} with mask {:#010x}, which does not name the caller",
                        collective_name(kind), where_str(where), lane, me / 32, mask),
         "the mask must include the calling lane");
  Pending* p = nullptr;
  for (Pending& q : warp.pending) {
    if (q.mask == mask) {
      p = &q;
    } else if (q.mask & mask) {
      fail(b, fmt::format("lanes of warp {} wait in {} ({}) with mask {:#010x} while lane {} calls {} ({}) with "
                          "the overlapping mask {:#010x}",
                          me / 32, collective_name(q.kind), where_str(q.where), q.mask, lane, collective_name(kind),
                          where_str(where), mask));
    }
  }
  if (!p) {
    // The first lane to arrive checks the others: each must exist and be running. A lane that
    // exits later, while this collective waits for it, is reported when it exits (run_thread).
    for (int l = 0; l < 32; ++l) {
      if (!(mask >> l & 1u)) continue;
      if (w0 + l >= b.n)
        fail(b, fmt::format("{} ({}) with mask {:#010x} names lane {} of warp {}, which does not exist",
                            collective_name(kind), where_str(where), mask, l, me / 32),
             "a block whose size is not a multiple of 32 has a partial last warp: mask it with __activemask() or "
             "the lanes that exist");
      if (b.threads[w0 + l].state == State::done)
        fail(b, fmt::format("{} ({}) with mask {:#010x} names lane {} of warp {}, which has exited",
                            collective_name(kind), where_str(where), mask, l, me / 32),
             "every lane named in the mask must call the same function");
    }
    warp.pending.push_back({kind, mask, 0, where, combine, state});
    p = &warp.pending.back();
  } else if (p->kind != kind) {
    fail(b, fmt::format("lanes of warp {} with mask {:#010x} are in different warp-synchronous calls: {} ({}) and {} "
                        "({})",
                        me / 32, mask, collective_name(p->kind), where_str(p->where), collective_name(kind),
                        where_str(where)),
         "all lanes named in a mask must make the same call");
  }
  self.in = in;
  self.out = out;
  p->arrived |= 1u << lane;
  const bool is_sync = kind == Collective::syncwarp;
  const unsigned gen = warp.syncwarp_generation;
  if (is_sync) KEEL_TSAN_RELEASE(&warp.sync_token[gen & 1]);
  if (p->arrived == mask) {  // the last lane: compute every lane's result, wake the others
    const void* ins[32] = {};
    void* outs[32] = {};
    for (int l = 0; l < 32; ++l)
      if (mask >> l & 1u) ins[l] = b.threads[w0 + l].in, outs[l] = b.threads[w0 + l].out;
    const CombineFn fn = p->combine;
    const void* st = p->state;
    *p = warp.pending.back();
    warp.pending.pop_back();
    if (is_sync) ++warp.syncwarp_generation;
    if (fn) fn(st, ins, outs, mask);
    for (int l = 0; l < 32; ++l)
      if ((mask >> l & 1u) && l != lane) {
        b.threads[w0 + l].state = State::runnable;
        b.ready.push_back(w0 + l);
      }
  } else {
    self.state = State::in_collective;
    wait_here(b);
  }
  if (is_sync) KEEL_TSAN_ACQUIRE(&warp.sync_token[gen & 1]);
}

void async_copy_issue(const AsyncCopy& copy, const std::source_location& where) {
  Block& b = block();
  const int me = current_index(b);
  AsyncQueue& q = b.async[me];
  if (q.count == AsyncQueue::kCapacity)
    fail(b, fmt::format("thread {} issued more than {} cp.async ({}) without waiting for them",
                        dim_str(b.threads[me].idx), AsyncQueue::kCapacity, where_str(where)),
         "the emulator holds that many copies in flight per thread: wait (cp.async.wait_group) sooner");
  const int slot = (q.head + q.count++) % AsyncQueue::kCapacity;
  q.copies[slot] = copy;
  q.group[slot] = q.committed;
}

void async_copy_commit() {
  Block& b = block();
  ++b.async[current_index(b)].committed;
}

bool async_copy_next_due(int keep, AsyncCopy* out) {
  Block& b = block();
  AsyncQueue& q = b.async[current_index(b)];
  if (q.count == 0) return false;
  // Committed groups older than the `keep` newest: numbers below committed - keep.
  if (static_cast<int64_t>(q.group[q.head]) >= static_cast<int64_t>(q.committed) - keep) return false;
  *out = q.copies[q.head];
  q.head = (q.head + 1) % AsyncQueue::kCapacity;
  --q.count;
  return true;
}

}  // namespace keel::emu
