// A fiber: a stack and a saved CPU context that one emulated CUDA thread runs on.
//
// The emulator runs every CUDA thread of a block as a fiber on the host thread that launched
// the kernel. A fiber runs until it reaches a point where CUDA threads wait for each other
// (__syncthreads, a warp shuffle, a wmma product) and then switches back to the block's
// scheduler (block.cpp), which resumes the next fiber. Only one fiber runs at a time, so the
// order is deterministic and a debugger sees ordinary host code.
//
// Under ThreadSanitizer each fiber is also a TSan fiber, switched without synchronisation, so
// TSan treats every emulated CUDA thread as a thread of its own and sees only the
// happens-before edges that the emulator declares (barriers), not the switches. Under
// AddressSanitizer the switches are announced so that it tracks the right stack.
#pragma once

#include <ucontext.h>

#include <cstddef>

namespace keel::emu {

class Fiber {
 public:
  Fiber() = default;
  Fiber(const Fiber&) = delete;
  Fiber& operator=(const Fiber&) = delete;
  ~Fiber();

  // Makes the fiber start entry(arg) at its next resume, on a fresh stack frame. A fiber that
  // was suspended mid-way (an aborted block) is simply started over.
  void start(void (*entry)(void*), void* arg);
  // From the scheduler: run this fiber until it yields back.
  void resume();
  // From inside this fiber: switch back to the scheduler that resumed it.
  void yield();

 private:
  static void trampoline();
  void ensure_stack();
  ucontext_t context_{};
  ucontext_t caller_{};
  void* stack_ = nullptr;  // mmap'ed, with a guard page below it
  size_t stack_bytes_ = 0;
  void* tsan_fiber_ = nullptr;   // this fiber's TSan identity (TSan builds)
  void* tsan_caller_ = nullptr;  // the scheduler's, saved at resume
  void* asan_fake_stack_ = nullptr;
  const void* asan_caller_bottom_ = nullptr;
  size_t asan_caller_size_ = 0;
};

// Stack size of each fiber (a kernel's locals plus the emulator's frames): 256 KiB of address
// space, of which only the touched pages cost memory.
inline constexpr size_t kFiberStackBytes = size_t(256) << 10;

}  // namespace keel::emu
