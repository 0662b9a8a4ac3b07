// bench_cpu's `ops` section: where keel's CPU kernels start to use more than one thread, and
// whether that pays. Each kernel runs at sizes around its chunk size (the constant in its source
// that the kernel splits its work by) on 1 and on N threads. Below one chunk a kernel runs on
// the calling thread alone, so the two columns agree; from two chunks on N threads should win.
// A ratio under 1 at any size would mean a threshold set too low.
#include <fmt/format.h>

#include <algorithm>

#include "apps/bench/bench_cpu.h"
#include "core/factory.h"
#include "core/parallel.h"
#include "core/random.h"
#include "ops/cpu/embedding.h"
#include "ops/cpu/gelu.h"
#include "ops/cpu/layernorm.h"
#include "ops/cpu/matmul.h"
#include "ops/cpu/reduce.h"
#include "ops/cpu/softmax.h"
#include "optim/cpu/adamw.h"
#include "optim/cpu/grad_math.h"

namespace keel::bench {

namespace {

struct Sweep {
  const char* kernel;
  const char* unit;  // what `size` counts
  std::vector<int64_t> sizes;
  // Makes the inputs for `size` and returns the call to time.
  std::function<std::function<void()>(int64_t size)> make;
};

void run_sweep(const Sweep& s, int n, int reps) {
  for (int64_t size : s.sizes) {
    const std::function<void()> call = s.make(size);
    double t[2];
    for (int i = 0; i < 2; ++i) {
      parallel::ThreadsGuard threads(i == 0 ? 1 : n);
      t[i] = median_seconds(reps, call);
    }
    fmt::print("{:<30} {:>9} {:<10} {:>10.2f} {:>10.2f} {:>7.2f}x\n", s.kernel, size, s.unit, t[0] * 1e6, t[1] * 1e6,
               t[0] / t[1]);
  }
}

std::vector<Sweep> sweeps(Generator& gen) {
  std::vector<Sweep> out;
  auto elems = [](std::initializer_list<int64_t> v) { return std::vector<int64_t>(v); };
  out.push_back(
      {"gelu forward", "elements", elems({1 << 13, 1 << 14, 1 << 15, 1 << 16, 1 << 17, 1 << 20}), [&gen](int64_t size) {
         Tensor x = randn({size}, gen);
         return std::function<void()>([x] { (void)cpu::gelu_forward(x); });
       }});
  out.push_back({"gelu backward", "elements", elems({1 << 13, 1 << 14, 1 << 15, 1 << 16, 1 << 17, 1 << 20}),
                 [&gen](int64_t size) {
                   Tensor x = randn({size}, gen), g = randn({size}, gen);
                   return std::function<void()>([x, g] { (void)cpu::gelu_backward(g, x); });
                 }});
  out.push_back({"layernorm forward, C 128", "rows", elems({64, 128, 256, 512, 1024, 2048}), [&gen](int64_t rows) {
                   Tensor x = randn({rows, 128}, gen), w = randn({128}, gen), b = randn({128}, gen);
                   return std::function<void()>([x, w, b] {
                     Tensor m, r;
                     (void)cpu::layernorm_forward(x, w, b, 1e-5, m, r);
                   });
                 }});
  out.push_back(
      {"layernorm backward, C 128", "rows", elems({64, 128, 256, 512, 1024, 2048}), [&gen](int64_t rows) {
         Tensor x = randn({rows, 128}, gen), w = randn({128}, gen), b = randn({128}, gen), g = randn({rows, 128}, gen);
         Tensor m, r;
         (void)cpu::layernorm_forward(x, w, b, 1e-5, m, r);
         return std::function<void()>([x, w, g, m, r] {
           Tensor dx, dw, db;
           cpu::layernorm_backward(g, x, w, m, r, true, true, true, dx, dw, db);
         });
       }});
  out.push_back(
      {"adamw step", "elements", elems({1 << 12, 1 << 13, 1 << 14, 1 << 15, 1 << 16, 1 << 20}), [&gen](int64_t size) {
         Tensor p = randn({size}, gen), g = randn({size}, gen), m = zeros({size}), v = zeros({size}), master;
         optim::AdamWScalars s;
         s.step_size = 1e-3;
         return std::function<void()>([=]() mutable { optim::cpu::adamw_step(p, g, m, v, master, s); });
       }});
  out.push_back(
      {"sum of squares", "elements", elems({1 << 15, 1 << 16, 1 << 17, 1 << 18, 1 << 20}), [&gen](int64_t size) {
         Tensor g = randn({size}, gen);
         return std::function<void()>([g] { (void)optim::cpu::sum_of_squares(g); });
       }});
  out.push_back({"embedding forward, C 128", "rows", elems({128, 256, 512, 1024, 2048, 8192}), [&gen](int64_t rows) {
                   Tensor w = randn({10000, 128}, gen), ids = empty({rows}, {DType::i64}), out = empty({rows, 128});
                   for (int64_t i = 0; i < rows; ++i) ids.data<int64_t>()[i] = (i * 7919) % 10000;
                   return std::function<void()>([=]() mutable { cpu::embedding_forward(w, ids, out); });
                 }});
  out.push_back({"sum over rows of 128", "rows", elems({64, 128, 256, 512, 1024, 4096}), [&gen](int64_t rows) {
                   Tensor x = randn({rows, 128}, gen), out = empty({rows});
                   return std::function<void()>([=]() mutable { cpu::reduce_dim(Reduce::sum, x, rows, 128, 1, out, nullptr); });
                 }});
  out.push_back({"softmax, rows of 256", "rows", elems({32, 64, 128, 256, 1024}), [&gen](int64_t rows) {
                   Tensor x = randn({rows, 256}, gen);
                   return std::function<void()>([x] { (void)cpu::softmax_forward(x, 1, false); });
                 }});
  // A decode step's products: one row against a weight of N outputs and K = 192 inputs.
  out.push_back({"linear, 1 row, K 192", "outputs", elems({64, 192, 384, 576, 768, 10000}), [&gen](int64_t outputs) {
                   Tensor x = randn({1, 192}, gen), w = randn({outputs, 192}, gen);
                   return std::function<void()>([x, w] { (void)cpu::linear(x, w, Tensor()); });
                 }});
  // A training step's products: rows against a 128 x 128 weight.
  out.push_back({"linear, K 128, N 128", "rows", elems({16, 32, 64, 128, 256, 2048}), [&gen](int64_t rows) {
                   Tensor x = randn({rows, 128}, gen), w = randn({128, 128}, gen);
                   return std::function<void()>([x, w] { (void)cpu::linear(x, w, Tensor()); });
                 }});
  return out;
}

}  // namespace

void ops(int n, int reps) {
  fmt::print("## ops: each kernel on 1 and {} threads (us, median of {})\n", n, reps);
  fmt::print("{:<30} {:>9} {:<10} {:>10} {:>10} {:>8}\n", "kernel", "size", "", "1 thread", "N threads", "gain");
  Generator gen(3);
  for (const Sweep& s : sweeps(gen)) run_sweep(s, n, reps);
  fmt::print("\n");
}

}  // namespace keel::bench
