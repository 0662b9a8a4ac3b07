// The state of a block of the emulated GPU, shared by the parts of the emulator that run it: the
// scheduler that runs CUDA threads as fibers (block.cpp), the places where they wait for each
// other, __syncthreads, warp collectives, spin-waits and cp.async (block_sync.cpp), its shared
// memory (shared_memory.cpp) and the grid that starts blocks and takes turns among the resident
// ones (grid.cpp). Private to those files; everything else goes through block.h.
#pragma once

#include <array>
#include <cstdint>
#include <exception>
#include <memory>
#include <new>
#include <source_location>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/cuda/emu/block.h"
#include "core/cuda/emu/fiber.h"
#include "core/error.h"

// The happens-before edges the emulator declares to TSan (emu-tsan builds; nothing otherwise).
#if defined(KEEL_EMU_TSAN)
#include <sanitizer/tsan_interface.h>
#define KEEL_TSAN_RELEASE(addr) __tsan_release(const_cast<void*>(static_cast<const volatile void*>(addr)))
#define KEEL_TSAN_ACQUIRE(addr) __tsan_acquire(const_cast<void*>(static_cast<const volatile void*>(addr)))
#else
#define KEEL_TSAN_RELEASE(addr) ((void)(addr))
#define KEEL_TSAN_ACQUIRE(addr) ((void)(addr))
#endif

namespace keel::emu::detail {

constexpr int kMaxThreads = 1024;

enum class State : uint8_t { not_started, runnable, at_barrier, in_collective, spinning, done };

struct Thread {
  uint3 idx{};
  State state = State::not_started;
  Context suspended;         // where it waits, while it waits
  int stack = -1;            // the stack its frames are on
  const void* in = nullptr;  // operands while waiting in a warp collective
  void* out = nullptr;
  void* tsan = nullptr;      // its TSan fiber (TSan builds)
  // While spinning: the flag it waits to hold `spin_expected` (ptx::spin_wait_equal), an
  // mbarrier's phase word (wait_for_phase) or a named barrier's generation (named_barrier).
  const int* spin_flag = nullptr;
  int spin_expected = 0;
  enum class Spin : uint8_t { flag, phase, named } spin_kind = Spin::flag;
  std::source_location spin_where;
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

// A TMA copy's box (tma.cpp): the tensor its map describes and where the box starts.
struct TmaBox {
  const unsigned char* base = nullptr;
  int rank = 0;
  uint32_t esize = 0, swizzle = 0;  // element bytes; swizzle width in bytes, 0 for none
  bool nan_fill = false;            // elements outside the tensor arrive as NaN, else as zeros
  std::array<uint64_t, 5> dims{}, strides{};  // strides in bytes; strides[0] is esize
  std::array<uint32_t, 5> box{};
  std::array<int32_t, 5> coords{};
  uint32_t dst_addr = 0;  // the destination's shared address: the swizzle acts on it
};

// The bulk copies out of shared memory one CUDA thread has issued and no wait_group has covered
// yet (bulk_group.cpp), oldest first: a TMA store's box, or a bulk reduction's f32 destination;
// a hash of the shared memory at issue, and the copy's group.
struct BulkStores {
  struct Store {
    const unsigned char* src;
    TmaBox box;          // a TMA store's
    float* reduce_to;    // a cp.reduce.async.bulk .add.f32's destination, else null
    uint32_t bytes, group;
    uint64_t hash;
    std::source_location where;
  };
  static constexpr int kCapacity = 8;
  std::array<Store, kCapacity> stores{};
  int count = 0;
  uint32_t committed = 0;  // groups committed so far; the open group has this number
  void clear() { count = 0, committed = 0; }
};

// The mbarrier objects a block has initialized (mbarrier.h): each one's counts and the bulk
// copies that land when its arrivals are all in. Fixed arrays, as everything the scheduler and
// the CUDA threads both touch.
struct MbarrierState {
  const void* addr = nullptr;
  int expected = 0, pending = 0;
  int64_t tx = 0;  // bytes announced (expect_tx) less bytes landed, in the current phase
  struct Copy {
    void* dst;
    const void* src;  // a plain bulk copy's source, null for a TMA box
    uint32_t bytes;
    TmaBox box;
  };
  static constexpr int kCopies = 32;
  std::array<Copy, kCopies> copies{};
  int ncopies = 0;
};
struct Mbarriers {
  static constexpr int kCapacity = 32;
  std::array<MbarrierState, kCapacity> slots{};
  int count = 0;
};

// The wgmmas in flight in a block (wgmma.cpp), made when a kernel first issues one.
struct WgmmaState;
struct WgmmaStateDeleter {
  void operator()(WgmmaState* s) const;
};

// A named barrier (bar.sync / bar.arrive with an id, block_sync.cpp): the thread count its open
// phase waits for (0 while none is open), the threads arrived, and the generation waiting threads
// spin on (a completed phase adds one).
struct NamedBarrier {
  int count = 0, arrived = 0, generation = 0;
  std::source_location where;           // the phase's first arrival
  std::array<char, 2> token{};          // TSan addresses, by generation parity
};
constexpr int kNamedBarriers = 16;

struct Warp {
  std::vector<Pending> pending;
  std::array<char, 2> sync_token{};  // TSan addresses of __syncwarp, by generation parity
  unsigned syncwarp_generation = 0;
};

// What the resident blocks of a launch share: the launch, and the static shared memory its
// kernel is known to declare (grid.cpp, shared_memory.cpp).
struct GridState {
  const Launch* launch = nullptr;
  size_t known_static = 0;  // the most static shared memory a block of this kernel has declared
  bool turns = false;       // several blocks resident: each gives way after every __syncthreads
};

// A block's static __shared__ variables (KEEL_SHARED): each site's offset in the block's arena.
constexpr size_t kMaxStaticShared = 48 << 10;  // nvcc refuses more static shared memory
constexpr int kMaxSharedSites = 64;
struct StaticShared {
  struct Slot {
    const SharedSite* site;
    size_t offset;
  };
  std::array<Slot, kMaxSharedSites> slots{};
  int count = 0;
  size_t used = 0;
  std::unique_ptr<unsigned char[]> storage{new unsigned char[kMaxStaticShared + 128]};
  unsigned char* base() const {
    auto p = reinterpret_cast<uintptr_t>(storage.get());
    return storage.get() + (128 - p % 128) % 128;
  }
};

struct Block {
  // How the block's scheduler last handed control back to the grid: every thread exited, or it
  // gave way after a __syncthreads while other blocks are resident, or every thread that has not
  // exited waits and at least one of them spins on a flag only another block can set.
  enum class Exit : uint8_t { finished, turn, blocked };
  std::unique_ptr<Thread[]> threads{new Thread[kMaxThreads]};
  std::unique_ptr<AsyncQueue[]> async{new AsyncQueue[kMaxThreads]};  // by thread index
  std::unique_ptr<BulkStores[]> bulk{new BulkStores[kMaxThreads]};  // by thread index
  std::array<Warp, kMaxThreads / 32> warps;
  uint3 idx{};        // its blockIdx
  bool started = false;
  Exit exit = Exit::finished;
  bool give_way = false;  // a __syncthreads completed and other blocks are resident (GridState::turns)
  int spinning = 0;       // threads in State::spinning
  int yielders = 0;       // ready threads that wait in let_others_run for the others to go on
  GridState* grid = nullptr;
  StaticShared statics;
  Mbarriers mbarriers;  // reset with the shared memory (shared_memory.cpp)
  std::array<NamedBarrier, kNamedBarriers> named;  // reset at the block's start (block.cpp)
  std::unique_ptr<WgmmaState, WgmmaStateDeleter> wgmma;  // reset at the block's start (block.cpp)
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
  // Dynamic shared memory of the running block: exactly its bytes, 1024-aligned (shared_memory.cpp).
  struct SharedFree {
    void operator()(unsigned char* p) const { ::operator delete[](p, std::align_val_t{1024}); }
  };
  std::unique_ptr<unsigned char[], SharedFree> shared_storage;
  unsigned char* shared = nullptr;
  size_t shared_bytes = 0;
  void (*body)(const void*) = nullptr;
  const void* ctx = nullptr;
};

// The block running on this host thread, if any. constinit: read without a TLS wrapper call.
extern constinit thread_local Block* t_block;

inline Block& block() {
  if (!t_block) throw CudaError("emulated CUDA", "a device function was called outside a kernel");
  return *t_block;
}

inline int current_index(const Block& b) {
  if (b.running < 0) throw CudaError("emulated CUDA", "a device function was called outside a kernel");
  return b.running;
}

std::string dim_str(uint3 d);
std::string where_str(const std::source_location& w);

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

// Throws the CudaError of a broken CUDA rule, naming the block.
[[noreturn]] void fail(const Block& b, const std::string& what, const std::string& hint = {});

// The running CUDA thread waits: its frames stay on its stack, and the scheduler carries on
// with other threads. Returns when the scheduler resumes it (block.cpp).
void wait_here(Block& b);
// The running CUDA thread lets every other ready thread of its block run first, each until it
// waits or exits, then goes on (block_sync.cpp): where a GPU's asynchronous unit may act at any
// moment between two instructions of one thread, the others' work lands in between.
void let_others_run(Block& b);

// block.cpp: runs block b on this host thread (a fresh one from its first thread, else its ready
// threads) until it finishes, gives way, blocks on flags (b.exit) or fails (b.error).
void run_block(Block& b);
// block.cpp: after an error, the block's threads that still wait are given up for good.
void abandon_block(Block& b);
// block_sync.cpp: the spinning threads whose flag now holds the value they wait for become
// runnable; whether any did.
bool wake_spinners(Block& b);
// shared_memory.cpp: a block's shared memory for a launch (dynamic bytes sized exactly, so that
// AddressSanitizer sees an overrun), and at each block's start (filled with NaN bytes, no
// static variable laid out yet).
void prepare_shared(Block& b, size_t dynamic_bytes);
void reset_shared(Block& b);
// wgmma.cpp: no wgmma in flight, at a block's start.
void reset_wgmma(Block& b);
// tma.cpp: the box a tensor map describes (coordinates and destination still to fill in); a
// CudaError for a map cuTensorMapEncodeTiled did not make. The landing of a box in shared
// memory at dst (bytes long), swizzled as its map says.
TmaBox decode_tensor_map(const Block& b, const void* map, const std::source_location& where);
void land_box(void* dst, const TmaBox& box, uint32_t bytes);
// A TMA store's writes: the box from shared memory at src (bytes long, laid out as land_box
// leaves it) into the tensor, the elements outside it skipped.
void store_box(const void* src, const TmaBox& box, uint32_t bytes);
// bulk_group.cpp: the bulk copies of thread i that no wait covered, as an error's words ("" when
// there are none).
std::string unwaited_stores(const Block& b, int i);

}  // namespace keel::emu::detail
