// Fibers on ucontext, with the sanitizer hand-offs that a user-level context switch needs.
#include "core/cuda/emu/fiber.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define KEEL_EMU_ASAN 1
#endif
#if defined(KEEL_EMU_TSAN)
#include <sanitizer/tsan_interface.h>
#endif

namespace keel::emu {

namespace {
// makecontext passes only ints to the entry, so the fiber being started and its entry travel
// through these (one launching host thread at a time uses them).
thread_local Fiber* t_starting = nullptr;
thread_local void (*t_entry)(void*) = nullptr;
thread_local void* t_arg = nullptr;

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "keel emulated CUDA: %s\n", what);
  std::abort();
}

}  // namespace

void Fiber::trampoline() {
  Fiber* self = t_starting;
  void (*entry)(void*) = t_entry;
  void* arg = t_arg;
#if KEEL_EMU_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &self->asan_caller_bottom_, &self->asan_caller_size_);
#else
  (void)self;
#endif
  entry(arg);
  die("a fiber's entry returned instead of yielding for good");  // block.cpp never lets it
}

Fiber::~Fiber() {
  if (stack_) munmap(static_cast<char*>(stack_) - sysconf(_SC_PAGESIZE), stack_bytes_ + sysconf(_SC_PAGESIZE));
#if defined(KEEL_EMU_TSAN)
  if (tsan_fiber_) __tsan_destroy_fiber(tsan_fiber_);
#endif
}

void Fiber::ensure_stack() {
  if (stack_) return;
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  stack_bytes_ = kFiberStackBytes;
  void* p = mmap(nullptr, stack_bytes_ + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0);
  if (p == MAP_FAILED) die("cannot map a fiber stack (out of address space?)");
  // A guard page below the stack turns an overflow into a clean fault instead of corruption.
  mprotect(p, page, PROT_NONE);
  stack_ = static_cast<char*>(p) + page;
#if defined(KEEL_EMU_TSAN)
  tsan_fiber_ = __tsan_create_fiber(0);
#endif
}

void Fiber::start(void (*entry)(void*), void* arg) {
  ensure_stack();
  if (getcontext(&context_) != 0) die("getcontext failed");
  context_.uc_stack.ss_sp = stack_;
  context_.uc_stack.ss_size = stack_bytes_;
  context_.uc_link = nullptr;
  makecontext(&context_, &Fiber::trampoline, 0);
  t_starting = this;
  t_entry = entry;
  t_arg = arg;
}

void Fiber::resume() {
#if defined(KEEL_EMU_TSAN)
  tsan_caller_ = __tsan_get_current_fiber();
  __tsan_switch_to_fiber(tsan_fiber_, __tsan_switch_to_fiber_no_sync);
#endif
#if KEEL_EMU_ASAN
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, stack_, stack_bytes_);
#endif
  if (swapcontext(&caller_, &context_) != 0) die("swapcontext failed");
#if KEEL_EMU_ASAN
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
}

void Fiber::yield() {
#if defined(KEEL_EMU_TSAN)
  __tsan_switch_to_fiber(tsan_caller_, __tsan_switch_to_fiber_no_sync);
#endif
#if KEEL_EMU_ASAN
  __sanitizer_start_switch_fiber(&asan_fake_stack_, asan_caller_bottom_, asan_caller_size_);
#endif
  if (swapcontext(&context_, &caller_) != 0) die("swapcontext failed");
#if KEEL_EMU_ASAN
  __sanitizer_finish_switch_fiber(asan_fake_stack_, &asan_caller_bottom_, &asan_caller_size_);
#endif
}

}  // namespace keel::emu
