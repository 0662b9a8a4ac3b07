// keel's CPU threads: one pool, owned by keel, that every CPU kernel's parallel loop runs on.
//
//   parallel::for_each_chunk(chunks, [&](int64_t c) { ...chunk c... });
//   parallel::for_range(n, grain, [&](int64_t begin, int64_t end) { ...elements [begin, end)... });
//
// A loop is cut into chunks by its caller, from the problem's size alone; the calling thread and
// the pool's workers then claim chunks one at a time until none is left. Which thread runs a
// chunk never changes what the chunk computes, and a reduction keeps one partial per chunk and
// adds them in chunk order, so results do not depend on the thread count, nor on which threads
// happened to be free: a kernel is deterministic whatever the machine is doing.
//
// Why keel's own pool and not OpenMP: GCC's libgomp reads its waiting policy (OMP_WAIT_POLICY,
// GOMP_SPINCOUNT) once, when the library loads, and by default an idle thread spins for
// milliseconds after every parallel region. On a busy laptop those spinning threads take the cores
// that the other programs and keel's own next region need: measured on 2 cores with two busy
// processes beside it, decoding took 10.6 ms per token on 2 OpenMP threads against 6.7 on one
// (docs/benchmarks.md, "CPU threads"). Here the policy is keel's, in code:
// - A worker that finds no work spins for at most kSpinMicros (a few tens of microseconds, about
//   what waking a sleeping thread costs), then sleeps in the kernel (a futex) until the next
//   loop: an idle keel takes no CPU from anyone.
// - Chunks are claimed, not assigned: when a worker has been descheduled by the system, the
//   calling thread runs its chunks itself instead of waiting for it, so a loaded machine costs
//   at most the chunk a worker holds, never a whole share.
// - A loop leaves to other programs the CPUs they keep busy: it runs on at most the CPUs the
//   kernel's count of runnable tasks says are free (Linux, /proc/loadavg; core/parallel.cpp,
//   LoadProbe), never fewer than one. Two threads that each get half a core, taking turns with
//   two busy programs, are slower than one thread that keeps a core: 6.3 ms a decoded token
//   against 3.4 measured (docs/benchmarks.md, "CPU threads"). Nor do more threads buy a larger
//   share of a busy machine: Linux schedules each session (a terminal, a desktop program) as one
//   group (autogroup), so beside programs of other sessions keel's group gets its turn whatever
//   its thread count, and a training step whose long products took every thread anyway ran at
//   0.77x of one thread (docs/benchmarks.md). set_load_aware(false) turns it off.
// - A loop of one chunk, a loop inside another loop's chunk, and a loop while another thread of
//   the program is using the pool run on the calling thread alone, with no synchronisation.
// Chunk sizes: a chunk holds about 10 us of one core's work or more, 25 times what handing it to
// an awake worker costs (0.4 us) and twice what waking a sleeping one does (6 us). Each kernel
// turns that into elements from its own measured cost per element (apps/bench/bench_cpu, `ops`;
// docs/benchmarks.md, "CPU threads"); below one chunk's worth a loop is one chunk, on the calling
// thread.
//
// The thread count, the caller included: set_threads(n), else KEEL_NUM_THREADS, else
// OMP_NUM_THREADS (as PyTorch honours it), else the CPUs this process may run on. A
// KEEL_NUM_THREADS that is not a count from 1 to 1024 is a ConfigError; an invalid
// OMP_NUM_THREADS is ignored, as OpenMP runtimes ignore it.
#pragma once

#include <cstdint>
#include <type_traits>

namespace keel::parallel {

// The threads a loop runs on, the calling thread included (>= 1); default_threads() until
// set_threads is called. ConfigError for a bad KEEL_NUM_THREADS, from the first loop on.
int threads();
// The count from the environment and the CPUs, as described above (ConfigError as above).
int default_threads();
// Sets it (n >= 1; ValueError otherwise). Workers start when first needed.
void set_threads(int n);
// True inside a chunk: a loop started there runs on the calling thread alone.
bool in_parallel();
// The threads a loop started now would run on (>= 1): threads(), but 1 inside a chunk or while
// another thread's loop holds the pool, and no more than the CPUs other programs leave free when
// load_aware(). A kernel that cuts its work by the thread count (a product's row blocks,
// ops/cpu/matmul.cpp) cuts it by this, so that on a busy machine it does not pay for a split that
// one thread then runs alone. Its cuts must not change its results: this moves with the load.
int usable_threads();
// Whether loops leave the CPUs other programs keep busy to them (the default) or use threads()
// regardless (tests and benchmarks that need every thread). Results are the same either way.
void set_load_aware(bool on);
bool load_aware();

namespace detail {
using ChunkFn = void (*)(void* ctx, int64_t chunk);
// Runs fn(ctx, c) for c in [0, chunks) on the pool; rethrows the first exception a chunk threw.
void run(int64_t chunks, ChunkFn fn, void* ctx);
}  // namespace detail

// f(c) for every chunk c in [0, chunks), each exactly once, on any of the threads; returns when
// all are done. An exception from a chunk is rethrown here (chunks not yet started may be skipped).
template <typename F>
void for_each_chunk(int64_t chunks, F&& f) {
  if (chunks <= 0) return;
  if (chunks == 1 || threads() == 1 || in_parallel()) {
    for (int64_t c = 0; c < chunks; ++c) f(c);
    return;
  }
  using Fn = std::remove_reference_t<F>;
  detail::run(
      chunks, [](void* ctx, int64_t c) { (*static_cast<Fn*>(ctx))(c); },
      const_cast<void*>(static_cast<const void*>(&f)));
}

// The number of chunks of `grain` elements (the last one shorter) that cover n elements.
inline int64_t chunks_of(int64_t n, int64_t grain) { return n <= 0 ? 0 : (n + grain - 1) / grain; }

// f(begin, end) over [0, n) in chunks of `grain` elements (the last one shorter): the chunks,
// and so the results, depend on n and grain only.
template <typename F>
void for_range(int64_t n, int64_t grain, F&& f) {
  if (grain < 1) grain = 1;
  for_each_chunk(chunks_of(n, grain), [&](int64_t c) {
    const int64_t begin = c * grain;
    f(begin, n - begin < grain ? n : begin + grain);
  });
}

// f(begin, end) over rows [0, rows) of `width` elements each, in chunks of whole rows holding at
// least `grain` elements (one chunk when all the rows hold fewer).
template <typename F>
void for_rows(int64_t rows, int64_t width, int64_t grain, F&& f) {
  const int64_t w = width < 1 ? 1 : width;
  for_range(rows, (grain + w - 1) / w, f);
}

// Sets the thread count for a scope and restores the previous one after it (tests, benchmarks).
class ThreadsGuard {
 public:
  explicit ThreadsGuard(int n) : previous_(threads()) { set_threads(n); }
  ~ThreadsGuard() { set_threads(previous_); }
  ThreadsGuard(const ThreadsGuard&) = delete;
  ThreadsGuard& operator=(const ThreadsGuard&) = delete;

 private:
  int previous_;
};

}  // namespace keel::parallel
