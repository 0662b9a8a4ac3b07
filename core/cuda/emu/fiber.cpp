// Stacks and context switches for the emulated CUDA threads (fiber.h).
#include "core/cuda/emu/fiber.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define KEEL_EMU_ASAN 1
#endif

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

namespace keel::emu {

namespace {
[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "keel emulated CUDA: %s\n", what);
  std::abort();
}
constexpr size_t kStackBytes = size_t(256) << 10;

// A context started on a stack makes whatever ran there before dead: frames of threads that
// were abandoned mid-wait (a block that failed) never ran their epilogues, and AddressSanitizer
// would read their redzones as poison in the new frames that reuse those addresses.
void forget_frames(Stack& stack) {
#if KEEL_EMU_ASAN
  ASAN_UNPOISON_MEMORY_REGION(stack.bottom(), stack.size());
#else
  (void)stack;
#endif
}
}  // namespace

Stack::Stack() {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  bytes_ = kStackBytes;
  void* p = mmap(nullptr, bytes_ + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) die("cannot map a stack for an emulated CUDA thread (out of address space?)");
  mprotect(p, page, PROT_NONE);  // the guard page turns an overflow into a clean fault
  base_ = static_cast<char*>(p) + page;
}

Stack::~Stack() {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  munmap(static_cast<char*>(base_) - page, bytes_ + page);
}

#if defined(__x86_64__)

// keel_emu_switch(void** save_sp, void* to_sp): pushes the callee-saved registers and the
// floating-point control words on the current stack, stores the stack pointer in *save_sp,
// loads to_sp and pops the same from there. The System V ABI makes everything else the
// caller's business.
extern "C" void keel_emu_switch(void** save_sp, void* to_sp);
asm(R"(
    .text
    .globl keel_emu_switch
    .type keel_emu_switch, @function
keel_emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $16, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $16, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size keel_emu_switch, .-keel_emu_switch
    .section .note.GNU-stack,"",@progbits
    .text
)");

Context make_context(Stack& stack, void (*entry)()) {
  forget_frames(stack);
  // The frame keel_emu_switch pops: control words, six registers, then `ret` into entry with
  // the stack as if entry had been called (rsp = 8 mod 16), its return address a null that is
  // never used.
  auto* top = reinterpret_cast<uint64_t*>((reinterpret_cast<uintptr_t>(stack.bottom()) + stack.size()) & ~uintptr_t(15));
  uint64_t* sp = top - 12;  // 96 bytes: 16 of control words, 48 of registers, entry, null, padding
  uint32_t mxcsr = 0;
  uint16_t fpucw = 0;
  asm volatile("stmxcsr %0" : "=m"(mxcsr));
  asm volatile("fnstcw %0" : "=m"(fpucw));
  sp[0] = mxcsr | (uint64_t(fpucw) << 32);
  sp[1] = 0;
  for (int r = 2; r < 8; ++r) sp[r] = 0;  // r15 r14 r13 r12 rbx rbp
  sp[8] = reinterpret_cast<uint64_t>(entry);
  sp[9] = 0;
  Context c;
  c.sp = sp;
  c.stack_bottom = stack.bottom();
  c.stack_size = stack.size();
  return c;
}

void switch_context(Context* save, const Context& to) {
  void* scratch = nullptr;
#if KEEL_EMU_ASAN
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(save ? &fake : nullptr, to.stack_bottom, to.stack_size);
#endif
  keel_emu_switch(save ? &save->sp : &scratch, to.sp);
#if KEEL_EMU_ASAN
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
}

#else  // the portable fallback

Context make_context(Stack& stack, void (*entry)()) {
  forget_frames(stack);
  auto* uc = new ucontext_t;  // kept for the life of the process: contexts are few and reused
  if (getcontext(uc) != 0) die("getcontext failed");
  uc->uc_stack.ss_sp = stack.bottom();
  uc->uc_stack.ss_size = stack.size();
  uc->uc_link = nullptr;
  makecontext(uc, entry, 0);
  Context c;
  c.impl = uc;
  c.stack_bottom = stack.bottom();
  c.stack_size = stack.size();
  return c;
}

void switch_context(Context* save, const Context& to) {
  thread_local ucontext_t scratch;
  ucontext_t* from = &scratch;
  if (save) {
    if (!save->impl) save->impl = new ucontext_t;
    from = static_cast<ucontext_t*>(save->impl);
  }
#if KEEL_EMU_ASAN
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(save ? &fake : nullptr, to.stack_bottom, to.stack_size);
#endif
  if (swapcontext(from, static_cast<ucontext_t*>(to.impl)) != 0) die("swapcontext failed");
#if KEEL_EMU_ASAN
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
}

#endif

void entered(Context* from) {
#if KEEL_EMU_ASAN
  const void* bottom = nullptr;
  size_t size = 0;
  __sanitizer_finish_switch_fiber(nullptr, &bottom, &size);
  if (from) from->stack_bottom = bottom, from->stack_size = size;
#else
  (void)from;
#endif
}

}  // namespace keel::emu
