// The pool behind core/parallel.h.
//
// One job at a time. Its state is one 64-bit word: a generation (which job), the chunk count and
// the next unclaimed chunk. A thread claims chunk i of job g by a compare-and-swap from (g, n, i)
// to (g, n, i + 1), so a worker that wakes late can never claim a chunk of a later job; it reads
// the job's function only after a successful claim, and the caller does not return (and so
// cannot post another job) before every claimed chunk is done.
#include "core/parallel.h"

#include <pthread.h>
#include <sched.h>
#if defined(__linux__)
#include <fcntl.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/error.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace keel::parallel {

namespace {

// How long a thread that has nothing to do spins before it sleeps: about what waking a
// sleeping thread costs, so back-to-back loops (a training step's hundreds) find the workers
// awake, while an idle keel sleeps after this long (docs/benchmarks.md, "CPU threads").
constexpr int64_t kSpinMicros = 50;

void relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Sleeps until `word` may differ from `old` (a wake-up may be spurious; callers check again).
// Linux: a futex on the word itself. Elsewhere: one condition variable for all words. Not
// std::atomic::wait, which adds its own spinning and yielding before it sleeps: the whole
// waiting policy stays here, in kSpinMicros.
#if defined(__linux__)
void sleep_while(const std::atomic<uint32_t>& word, uint32_t old) {
  syscall(SYS_futex, reinterpret_cast<const uint32_t*>(&word), FUTEX_WAIT_PRIVATE, old, nullptr, nullptr, 0);
}
void wake_all(std::atomic<uint32_t>& word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAKE_PRIVATE, INT32_MAX, nullptr, nullptr, 0);
}
#else
std::mutex g_sleep_mu;
std::condition_variable g_sleep_cv;
void sleep_while(const std::atomic<uint32_t>& word, uint32_t old) {
  std::unique_lock<std::mutex> lock(g_sleep_mu);
  if (word.load(std::memory_order_seq_cst) == old) g_sleep_cv.wait(lock);
}
void wake_all(std::atomic<uint32_t>&) {
  { std::lock_guard<std::mutex> lock(g_sleep_mu); }
  g_sleep_cv.notify_all();
}
#endif

// Spins on `word` until it differs from `old` for at most kSpinMicros, then sleeps on it.
// `sleepers` counts the threads asleep on it, so the writer wakes only when someone sleeps.
void wait_change(const std::atomic<uint32_t>& word, uint32_t old, std::atomic<int>& sleepers) {
  using clock = std::chrono::steady_clock;
  const auto until = clock::now() + std::chrono::microseconds(kSpinMicros);
  for (int i = 1; word.load(std::memory_order_acquire) == old; ++i) {
    relax();
    if (i % 64 == 0 && clock::now() >= until) {
      sleepers.fetch_add(1, std::memory_order_seq_cst);
      while (word.load(std::memory_order_seq_cst) == old) sleep_while(word, old);
      sleepers.fetch_sub(1, std::memory_order_relaxed);
      return;
    }
  }
}

// The job word: generation (24 bits), chunk count (20 bits), next chunk (20 bits).
constexpr int kCountBits = 20;
constexpr uint64_t kCountMask = (uint64_t{1} << kCountBits) - 1;
constexpr int64_t kMaxChunks = int64_t(kCountMask);
uint64_t pack(uint64_t gen, uint64_t count, uint64_t next) {
  return gen << (2 * kCountBits) | count << kCountBits | next;
}
uint64_t gen_of(uint64_t s) { return s >> (2 * kCountBits); }
uint64_t count_of(uint64_t s) { return (s >> kCountBits) & kCountMask; }
uint64_t next_of(uint64_t s) { return s & kCountMask; }

thread_local bool t_in_chunk = false;

constexpr long kMaxThreads = 1024;

// KEEL_NUM_THREADS is keel's own setting: a value that is not a count from 1 to kMaxThreads is
// refused (ConfigError), never guessed around. 0 when unset or empty.
int keel_env_threads() {
  const char* v = std::getenv("KEEL_NUM_THREADS");
  if (!v || !*v) return 0;
  char* end = nullptr;
  errno = 0;
  const long n = std::strtol(v, &end, 10);
  if (end == v || *end != '\0' || errno == ERANGE || n < 1 || n > kMaxThreads)
    throw ConfigError("KEEL_NUM_THREADS", "'" + std::string(v) + "' is not a thread count",
                      "set it to a whole number from 1 to " + std::to_string(kMaxThreads) +
                          ", or unset it to use every CPU this process may run on");
  return int(n);
}

// OMP_NUM_THREADS belongs to every OpenMP program the user runs; keel reads it as OpenMP
// runtimes do: the first entry of a per-nesting-level list, and an invalid value is ignored.
int omp_env_threads() {
  const char* v = std::getenv("OMP_NUM_THREADS");
  if (!v || !*v) return 0;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  if (end == v || (*end != '\0' && *end != ',')) return 0;
  return n >= 1 ? int(std::min(n, kMaxThreads)) : 0;
}

std::atomic<int> g_threads{0};  // 0: not yet decided
std::atomic<bool> g_load_aware{true};

int affinity_cpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return int(std::max(1u, std::thread::hardware_concurrency()));
}

// What other programs want to run: the kernel's count of runnable tasks on the whole machine
// right now (Linux: /proc/loadavg's fourth field, "4/245" -> 4), less keel's own runnable
// threads. One reading is one moment, so the pool goes by the least of the last kHistory
// readings, taken at most every kPeriod: it leaves CPUs to a load that lasts, and takes them back
// at the first reading that finds them free.
class LoadProbe {
 public:
  // The CPUs out of `cpus` that keel may use now (>= 1), with `own` of its threads runnable.
  int free_cpus(int cpus, int own) {
    const auto now = std::chrono::steady_clock::now();
    if (now < next_) return free_;
    next_ = now + kPeriod;
    const int running = read_running();
    if (running < 0) return free_ = cpus;  // no such count here: every CPU
    history_[at_++ % kHistory] = std::max(0, running - own);
    const int others = *std::min_element(history_, history_ + kHistory);
    return free_ = std::max(1, cpus - others);
  }

 private:
  static constexpr std::chrono::milliseconds kPeriod{10};
  static constexpr int kHistory = 3;
  int read_running() {
#if defined(__linux__)
    if (fd_ == -2) fd_ = open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
    char buf[128];
    const ssize_t n = fd_ >= 0 ? pread(fd_, buf, sizeof buf - 1, 0) : -1;
    if (n <= 0) return -1;
    buf[n] = '\0';
    double a, b, c;
    int running = 0, total = 0;
    return std::sscanf(buf, "%lf %lf %lf %d/%d", &a, &b, &c, &running, &total) == 5 ? running : -1;
#else
    return -1;
#endif
  }
  int fd_ = -2;  // -2: not opened yet
  std::chrono::steady_clock::time_point next_{};
  int history_[kHistory] = {};
  int at_ = 0;
  int free_ = 1;
};

class Pool {
 public:
  void run(int64_t chunks, detail::ChunkFn fn, void* ctx, int helpers);
  int usable(int threads);

 private:
  // The threads, the caller's included, that a loop may use now (busy_ held): `threads`, or
  // fewer when other programs keep CPUs busy.
  int allowed(int threads);
  void grow(int helpers);
  void worker(int index, uint32_t seen);
  // Claims and runs chunks of generation `gen` until none is left.
  void work(uint64_t gen);
  void run_chunk(int64_t c);

  std::mutex busy_;                // held by the thread whose job is posted
  std::atomic<uint64_t> job_{0};   // the job word
  detail::ChunkFn fn_ = nullptr;   // the posted job's function and context: written before
  void* ctx_ = nullptr;            // job_ is, read only after a claim
  std::atomic<uint32_t> done_{0};  // chunks of the posted job finished
  std::atomic<uint32_t> wake_{0};  // bumped for every job; idle workers wait on it
  std::atomic<int> sleepers_{0};   // workers asleep on wake_
  std::atomic<int> caller_sleeps_{0};
  std::atomic<int> helpers_{0};  // workers with an index below this take part
  std::mutex error_mu_;
  std::exception_ptr error_;
  std::vector<std::thread> workers_;
  uint64_t gen_ = 0;
  LoadProbe probe_;  // read by the thread holding busy_
  const int cpus_ = affinity_cpus();
};

void Pool::run_chunk(int64_t c) {
  try {
    fn_(ctx_, c);
  } catch (...) {
    std::lock_guard<std::mutex> lock(error_mu_);
    if (!error_) error_ = std::current_exception();
  }
}

void Pool::work(uint64_t gen) {
  uint64_t s = job_.load(std::memory_order_acquire);
  while (gen_of(s) == gen && next_of(s) < count_of(s)) {
    if (!job_.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel, std::memory_order_acquire)) continue;
    run_chunk(int64_t(next_of(s)));
    if (done_.fetch_add(1, std::memory_order_seq_cst) + 1 == count_of(s) &&
        caller_sleeps_.load(std::memory_order_seq_cst) > 0)
      wake_all(done_);
    s = job_.load(std::memory_order_acquire);
  }
}

// seen: wake_ before the job the worker was started for, which it is to take part in.
void Pool::worker(int index, uint32_t seen) {
  t_in_chunk = true;  // a loop inside a chunk runs on its thread
  for (;;) {
    wait_change(wake_, seen, sleepers_);
    seen = wake_.load(std::memory_order_acquire);
    if (index >= helpers_.load(std::memory_order_relaxed)) continue;
    work(gen_of(job_.load(std::memory_order_acquire)));
  }
}

void Pool::grow(int helpers) {
  while (int(workers_.size()) < helpers) {
    const int index = int(workers_.size());
    const uint32_t seen = wake_.load(std::memory_order_relaxed);  // the job about to be posted is new to it
    workers_.emplace_back([this, index, seen] { worker(index, seen); });
    workers_.back().detach();  // parked in the kernel when idle; the process exits around them
  }
}

int Pool::allowed(int threads) {
  if (!g_load_aware.load(std::memory_order_relaxed)) return threads;
  const int own = 1 + int(workers_.size()) - sleepers_.load(std::memory_order_relaxed);
  return std::min(threads, probe_.free_cpus(cpus_, own));
}

int Pool::usable(int threads) {
  std::unique_lock<std::mutex> lock(busy_, std::try_to_lock);
  return lock.owns_lock() ? allowed(threads) : 1;
}

void Pool::run(int64_t chunks, detail::ChunkFn fn, void* ctx, int helpers) {
  std::unique_lock<std::mutex> lock(busy_, std::try_to_lock);
  if (lock.owns_lock()) helpers = allowed(helpers + 1) - 1;
  // One thread: another thread's loop holds the pool, or other programs hold the other CPUs.
  if (!lock.owns_lock() || helpers < 1 || chunks > kMaxChunks) {
    struct InChunk {
      InChunk() { t_in_chunk = true; }
      ~InChunk() { t_in_chunk = false; }
    } in_chunk;
    for (int64_t c = 0; c < chunks; ++c) fn(ctx, c);
    return;
  }
  grow(helpers);
  helpers_.store(helpers, std::memory_order_relaxed);
  fn_ = fn, ctx_ = ctx;
  error_ = nullptr;
  done_.store(0, std::memory_order_relaxed);
  gen_ = (gen_ + 1) & ((uint64_t{1} << 24) - 1);
  job_.store(pack(gen_, uint64_t(chunks), 0), std::memory_order_release);
  wake_.fetch_add(1, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) > 0) wake_all(wake_);

  t_in_chunk = true;
  work(gen_);
  t_in_chunk = false;
  // Every chunk is claimed; wait for the ones the workers hold.
  const uint32_t n = uint32_t(chunks);
  using clock = std::chrono::steady_clock;
  const auto until = clock::now() + std::chrono::microseconds(kSpinMicros);
  for (int i = 1; done_.load(std::memory_order_acquire) != n; ++i) {
    relax();
    if (i % 64 == 0 && clock::now() >= until) {
      caller_sleeps_.fetch_add(1, std::memory_order_seq_cst);
      for (uint32_t d; (d = done_.load(std::memory_order_seq_cst)) != n;) sleep_while(done_, d);
      caller_sleeps_.fetch_sub(1, std::memory_order_relaxed);
      break;
    }
  }
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

Pool* g_pool = nullptr;
std::once_flag g_pool_once;

Pool& pool() {
  std::call_once(g_pool_once, [] {
    g_pool = new Pool;  // never destroyed: workers may outlive every static destructor
    // A forked child has none of the parent's threads: it starts a pool of its own when needed.
    pthread_atfork(nullptr, nullptr, [] { g_pool = new Pool; });
  });
  return *g_pool;
}

}  // namespace

int default_threads() {
  if (int n = keel_env_threads()) return n;
  if (int n = omp_env_threads()) return n;
  return affinity_cpus();
}

int threads() {
  int n = g_threads.load(std::memory_order_relaxed);
  if (n == 0) {
    n = default_threads();
    g_threads.store(n, std::memory_order_relaxed);
  }
  return n;
}

void set_threads(int n) {
  if (n < 1) throw ValueError("parallel::set_threads", "thread count " + std::to_string(n) + " is below 1");
  g_threads.store(n, std::memory_order_relaxed);
}

bool in_parallel() { return t_in_chunk; }

int usable_threads() {
  const int n = threads();
  return n == 1 || t_in_chunk ? 1 : pool().usable(n);
}

void set_load_aware(bool on) { g_load_aware.store(on, std::memory_order_relaxed); }
bool load_aware() { return g_load_aware.load(std::memory_order_relaxed); }

namespace detail {
void run(int64_t chunks, ChunkFn fn, void* ctx) { pool().run(chunks, fn, ctx, threads() - 1); }
}  // namespace detail

}  // namespace keel::parallel
