// Stacks and context switches: how one host thread runs many CUDA threads.
//
// An emulated CUDA thread runs as an ordinary function call on the launching host thread until
// it has to wait for other CUDA threads (__syncthreads, a shuffle, an mma.sync product). Then its
// frames stay where they are, on the stack it ran on, and the block's scheduler carries on
// with the next CUDA thread on another stack (block.cpp). So a kernel that never waits costs
// one function call per CUDA thread, and one that does costs a context switch per wait.
//
// The switch saves and restores the callee-saved registers (x86-64: a few instructions, no
// system call); elsewhere it falls back to ucontext. Under AddressSanitizer every switch is
// announced so that ASan tracks the right stack.
#pragma once

#include <cstddef>

namespace keel::emu {

// A stack of its own: 256 KiB of address space with a guard page below, of which only the
// touched pages cost memory.
class Stack {
 public:
  Stack();
  ~Stack();
  Stack(const Stack&) = delete;
  Stack& operator=(const Stack&) = delete;
  void* bottom() const { return base_; }
  size_t size() const { return bytes_; }

 private:
  void* base_ = nullptr;
  size_t bytes_ = 0;
};

// A suspended execution context: where to switch back to.
struct Context {
  void* sp = nullptr;               // saved stack pointer (the registers are saved on that stack)
  const void* stack_bottom = nullptr;  // the stack it runs on, for AddressSanitizer
  size_t stack_size = 0;
  void* impl = nullptr;             // the ucontext fallback's saved context
};

// A context that starts entry() on `stack` when switched to. entry must never return.
Context make_context(Stack& stack, void (*entry)());

// Saves the running context into *save (null: the running context is abandoned for good) and
// switches to `to`. Returns when something switches back to *save.
void switch_context(Context* save, const Context& to);

// At the start of an entry function: finishes the switch that started it (AddressSanitizer);
// when `from` is given, records there the bounds of the stack that switched here.
void entered(Context* from);

}  // namespace keel::emu
