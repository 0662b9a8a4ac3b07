// keel's CPU thread pool (core/parallel.h) and the CPU block cache (core/allocator.h).
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <numeric>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/allocator.h"
#include "core/error.h"
#include "core/parallel.h"

using namespace keel;

TEST_CASE("for_each_chunk runs every chunk exactly once, on any thread count") {
  for (int threads : {1, 2, 3, 8}) {
    CAPTURE(threads);
    parallel::ThreadsGuard guard(threads);
    for (int64_t chunks : {0, 1, 2, 7, 1000}) {
      std::vector<std::atomic<int>> runs(static_cast<size_t>(chunks));
      parallel::for_each_chunk(chunks, [&](int64_t c) { runs[size_t(c)].fetch_add(1); });
      for (auto& r : runs) CHECK(r.load() == 1);
    }
  }
}

TEST_CASE("for_range covers 0 .. n in chunks of the grain, the last one shorter") {
  parallel::ThreadsGuard guard(3);
  std::vector<std::pair<int64_t, int64_t>> seen(4);
  parallel::for_range(10, 3, [&](int64_t b, int64_t e) { seen[size_t(b / 3)] = {b, e}; });
  CHECK(seen == std::vector<std::pair<int64_t, int64_t>>{{0, 3}, {3, 6}, {6, 9}, {9, 10}});
  int calls = 0;
  parallel::for_rows(5, 100, 1000, [&](int64_t b, int64_t e) { calls += int(b == 0 && e == 5); });
  CHECK(calls == 1);  // 500 elements below the grain: one chunk, on the calling thread
  CHECK(parallel::chunks_of(0, 4) == 0);
  CHECK(parallel::chunks_of(9, 4) == 3);
}

TEST_CASE("chunks run on several threads, and a loop inside a chunk runs on its thread") {
  parallel::ThreadsGuard guard(2);
  parallel::set_load_aware(false);  // two threads even while other tests keep the CPUs busy
  std::mutex mu;
  std::set<std::thread::id> ids;
  std::atomic<int> nested_elsewhere{0};
  // Each chunk waits a little, so the worker certainly takes some of them.
  parallel::for_each_chunk(16, [&](int64_t) {
    CHECK(parallel::in_parallel());
    const std::thread::id me = std::this_thread::get_id();
    parallel::for_each_chunk(4, [&](int64_t) { nested_elsewhere += int(std::this_thread::get_id() != me); });
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    std::lock_guard<std::mutex> lock(mu);
    ids.insert(me);
  });
  parallel::set_load_aware(true);
  CHECK(ids.size() == 2);
  CHECK(nested_elsewhere.load() == 0);
  CHECK_FALSE(parallel::in_parallel());
}

TEST_CASE("a chunk's exception reaches the caller, and the pool keeps working") {
  parallel::ThreadsGuard guard(2);
  CHECK_THROWS_AS(parallel::for_each_chunk(8,
                                           [](int64_t c) {
                                             if (c == 5) throw ValueError("test", "chunk 5");
                                           }),
                  ValueError);
  std::atomic<int64_t> sum{0};
  parallel::for_each_chunk(100, [&](int64_t c) { sum += c; });
  CHECK(sum.load() == 4950);
}

TEST_CASE("two threads of a program may run loops at once: one of them runs its loop alone") {
  parallel::ThreadsGuard guard(2);
  std::atomic<int64_t> a{0}, b{0};
  std::thread other([&] {
    for (int i = 0; i < 200; ++i) parallel::for_each_chunk(8, [&](int64_t c) { a += c; });
  });
  for (int i = 0; i < 200; ++i) parallel::for_each_chunk(8, [&](int64_t c) { b += c; });
  other.join();
  CHECK(a.load() == 200 * 28);
  CHECK(b.load() == 200 * 28);
}


TEST_CASE("usable_threads: the threads a loop started now would get") {
  parallel::ThreadsGuard guard(3);
  parallel::set_load_aware(false);
  CHECK(parallel::usable_threads() == 3);
  std::atomic<int> inside{0};
  parallel::for_each_chunk(4, [&](int64_t) { inside.fetch_add(parallel::usable_threads()); });
  CHECK(inside.load() == 4);  // a loop inside a chunk runs on its thread alone
  {
    parallel::ThreadsGuard one(1);
    CHECK(parallel::usable_threads() == 1);
  }
  // While another thread's loop holds the pool, a loop here would run alone.
  std::atomic<bool> started{false}, release{false};
  std::thread other([&] {
    parallel::for_each_chunk(3, [&](int64_t c) {
      if (c != 0) return;
      started = true;
      while (!release) std::this_thread::yield();
    });
  });
  while (!started) std::this_thread::yield();
  CHECK(parallel::usable_threads() == 1);
  release = true;
  other.join();
  parallel::set_load_aware(true);
  const int n = parallel::usable_threads();  // fewer while other programs keep CPUs busy
  CHECK(n >= 1);
  CHECK(n <= 3);
}
TEST_CASE("the thread count: at least 1, from set_threads, and a bad one is refused") {
  parallel::ThreadsGuard guard(5);
  CHECK(parallel::threads() == 5);
  CHECK_THROWS_AS(parallel::set_threads(0), ValueError);
  CHECK(parallel::threads() == 5);
}

TEST_CASE("the thread count from the environment: KEEL_NUM_THREADS, else OMP_NUM_THREADS") {
  // Restores both variables as they were, so later tests see the environment ctest gave them.
  struct Env {
    const char* name;
    bool had;
    std::string was;
    explicit Env(const char* n) : name(n), had(std::getenv(n) != nullptr), was(had ? std::getenv(n) : "") {}
    ~Env() { had ? setenv(name, was.c_str(), 1) : unsetenv(name); }
  } keel_env("KEEL_NUM_THREADS"), omp_env("OMP_NUM_THREADS");
  unsetenv("KEEL_NUM_THREADS");
  setenv("OMP_NUM_THREADS", "3,2", 1);  // OpenMP's per-nesting-level list: the first entry
  CHECK(parallel::default_threads() == 3);
  setenv("KEEL_NUM_THREADS", "7", 1);  // keel's own setting wins
  CHECK(parallel::default_threads() == 7);
  for (const char* bad : {"abc", "0", "-2", "4x", "2,2", "1025", " ", "99999999999999999999"}) {
    CAPTURE(bad);
    setenv("KEEL_NUM_THREADS", bad, 1);
    CHECK_THROWS_AS(parallel::default_threads(), ConfigError);
  }
  unsetenv("KEEL_NUM_THREADS");
  setenv("OMP_NUM_THREADS", "many", 1);  // not keel's to refuse: ignored, as OpenMP ignores it
  CHECK(parallel::default_threads() >= 1);
}

TEST_CASE("a freed CPU block of 1 MB or more comes back for the next request of its size") {
  const size_t n = size_t{3} << 20;
  void* p = allocate(Device::cpu(), n);
  static_cast<char*>(p)[n - 1] = 1;
  const MemoryStats live = memory_stats(Device::cpu());
  deallocate(Device::cpu(), p, n);
  const MemoryStats freed = memory_stats(Device::cpu());
  CHECK(freed.current + n == live.current);
#if !defined(__SANITIZE_ADDRESS__)
  CHECK(freed.reserved >= freed.current + n);  // held by the cache
  void* q = allocate(Device::cpu(), n);
  CHECK(q == p);
  deallocate(Device::cpu(), q, n);
#endif
  void* small = allocate(Device::cpu(), 1000);  // small blocks are the C library's business
  CHECK(reinterpret_cast<uintptr_t>(small) % 64 == 0);
  deallocate(Device::cpu(), small, 1000);
}
