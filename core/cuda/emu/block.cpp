// The block scheduler: fibers as CUDA threads, barriers, warp collectives and the CUDA rules.
//
// This file is compiled without ThreadSanitizer instrumentation in the emu-tsan build: the
// scheduler's own bookkeeping is invisible to TSan, and it tells TSan about exactly the
// happens-before edges CUDA guarantees (a barrier orders everything before it in every
// participating thread before everything after it), so a kernel that forgets a barrier between
// one thread's shared-memory write and another's read is reported as a data race.
#include "core/cuda/emu/block.h"

#include <array>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <vector>

#include <fmt/format.h>

#include "core/cuda/emu/fiber.h"
#include "core/error.h"

#if defined(KEEL_EMU_TSAN)
#include <sanitizer/tsan_interface.h>
#define KEEL_TSAN_RELEASE(addr) __tsan_release(const_cast<void*>(static_cast<const volatile void*>(addr)))
#define KEEL_TSAN_ACQUIRE(addr) __tsan_acquire(const_cast<void*>(static_cast<const volatile void*>(addr)))
#else
#define KEEL_TSAN_RELEASE(addr) ((void)(addr))
#define KEEL_TSAN_ACQUIRE(addr) ((void)(addr))
#endif

constinit thread_local uint3 threadIdx{};
constinit thread_local uint3 blockIdx{};
constinit thread_local dim3 blockDim{};
constinit thread_local dim3 gridDim{};

namespace keel::emu {

namespace {

constexpr int kMaxThreads = 1024;

#if defined(KEEL_EMU_TSAN)
// Under TSan every CUDA thread runs on a stack of its own (stack memory reused by another CUDA
// thread would look like a race) and is a TSan fiber of its own.
constexpr bool kOwnStacks = true;
#else
constexpr bool kOwnStacks = false;
#endif

enum class State : uint8_t { not_started, runnable, at_barrier, in_collective, done };

struct Thread {
  uint3 idx{};
  State state = State::not_started;
  Context suspended;         // where it waits, while it waits
  int stack = -1;            // the stack its frames are on
  const void* in = nullptr;  // operands while waiting in a warp collective
  void* out = nullptr;
  void* tsan = nullptr;      // its TSan fiber (TSan builds)
};

// A collective some lanes of a warp have reached and others not yet.
struct Pending {
  Collective kind;
  unsigned mask = 0, arrived = 0;
  std::source_location where;
  CombineFn combine = nullptr;
  const void* state = nullptr;
};

// The cp.async copies one CUDA thread has in flight (block.h): a fixed ring, like everything
// the scheduler and the CUDA threads both touch.
struct AsyncQueue {
  static constexpr int kCapacity = 128;
  std::array<AsyncCopy, kCapacity> copies{};
  std::array<uint32_t, kCapacity> group{};
  int head = 0, count = 0;
  uint32_t committed = 0;  // groups committed so far; the open group has this number
  void clear() { head = count = 0, committed = 0; }
};

struct Warp {
  std::vector<Pending> pending;
  std::array<char, 2> sync_token{};  // TSan addresses of __syncwarp, by generation parity
  unsigned syncwarp_generation = 0;
};

struct Block {
  std::unique_ptr<Thread[]> threads{new Thread[kMaxThreads]};
  std::unique_ptr<AsyncQueue[]> async{new AsyncQueue[kMaxThreads]};  // by thread index
  std::array<Warp, kMaxThreads / 32> warps;
  int n = 0;          // threads in this block
  int running = -1;   // the CUDA thread on the CPU, -1 while the scheduler runs
  int at_barrier = 0, finished = 0;
  std::source_location barrier_where;
  unsigned barrier_generation = 0;
  std::array<char, 2> barrier_token{};  // TSan addresses of __syncthreads, by generation parity
  char start_token = 0, end_token = 0;  // TSan: launch -> threads, threads -> after the block
  // CUDA threads ready to run, in order. A fixed ring, as is everything the scheduler and the
  // CUDA threads both touch: under TSan, memory the allocator hands from one to the other would
  // look like a race between them.
  struct Ready {
    std::array<int, kMaxThreads> ring{};
    int head = 0, count = 0;
    bool empty() const { return count == 0; }
    void clear() { head = count = 0; }
    void push_back(int i) { ring[(head + count++) % kMaxThreads] = i; }
    int front() const { return ring[head]; }
    int pop_front() {
      const int i = ring[head];
      head = (head + 1) % kMaxThreads, --count;
      return i;
    }
  } ready;
  std::exception_ptr error;
  // Stacks: [0, kMaxThreads) are the CUDA threads' own (TSan builds), the rest a pool that the
  // scheduler and the threads it runs in turn share.
  std::vector<std::unique_ptr<Stack>> stacks;
  std::vector<int> free_stacks;
  int current_stack = -1;
  Context host;          // the launching host code, suspended while the block runs
  bool from_host = false;
  void* tsan_host = nullptr;
  std::vector<unsigned char> shared_storage;  // dynamic shared memory of the running block
  unsigned char* shared = nullptr;
  size_t shared_bytes = 0;
  void (*body)(const void*) = nullptr;
  const void* ctx = nullptr;
};

thread_local Block* t_block = nullptr;  // the block running on this host thread, if any

Block& block() {
  if (!t_block) throw CudaError("emulated CUDA", "a device function was called outside a kernel");
  return *t_block;
}

std::string dim_str(uint3 d) { return fmt::format("({},{},{})", d.x, d.y, d.z); }
std::string where_str(const std::source_location& w) { return fmt::format("{}:{}", w.file_name(), w.line()); }

// "threads 3, 4 and 96..127": indices of a block's threads that satisfy pred.
template <typename Pred>
std::string thread_list(const Block& b, Pred pred) {
  std::string out;
  int count = 0;
  for (int i = 0; i < b.n;) {
    if (!pred(i)) {
      ++i;
      continue;
    }
    int j = i;
    while (j + 1 < b.n && pred(j + 1)) ++j;
    out += (count++ ? ", " : "") + (i == j ? std::to_string(i) : fmt::format("{}..{}", i, j));
    i = j + 1;
  }
  return out.empty() ? "none" : out;
}

[[noreturn]] void fail(const Block& b, const std::string& what, const std::string& hint = {}) {
  throw CudaError("emulated CUDA",
                  fmt::format("{} (block {} of grid {}, {} threads per block)", what, dim_str(blockIdx), dim_str(gridDim),
                              b.n),
                  hint);
}

int current_index(const Block& b) {
  if (b.running < 0) throw CudaError("emulated CUDA", "a device function was called outside a kernel");
  return b.running;
}

// ---- stacks ----
Stack& stack(Block& b, int i) {
  if (!b.stacks[i]) b.stacks[i] = std::make_unique<Stack>();
  return *b.stacks[i];
}
int take_pool_stack(Block& b) {
  if (b.free_stacks.empty()) {
    b.stacks.emplace_back();
    return static_cast<int>(b.stacks.size()) - 1;
  }
  const int s = b.free_stacks.back();
  b.free_stacks.pop_back();
  return s;
}
void release_stack(Block& b, int s) {
  if (s >= kMaxThreads) b.free_stacks.push_back(s);
}

void tsan_switch(void* fiber) {
#if defined(KEEL_EMU_TSAN)
  __tsan_switch_to_fiber(fiber, __tsan_switch_to_fiber_no_sync);
#else
  (void)fiber;
#endif
}
void* tsan_fiber(Thread& t) {
#if defined(KEEL_EMU_TSAN)
  if (!t.tsan) t.tsan = __tsan_create_fiber(0);
#endif
  return t.tsan;
}

// ---- running the threads of a block ----
void schedule(Block& b);
void start_on_own_stack();

// CUDA thread i's whole life, from the first line of the kernel to its exit, on the stack that
// is current; returns to the scheduler loop that called it, possibly much later and on that
// same stack after the thread waited (the loop carries on from there).
void run_thread(Block& b, int i) {
  Thread& t = b.threads[i];
  t.state = State::runnable;
  t.stack = b.current_stack;
  threadIdx = t.idx;
  b.running = i;
  tsan_switch(tsan_fiber(t));
  KEEL_TSAN_ACQUIRE(&b.start_token);
  try {
    b.body(b.ctx);
    // A thread that leaves while others wait for it would hang a GPU.
    if (b.at_barrier > 0)
      fail(b, fmt::format("thread {} exited while {} other threads of its block wait at __syncthreads ({}) for it",
                          dim_str(t.idx), b.at_barrier, where_str(b.barrier_where)),
           "every thread of a block must reach each __syncthreads: return only after the last barrier, or make "
           "the whole block return together");
    const int lane = i % 32;
    for (const Pending& p : b.warps[i / 32].pending)
      if (p.mask >> lane & 1u)
        fail(b, fmt::format("thread {} (lane {}) exited while lanes of mask {:#010x} wait for it in {} ({})",
                            dim_str(t.idx), lane, p.mask, collective_name(p.kind), where_str(p.where)),
             "every lane named in a *_sync mask must call the same function");
    t.state = State::done;
    ++b.finished;
    KEEL_TSAN_RELEASE(&b.end_token);
  } catch (...) {
    b.error = std::current_exception();
    KEEL_TSAN_RELEASE(&b.error);  // the host reads the exception this thread made
  }
  tsan_switch(b.tsan_host);
  b.running = -1;
}

std::string describe_deadlock(const Block& b) {
  std::string s = fmt::format("the threads of the block wait for each other forever: {} at __syncthreads",
                              thread_list(b, [&](int i) { return b.threads[i].state == State::at_barrier; }));
  if (b.at_barrier) s += fmt::format(" ({})", where_str(b.barrier_where));
  for (int w = 0; w * 32 < b.n; ++w)
    for (const Pending& p : b.warps[w].pending)
      s += fmt::format("; warp {} lanes {:#010x} of mask {:#010x} in {} ({})", w, p.arrived, p.mask,
                       collective_name(p.kind), where_str(p.where));
  return s;
}

// The scheduler loop: takes ready CUDA threads in order and runs each until it exits or waits.
// A new thread runs as a plain call on the current stack (under TSan: on its own stack); a
// thread that waited is resumed on its own stack, and this loop's stack is given up (the loop's
// state is all in the Block). When nothing is ready the block is done, or deadlocked.
void schedule(Block& b) {
  for (;;) {
    if (b.error || b.ready.empty()) {
      if (!b.error && b.finished != b.n) {
        try {
          fail(b, describe_deadlock(b));
        } catch (...) {
          b.error = std::current_exception();
        }
      }
      switch_context(nullptr, b.host);  // back to run_block, for good
    }
    const int i = b.ready.pop_front();
    Thread& t = b.threads[i];
    if (t.state == State::not_started && !kOwnStacks) {
      run_thread(b, i);
      continue;
    }
    release_stack(b, b.current_stack);
    if (t.state == State::not_started) {  // TSan builds: thread i starts on its own stack
      b.current_stack = i;
      b.running = i;
      switch_context(nullptr, make_context(stack(b, i), start_on_own_stack));
    } else {
      b.current_stack = t.stack;
      b.running = i;
      threadIdx = t.idx;
      tsan_switch(t.tsan);
      switch_context(nullptr, t.suspended);
    }
  }
}

// Entry of a fresh scheduler stack.
void start_scheduler() {
  Block& b = *t_block;
  entered(b.from_host ? &b.host : nullptr);
  b.from_host = false;
  schedule(b);
}

// Entry of a CUDA thread's own stack (TSan builds).
void start_on_own_stack() {
  Block& b = *t_block;
  entered(nullptr);
  run_thread(b, b.running);
  schedule(b);
}

// The running CUDA thread waits: its frames stay on its stack, and the scheduler carries on
// on a fresh one. Returns when the scheduler resumes it.
void wait_here(Block& b) {
  Thread& t = b.threads[b.running];
  // When the next CUDA thread to run is one that waits too (the usual case in kernels full of
  // warp collectives), switch to it directly: one context switch instead of two, and no new
  // scheduler stack. The order in which threads run is the scheduler's all the same.
  if (!b.error && !b.ready.empty() && b.threads[b.ready.front()].state != State::not_started) {
    const int i = b.ready.pop_front();
    Thread& next = b.threads[i];
    b.running = i;
    b.current_stack = next.stack;
    threadIdx = next.idx;
    tsan_switch(next.tsan);
    switch_context(&t.suspended, next.suspended);
    return;  // resumed: whoever switched here has set running, threadIdx, the stack and the fiber
  }
  b.running = -1;
  tsan_switch(b.tsan_host);  // the scheduler's bookkeeping is not the CUDA thread's doing
  const int s = take_pool_stack(b);
  b.current_stack = s;
  switch_context(&t.suspended, make_context(stack(b, s), start_scheduler));
  // Resumed: schedule() has set running, threadIdx, the stack and the TSan fiber back.
}

void run_block(Block& b) {
  for (int w = 0; w * 32 < b.n; ++w) b.warps[w].pending.clear();
  b.at_barrier = b.finished = 0;
  b.error = nullptr;
  b.ready.clear();
  for (int i = 0; i < b.n; ++i) {
    Thread& t = b.threads[i];
    t.state = State::not_started;
    b.async[i].clear();  // copies a thread of the previous block left in flight went with it
    t.idx = {unsigned(i % blockDim.x), unsigned(i / blockDim.x % blockDim.y), unsigned(i / (blockDim.x * blockDim.y))};
    b.ready.push_back(i);
  }
  if (b.shared_bytes) std::memset(b.shared, 0xff, b.shared_bytes);  // NaN: unwritten shared memory shows
  KEEL_TSAN_RELEASE(&b.start_token);
  b.free_stacks.clear();
  for (int s = kMaxThreads; s < static_cast<int>(b.stacks.size()); ++s) b.free_stacks.push_back(s);
  b.current_stack = take_pool_stack(b);
  b.from_host = true;
  b.running = -1;
  switch_context(&b.host, make_context(stack(b, b.current_stack), start_scheduler));
  if (b.error) {
    // The threads still waiting are abandoned: what they did comes before the error surfaces.
    for (int i = 0; i < b.n; ++i) {
      Thread& t = b.threads[i];
      if (t.state == State::not_started || t.state == State::done || !t.tsan) continue;
      tsan_switch(t.tsan);
      KEEL_TSAN_RELEASE(&b.end_token);
    }
    tsan_switch(b.tsan_host);
    KEEL_TSAN_ACQUIRE(&b.error);
  }
  KEEL_TSAN_ACQUIRE(&b.end_token);
  if (b.error) std::rethrow_exception(b.error);
}

}  // namespace

const char* collective_name(Collective kind) {
  switch (kind) {
    case Collective::syncwarp: return "__syncwarp";
    case Collective::shfl: return "__shfl_sync";
    case Collective::shfl_up: return "__shfl_up_sync";
    case Collective::shfl_down: return "__shfl_down_sync";
    case Collective::shfl_xor: return "__shfl_xor_sync";
    case Collective::vote: return "a warp vote (__ballot_sync / __any_sync / __all_sync)";
    case Collective::mma: return "wmma::mma_sync";
    case Collective::mma_ptx: return "mma.sync.aligned.m16n8k16";
    case Collective::ldmatrix: return "ldmatrix.sync.aligned.m8n8";
  }
  return "?";
}

bool in_kernel() { return t_block && t_block->running >= 0; }

void run_grid(dim3 grid, dim3 block_dim, size_t dynamic_shared_bytes, void (*body)(const void*), const void* ctx) {
  thread_local std::unique_ptr<Block> pool;
  if (t_block) throw CudaError("emulated CUDA", "a kernel launched another kernel from device code",
                               "keel's emulator does not support dynamic parallelism");
  if (!pool) {
    pool = std::make_unique<Block>();
    // Capacity for every stack the block can need, so that nothing reallocates while it runs.
    pool->stacks.reserve(2 * kMaxThreads + 1);
    pool->stacks.resize(kMaxThreads);  // the CUDA threads' own stacks, made when first used
    pool->free_stacks.reserve(kMaxThreads + 1);
    for (Warp& w : pool->warps) w.pending.reserve(32);
  }
  Block& b = *pool;
#if defined(KEEL_EMU_TSAN)
  b.tsan_host = __tsan_get_current_fiber();
#endif
  b.n = static_cast<int>(block_dim.x * block_dim.y * block_dim.z);
  b.body = body;
  b.ctx = ctx;
  b.shared_bytes = dynamic_shared_bytes;
  // Fresh storage per launch, sized exactly, so AddressSanitizer sees an overrun of it.
  std::vector<unsigned char>(dynamic_shared_bytes + 128).swap(b.shared_storage);
  b.shared = b.shared_storage.data() + (128 - reinterpret_cast<uintptr_t>(b.shared_storage.data()) % 128) % 128;
  blockDim = block_dim;
  gridDim = grid;
  t_block = &b;
  struct Reset {
    ~Reset() { t_block = nullptr; }
  } reset;
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        blockIdx = {x, y, z};
        run_block(b);
      }
}

unsigned char* dynamic_shared(size_t align) {
  Block& b = block();
  if (reinterpret_cast<uintptr_t>(b.shared) % align != 0)
    throw CudaError("emulated CUDA", fmt::format("dynamic shared memory cannot be aligned to {} bytes", align));
  return b.shared;
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
  } else {
    b.threads[me].state = State::at_barrier;
    wait_here(b);
  }
  KEEL_TSAN_ACQUIRE(&b.barrier_token[gen & 1]);
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
