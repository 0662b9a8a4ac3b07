// The block scheduler: CUDA threads as fibers on a pool of stacks, run in index order until each
// exits or waits. A block runs until every thread has exited, or, with other blocks resident,
// until it gives way after a __syncthreads or every thread that can still run waits on a flag
// (run_block returns then, and the grid, grid.cpp, resumes it later). Where and how threads wait
// for each other (barriers, warp collectives, spin-waits, cp.async) is block_sync.cpp; the state
// they share is block_state.h.
//
// The emulator's files are compiled without ThreadSanitizer instrumentation in the emu-tsan
// build: the scheduler's own bookkeeping is invisible to TSan, and it tells TSan about exactly the
// happens-before edges CUDA guarantees (a barrier orders everything before it in every
// participating thread before everything after it), so a kernel that forgets a barrier between
// one thread's shared-memory write and another's read is reported as a data race.
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "core/cuda/emu/block_state.h"

constinit thread_local uint3 threadIdx{};
constinit thread_local uint3 blockIdx{};
constinit thread_local dim3 blockDim{};
constinit thread_local dim3 gridDim{};

namespace keel::emu {

namespace detail {

constinit thread_local Block* t_block = nullptr;

std::string dim_str(uint3 d) { return fmt::format("({},{},{})", d.x, d.y, d.z); }
std::string where_str(const std::source_location& w) { return fmt::format("{}:{}", w.file_name(), w.line()); }

[[noreturn]] void fail(const Block& b, const std::string& what, const std::string& hint) {
  throw CudaError("emulated CUDA",
                  fmt::format("{} (block {} of grid {}, {} threads per block)", what, dim_str(blockIdx), dim_str(gridDim),
                              b.n),
                  hint);
}

}  // namespace detail

namespace {

using namespace detail;

#if defined(KEEL_EMU_TSAN)
// Under TSan every CUDA thread runs on a stack of its own (stack memory reused by another CUDA
// thread would look like a race) and is a TSan fiber of its own.
constexpr bool kOwnStacks = true;
#else
constexpr bool kOwnStacks = false;
#endif

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
    if (const std::string stores = unwaited_stores(b, i); !stores.empty())
      fail(b, fmt::format("thread {} exited with {}", dim_str(t.idx), stores),
           "wait for every bulk copy before the thread exits (ptx::bulk_commit_group, then "
           "ptx::bulk_wait_group_read<0>): the block's shared memory is gone once its threads have");
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

// Hands control back to run_block's caller for good (the loop's state is all in the Block); the
// stack this runs on is free again once the switch is made.
[[noreturn]] void leave(Block& b, Block::Exit exit) {
  b.exit = exit;
  release_stack(b, b.current_stack);
  b.current_stack = -1;
  b.running = -1;
  switch_context(nullptr, b.host);
  __builtin_unreachable();
}

// The scheduler loop: takes ready CUDA threads in order and runs each until it exits or waits.
// A new thread runs as a plain call on the current stack (under TSan: on its own stack); a
// thread that waited is resumed on its own stack, and this loop's stack is given up (the loop's
// state is all in the Block). When nothing is ready the block is done, or waits on another
// block's flag, or is deadlocked.
void schedule(Block& b) {
  for (;;) {
    if (!b.error && b.ready.empty()) {
      if (b.finished == b.n) leave(b, Block::Exit::finished);
      if (b.spinning > 0 && !wake_spinners(b)) leave(b, Block::Exit::blocked);
      if (b.ready.empty()) {
        try {
          fail(b, describe_deadlock(b));
        } catch (...) {
          b.error = std::current_exception();
        }
      }
    }
    if (b.error) leave(b, Block::Exit::finished);
    if (b.give_way) {
      b.give_way = false;
      leave(b, Block::Exit::turn);
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

}  // namespace

// The running CUDA thread waits: its frames stay on its stack, and the scheduler carries on
// on a fresh one. Returns when the scheduler resumes it.
void detail::wait_here(Block& b) {
  Thread& t = b.threads[b.running];
  // The context saved below resumes on this thread's stack; AddressSanitizer is told its bounds
  // when something switches back to it.
  Stack& own = stack(b, t.stack);
  t.suspended.stack_bottom = own.bottom();
  t.suspended.stack_size = own.size();
  // When the next CUDA thread to run is one that waits too (the usual case in kernels full of
  // warp collectives), switch to it directly: one context switch instead of two, and no new
  // scheduler stack. The order in which threads run is the scheduler's all the same.
  if (!b.error && !b.give_way && !b.ready.empty() && b.threads[b.ready.front()].state != State::not_started) {
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

void detail::run_block(Block& b) {
  t_block = &b;
  blockIdx = b.idx;
#if defined(KEEL_EMU_TSAN)
  b.tsan_host = __tsan_get_current_fiber();
#endif
  if (!b.started) {
    b.started = true;
    for (int w = 0; w * 32 < b.n; ++w) b.warps[w].pending.clear();
    b.at_barrier = b.finished = b.spinning = b.yielders = 0;
    b.named = {};
    b.give_way = false;
    b.error = nullptr;
    b.ready.clear();
    for (int i = 0; i < b.n; ++i) {
      Thread& t = b.threads[i];
      t.state = State::not_started;
      b.async[i].clear();  // copies a thread of the previous block left in flight went with it
      b.bulk[i].clear();
      t.idx = {unsigned(i % blockDim.x), unsigned(i / blockDim.x % blockDim.y),
               unsigned(i / (blockDim.x * blockDim.y))};
      b.ready.push_back(i);
    }
    reset_shared(b);
    reset_wgmma(b);
    KEEL_TSAN_RELEASE(&b.start_token);
    b.free_stacks.clear();
    for (int s = kMaxThreads; s < static_cast<int>(b.stacks.size()); ++s) b.free_stacks.push_back(s);
  }
  b.current_stack = take_pool_stack(b);
  b.from_host = true;
  b.running = -1;
  switch_context(&b.host, make_context(stack(b, b.current_stack), start_scheduler));
  if (!b.error && b.exit == Block::Exit::finished) {
    KEEL_TSAN_ACQUIRE(&b.end_token);
    b.started = false;
  }
}

void detail::abandon_block(Block& b) {
  // The threads still waiting are given up: what they did comes before the error surfaces.
  for (int i = 0; i < b.n; ++i) {
    Thread& t = b.threads[i];
    if (t.state == State::not_started || t.state == State::done || !t.tsan) continue;
    tsan_switch(t.tsan);
    KEEL_TSAN_RELEASE(&b.end_token);
  }
  tsan_switch(b.tsan_host);
  KEEL_TSAN_ACQUIRE(&b.error);
  KEEL_TSAN_ACQUIRE(&b.end_token);
  b.started = false;
}

using namespace detail;

bool in_kernel() { return t_block && t_block->running >= 0; }

namespace {
std::atomic<bool> g_count_only{false};
}  // namespace

void set_count_only(bool on) { g_count_only = on; }
bool count_only() { return g_count_only; }

}  // namespace keel::emu
