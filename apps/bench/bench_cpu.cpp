// keel's CPU against this machine's own ceilings (a benchmark, not a test; docs/benchmarks.md).
//
//   bench_cpu [--threads N] [--sections machine,pool,products,ops,loss] [--reps R]
//
//   machine   the FMA peak (core/cpu_peak.h) and the memory bandwidth, on 1 and N threads
//   pool      what a parallel loop costs (core/parallel.h): workers awake, and asleep
//   products  each matrix product of the demo-shaped training step (4 layers, width 128, T 256,
//             B 8, vocabulary 10000), forward and backward, on 1 and N threads, as GFLOP/s and as
//             a share of the FMA peak
//   ops       the break-even sizes behind the kernels' chunk sizes: each kernel at growing sizes on
//             1 and N threads, and the smallest size at which N threads win (bench_cpu_ops.cpp)
//   loss      the cross-entropy of the demo step's logits (2048 x 10000): loss and gradient in one
//             pass, as GB/s against the measured bandwidth
// Times are medians of --reps runs after a warm-up run.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <thread>

#include "apps/bench/bench_cpu.h"
#include "core/cpu_peak.h"
#include "core/factory.h"
#include "core/parallel.h"
#include "core/random.h"
#include "ops/cpu/cross_entropy.h"
#include "ops/cpu/matmul.h"
#include "ops/shape.h"

namespace keel::bench {

double median_seconds(int reps, const std::function<void()>& f) {
  if (reps == 0) {  // one cold run, no warm-up
    const auto t0 = std::chrono::steady_clock::now();
    f();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  for (int w = 0; w < 3; ++w) f();  // caches, the allocator and the clock settled
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

namespace {

void machine(int n, Context& ctx) {
  fmt::print("## machine ({})\n", cpu_peak::fma_kernel());
  for (int t : {1, n}) {
    const double peak = cpu_peak::fma_flops(t);
    const cpu_peak::Bandwidth bw = cpu_peak::memory_bandwidth(t);
    fmt::print("{} thread(s): FMA peak {:.1f} GFLOP/s; memory read {:.1f} GB/s, write {:.1f} GB/s, copy {:.1f} GB/s\n",
               t, peak / 1e9, bw.read / 1e9, bw.write / 1e9, bw.copy / 1e9);
    if (t == n) ctx.peak = peak, ctx.bandwidth = bw;
    if (n == 1) break;
  }
}

void pool(int n, int reps) {
  fmt::print("## pool: one loop of {} empty chunks on {} threads\n", 2 * n, n);
  if (n == 1) return fmt::print("(one thread: a loop runs inline and costs nothing)\n\n");
  parallel::ThreadsGuard threads(n);
  std::atomic<int64_t> sink{0};
  auto loop = [&] {
    parallel::for_each_chunk(2 * n, [&](int64_t c) { sink.fetch_add(c, std::memory_order_relaxed); });
  };
  const double awake = median_seconds(reps * 100, loop);
  std::vector<double> asleep;
  for (int r = 0; r < reps * 10; ++r) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // the workers go to sleep
    asleep.push_back(median_seconds(0, loop));
  }
  std::sort(asleep.begin(), asleep.end());
  fmt::print("back to back (workers spinning): {:.2f} us a loop\n", awake * 1e6);
  fmt::print("after 2 ms idle (workers asleep): {:.2f} us a loop\n\n", asleep[asleep.size() / 2] * 1e6);
}

struct Product {
  const char* what;
  int64_t M, K, N;
  bool ta, tb;  // a is stored transposed (K, M); b is stored transposed (N, K)
  int per_step;
};

// The demo step's products (nn/gpt2.cpp, ops/mlp.h): per layer qkv, attention's out projection,
// c_fc and c_proj, forward and both gradients; the tied output layer once.
const Product kProducts[] = {
    {"lm_head forward x W^T", 2048, 128, 10000, false, true, 1},
    {"lm_head dx = g W", 2048, 10000, 128, false, false, 1},
    {"lm_head dW = g^T x", 10000, 2048, 128, true, false, 1},
    {"c_fc forward", 2048, 128, 512, false, true, 4},
    {"c_proj forward", 2048, 512, 128, false, true, 4},
    {"c_attn forward", 2048, 128, 384, false, true, 4},
    {"attn c_proj forward", 2048, 128, 128, false, true, 4},
    {"c_fc dx", 2048, 512, 128, false, false, 4},
    {"c_fc dW", 512, 2048, 128, true, false, 4},
    {"c_proj dx", 2048, 128, 512, false, false, 4},
    {"c_proj dW", 128, 2048, 512, true, false, 4},
    {"c_attn dW", 384, 2048, 128, true, false, 4},
};

void products(int n, int reps, const Context& ctx) {
  fmt::print("## products of the demo step (f32; share of the {}-thread FMA peak of {:.1f} GFLOP/s)\n", n,
             ctx.peak / 1e9);
  fmt::print("{:<24} {:<22} {:>7} {:>10} {:>10} {:>7}\n", "product", "shape", "/step", "1 thread", "N threads",
             "of peak");
  Generator gen(1);
  double flops_step = 0, seconds_step = 0;
  for (const Product& p : kProducts) {
    Tensor a = p.ta ? transpose(randn({p.K, p.M}, gen), 0, 1) : randn({p.M, p.K}, gen);
    Tensor b = p.tb ? transpose(randn({p.N, p.K}, gen), 0, 1) : randn({p.K, p.N}, gen);
    const double flops = 2.0 * double(p.M) * double(p.N) * double(p.K);
    double gf[2] = {0, 0};
    for (int i = 0; i < 2; ++i) {
      parallel::ThreadsGuard threads(i == 0 ? 1 : n);
      gf[i] = flops / median_seconds(reps, [&] { (void)cpu::matmul(a, b); }) / 1e9;
    }
    flops_step += flops * p.per_step;
    seconds_step += flops * p.per_step / (gf[1] * 1e9);
    fmt::print("{:<24} {:<22} {:>7} {:>10.1f} {:>10.1f} {:>6.1f}%\n", p.what,
               fmt::format("[{},{}]x[{},{}]", p.M, p.K, p.K, p.N), p.per_step, gf[0], gf[1],
               100 * gf[1] * 1e9 / ctx.peak);
  }
  fmt::print("the step's products: {:.1f} GFLOP in {:.1f} ms, {:.1f} GFLOP/s, {:.1f}% of the peak\n\n",
             flops_step / 1e9, seconds_step * 1e3, flops_step / seconds_step / 1e9,
             100 * flops_step / seconds_step / ctx.peak);
}

void loss(int n, int reps, const Context& ctx) {
  fmt::print("## cross-entropy, logits [2048, 10000] f32, on {} threads\n", n);
  parallel::ThreadsGuard threads(n);
  Generator gen(2);
  const int64_t N = 2048, V = 10000;
  Tensor logits = randn({N, V}, gen), targets = empty({N}, {DType::i64});
  for (int64_t i = 0; i < N; ++i) targets.data<int64_t>()[i] = (i * 7919) % V;
  Tensor lse, count, dlogits;
  const double fwd =
      median_seconds(reps, [&] { (void)cpu::cross_entropy_forward(logits, targets, V, -100, lse, count); });
  const double both = median_seconds(
      reps, [&] { (void)cpu::cross_entropy_forward(logits, targets, V, -100, lse, count, &dlogits, 1.0f); });
  const double bytes = double(N) * double(V) * 4;
  fmt::print("loss alone:            {:.2f} ms, {:.1f} GB/s read ({:.0f}% of the read bandwidth {:.1f} GB/s)\n",
             fwd * 1e3, bytes / fwd / 1e9, 100 * bytes / fwd / ctx.bandwidth.read, ctx.bandwidth.read / 1e9);
  fmt::print(
      "loss and its gradient: {:.2f} ms, {:.1f} GB/s read + written ({:.0f}% of the copy bandwidth {:.1f} GB/s)\n\n",
      both * 1e3, 2 * bytes / both / 1e9, 100 * 2 * bytes / both / ctx.bandwidth.copy, ctx.bandwidth.copy / 1e9);
}

}  // namespace
}  // namespace keel::bench

int main(int argc, char** argv) {
  using namespace keel;
  CLI::App app{"keel's CPU kernels against the machine's measured FMA peak and memory bandwidth"};
  int n = parallel::threads(), reps = 7;
  std::string sections = "machine,pool,products,ops,loss";
  app.add_option("--threads", n, "the N of the N-thread columns (default: keel's thread count)")
      ->check(CLI::PositiveNumber);
  app.add_option("--sections", sections, "comma-separated: machine, pool, products, ops, loss");
  app.add_option("--reps", reps, "timed runs per figure (the median is printed)")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  auto has = [&](const char* s) {
    return ("," + sections + ",").find(std::string(",") + s + ",") != std::string::npos;
  };
  try {
    // The kernels' own speed on N threads, whatever else runs (core/parallel.h: by default a loop
    // leaves busy CPUs to other programs); measure on a quiet machine.
    parallel::set_load_aware(false);
    bench::Context ctx;
    fmt::print("bench_cpu: N = {} threads (keel's default here: {})\n\n", n, parallel::threads());
    bench::machine(n, ctx);  // every other section is measured against it
    fmt::print("\n");
    if (has("pool")) bench::pool(n, reps);
    if (has("products")) bench::products(n, reps, ctx);
    if (has("ops")) bench::ops(n, reps);
    if (has("loss")) bench::loss(n, reps, ctx);
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
}
