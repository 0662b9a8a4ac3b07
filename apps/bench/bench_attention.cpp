// bench_attention: keel's flash-attention kernels (ops/cuda/attention.h), forward and
// forward+backward, bf16 (the tensor-core kernels, FlashAttention-2's design on mma.sync), for
// every head pattern
// the project cares about:
//
//   mhsa       6 heads, all full causal (window 0)
//   ls_w50     LS-attention as in the paper: 5 local heads of window 50 first, then 1 global head
//   ls_w100    the same with window 100
//   local_w50  6 local heads of window 50 and no global head: its time must grow linearly in T
//
// at head dims D = 32, 64, 128 and T = 1k, 2k, 4k, 8k, 16k. H = 6 (one LS group) and the batch
// is B = round(rows / (H * T)) with rows = 2^21 query rows by default (--rows; --batch fixes B
// instead, as the FlashAttention-2 comparison's B = 8, H = 12 does), so every config
// does about the same number of query rows (2M): enough blocks to fill an H100 at every T (the
// forward launches B*H*T/64 blocks of 64 rows: 32k of them), and a pattern whose cost is linear
// in T shows a flat time across T while MHSA's doubles with each doubling of T. The table also
// gives microseconds per (b, h) sequence, which is what grows linearly (local) or quadratically
// (MHSA) with T.
//
// FLOPs count only the (query, key) pairs each head's window allows, as train_flops_per_token
// does: forward = 4 * D * sum_i keys(i) per (b, h) (2 * D for q.k and 2 * D for p.v per pair);
// forward+backward = 3.5 x forward (the FlashAttention convention: backward = 2.5 x forward, its
// five matrix products against the forward's two, not counting the recomputation of p).
//
// Timing: the kernels are called directly (keel::cuda::attention_forward/backward) on buffers
// allocated once per config, so the numbers are the kernels' and not the autograd engine's;
// --op times the front end as the model calls it instead: attention_packed() on a (B, T, 3C)
// projection that requires grad, and the autograd backward to its (B, T, 3C) gradient. Each config: 2
// warm-up calls, then reps sized to about --budget-ms of device time (clamped to
// [--min-reps, --max-reps]), each rep timed with CUDA events on keel's stream; the median is
// reported (min and mean in the JSON).
//
// --kernel sm90 runs the forward and backward on Hopper's warpgroup kernels (ops/cuda/attention.h;
// on a GPU of compute capability 9.0, head dims 40 to 128): impl "keel-sm90".
//
// Not a test: on a machine without a GPU it says so and exits 0. Output: a table on stdout and,
// with --json PATH, one JSON object per (config, pass) in the schema attention_baseline.py also
// writes (see docs/gpu-benchmarks.md); impl "keel" ("keel-op" with --op).
//
//   bench_attention [--json PATH] [--dims 32,64,128] [--seqs 1024,2048,4096,8192,16384]
//                   [--patterns mhsa,ls_w50,ls_w100,local_w50] [--rows 2097152] [--batch 0] [--heads 6]
//                   [--budget-ms 300] [--min-reps 3] [--max-reps 50] [--warmup 2] [--op]
//                   [--nondeterministic] [--kernel mma|sm90]
// --nondeterministic times the backward with its dQ adds in any order (keel::set_deterministic,
// core/determinism.h), against the default's ordered adds: impl "keel-nondet" in the JSON.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/cuda/check.h"
#include "core/cuda/runtime.h"
#include "core/determinism.h"
#include "core/factory.h"
#include "core/random.h"
#include "ops/attention.h"
#include "ops/cuda/attention.h"

using namespace keel;

namespace {

struct BenchOptions {
  std::string json_path;
  std::vector<int64_t> dims = {32, 64, 128};
  std::vector<int64_t> seqs = {1024, 2048, 4096, 8192, 16384};
  std::vector<std::string> patterns = {"mhsa", "ls_w50", "ls_w100", "local_w50"};
  int64_t rows = int64_t(1) << 21;
  int64_t batch = 0;  // > 0: this B for every T instead of rows / (H T)
  int64_t heads = 6;
  double budget_ms = 300;
  int min_reps = 3, max_reps = 50, warmup = 2;
  bool op = false;
  bool nondeterministic = false;  // the backward's dQ added in any order (core/determinism.h)
  std::string kernel = "mma";     // the forward's kernel: mma | sm90 (cuda::AttentionKernel)
};

// The JSON's impl: "keel" or "keel-op" (--op), "-sm90" added for --kernel sm90, "-nondet" for
// --nondeterministic.
std::string impl_of(const BenchOptions& o) {
  return std::string(o.op ? "keel-op" : "keel") + (o.kernel == "sm90" ? "-sm90" : "") +
         (o.nondeterministic ? "-nondet" : "");
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

std::vector<int64_t> split_ints(const std::string& s) {
  std::vector<int64_t> out;
  for (const auto& x : split(s)) out.push_back(std::stoll(x));
  return out;
}

// Windows of a named pattern over H heads (local heads first, as AttentionSpec::ls puts them).
// Patterns: mhsa, ls_wN (H-1 local heads of window N + 1 global), local_wN (all local).
std::vector<int64_t> pattern_windows(const std::string& name, int64_t H) {
  if (name == "mhsa") return AttentionSpec::mhsa(H).window;
  if (name.rfind("ls_w", 0) == 0) return AttentionSpec::ls(H, H - 1, std::stoll(name.substr(4))).window;
  if (name.rfind("local_w", 0) == 0) return AttentionSpec::ls(H, H, std::stoll(name.substr(7))).window;
  throw ValueError("bench_attention", "unknown pattern '" + name + "'", "use mhsa, ls_wN or local_wN");
}

// Keys query i (0-based) sees under window w: i + 1 when full causal, else min(i + 1, w).
// Summed over i in closed form.
double sum_keys(int64_t T, int64_t w) {
  const double t = double(T);
  if (w <= 0 || w >= T) return t * (t + 1) / 2;
  const double ww = double(w);
  return ww * (ww + 1) / 2 + (t - ww) * ww;
}

// Forward FLOPs of one call: 4 * D per allowed (query, key) pair, over every batch and head.
double forward_flops(int64_t B, int64_t T, int64_t D, const std::vector<int64_t>& windows) {
  double pairs = 0;
  for (int64_t w : windows) pairs += sum_keys(T, w);
  return 4.0 * double(D) * double(B) * pairs;
}

struct Timing {
  double median_ms = 0, min_ms = 0, mean_ms = 0;
  int reps = 0;
};

// Times f on keel's stream: warm-up calls, one probe to size the run, then reps calls each
// between two CUDA events. Median, min and mean in milliseconds.
Timing time_calls(const std::function<void()>& f, const BenchOptions& o, cudaStream_t s) {
  for (int i = 0; i < o.warmup; ++i) f();
  cuda::synchronize(0);
  auto t0 = std::chrono::steady_clock::now();
  f();
  cuda::synchronize(0);
  const double probe_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  const int reps = std::clamp(int(std::ceil(o.budget_ms / std::max(probe_ms, 1e-3))), o.min_reps, o.max_reps);
  std::vector<cudaEvent_t> ev(2 * reps);
  for (auto& e : ev) KEEL_CHECK_CUDA(cudaEventCreate(&e));
  for (int i = 0; i < reps; ++i) {
    KEEL_CHECK_CUDA(cudaEventRecord(ev[2 * i], s));
    f();
    KEEL_CHECK_CUDA(cudaEventRecord(ev[2 * i + 1], s));
  }
  KEEL_CHECK_CUDA(cudaEventSynchronize(ev.back()));
  KEEL_CHECK_CUDA(cudaGetLastError());
  std::vector<double> ms(reps);
  for (int i = 0; i < reps; ++i) {
    float m = 0;
    KEEL_CHECK_CUDA(cudaEventElapsedTime(&m, ev[2 * i], ev[2 * i + 1]));
    ms[i] = m;
  }
  for (auto& e : ev) KEEL_CHECK_CUDA(cudaEventDestroy(e));
  Timing t;
  t.reps = reps;
  t.mean_ms = std::accumulate(ms.begin(), ms.end(), 0.0) / reps;
  std::sort(ms.begin(), ms.end());
  t.min_ms = ms.front();
  t.median_ms = reps % 2 ? ms[reps / 2] : 0.5 * (ms[reps / 2 - 1] + ms[reps / 2]);
  return t;
}

std::string json_ints(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(v[i]);
  }
  return s + "]";
}

// Times every pattern at one (D, T): allocates the tensors, prints a table row per pattern and
// writes two JSON lines (fwd, fwd_bwd) per pattern.
void bench_config(const BenchOptions& o, int64_t D, int64_t T, int64_t B, Generator& gen, std::FILE* json,
                  const std::string& device_name, cudaStream_t s) {
  const Device gpu = Device::cuda(0);
  const int64_t H = o.heads;
  const std::vector<int64_t> shape = {B, H, T, D};
  const Options bf16{DType::bf16, gpu};
  const double scale = 1.0 / std::sqrt(double(D));
  Tensor q = randn(shape, gen, bf16), k = randn(shape, gen, bf16), v = randn(shape, gen, bf16);
  Tensor dout = randn(shape, gen, bf16);
  Tensor out = empty(shape, bf16), dq = empty(shape, bf16), dk = empty(shape, bf16), dv = empty(shape, bf16);
  Tensor lse = empty({B, H, T}, {DType::f32, gpu}), max_logit = empty({H}, {DType::f32, gpu});
  Tensor max_range = empty({H}, {DType::f32, gpu});
  // --op: the layer's own tensors, the projection (B, T, 3C) and the output's gradient (B, T, C).
  Tensor qkv, dout_packed;
  if (o.op) qkv = randn({B, T, 3 * H * D}, gen, bf16), dout_packed = randn({B, T, H * D}, gen, bf16);
  for (const std::string& pattern : o.patterns) {
    const std::string impl = impl_of(o);
    const std::vector<int64_t> windows = pattern_windows(pattern, H);
    const AttentionSpec spec{scale, windows, 0.0};
    std::function<void()> fwd, fwd_bwd;
    if (!o.op) {
      fwd = [&] { cuda::attention_forward(q, k, v, windows, scale, 0.0, out, lse, max_logit, max_range); };
      fwd_bwd = [&] {
        cuda::attention_forward(q, k, v, windows, scale, 0.0, out, lse, max_logit, max_range);
        cuda::attention_backward(q, k, v, out, lse, dout, windows, scale, 0.0, dq, dk, dv);
      };
    } else {
      // A leaf that requires grad, so the front end records its node; zero_grad drops the
      // gradient of the last rep so each backward starts fresh (as PyTorch's x.grad = None).
      fwd = [&] {
        NoGradGuard no_grad;
        AttentionResult r = attention_packed(qkv, spec);
      };
      fwd_bwd = [&] {
        qkv.set_requires_grad(true);
        AttentionResult r = attention_packed(qkv, spec);
        r.out.backward(dout_packed);
        qkv.zero_grad();
      };
    }
    const double flops = forward_flops(B, T, D, windows);
    const Timing tf = time_calls(fwd, o, s);
    const Timing tb = time_calls(fwd_bwd, o, s);
    if (o.op) qkv.set_requires_grad(false);
    // A cheap sanity check on real output: the per-head max logit of the last call is finite
    // and positive (random inputs). Correctness itself is the CUDA tests' job.
    // (--op: the front end allocates its own statistic, so there is nothing to look at here.)
    bool sane = true;
    if (!o.op)
      for (float m : max_logit.to_vector<float>()) sane = sane && std::isfinite(m) && m > 0;
    if (!sane) std::printf("WARNING: non-finite or zero max logit for D=%lld T=%lld %s\n", (long long)D,
                           (long long)T, pattern.c_str());
    const double tf_fwd = flops / tf.median_ms * 1e-9, tf_fb = 3.5 * flops / tb.median_ms * 1e-9;
    std::printf("%4lld %6lld %5lld %-10s | %9.3f %8.1f | %9.3f %8.1f | %11.2f %5d\n", (long long)D,
                (long long)T, (long long)B, pattern.c_str(), tf.median_ms, tf_fwd, tb.median_ms, tf_fb,
                tb.median_ms * 1e3 / double(B * H), tb.reps);
    std::fflush(stdout);
    if (json) {
      for (int pass = 0; pass < 2; ++pass) {
        const Timing& t = pass == 0 ? tf : tb;
        const double f = pass == 0 ? flops : 3.5 * flops;
        std::fprintf(json,
                     "{\"bench\":\"attention\",\"impl\":\"%s\",\"backend\":\"%s\","
                     "\"status\":\"ok\","
                     "\"device\":\"%s\",\"dtype\":\"bf16\",\"pattern\":\"%s\",\"windows\":%s,"
                     "\"B\":%lld,\"H\":%lld,\"T\":%lld,\"D\":%lld,\"pass\":\"%s\",\"ms\":%.6f,"
                     "\"ms_min\":%.6f,\"ms_mean\":%.6f,\"reps\":%d,\"flops\":%.6e,\"tflops\":%.3f,"
                     "\"us_per_seq\":%.4f}\n",
                     impl.c_str(), o.op ? "keel-flash-op" : "keel-flash", device_name.c_str(),
                     pattern.c_str(), json_ints(windows).c_str(), (long long)B, (long long)H, (long long)T,
                     (long long)D,
                     pass == 0 ? "fwd" : "fwd_bwd", t.median_ms, t.min_ms, t.mean_ms, t.reps, f,
                     f / t.median_ms * 1e-9, t.median_ms * 1e3 / double(B * H));
        std::fflush(json);
      }
    }
  }
}

void print_usage() {
  std::printf(
      "usage: bench_attention [--json PATH] [--dims 32,64,128] [--seqs 1024,2048,4096,8192,16384]\n"
      "                       [--patterns mhsa,ls_w50,ls_w100,local_w50] [--rows 2097152] [--batch 0] [--heads 6]\n"
      "                       [--budget-ms 300] [--min-reps 3] [--max-reps 50] [--warmup 2] [--op]\n"
      "                       [--nondeterministic] [--kernel mma|sm90]\n");
}

}  // namespace

int main(int argc, char** argv) {
  BenchOptions o;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      auto value = [&]() -> std::string {
        if (i + 1 >= argc) throw ValueError("bench_attention", a + " needs a value");
        return argv[++i];
      };
      if (a == "--json") o.json_path = value();
      else if (a == "--dims") o.dims = split_ints(value());
      else if (a == "--seqs") o.seqs = split_ints(value());
      else if (a == "--patterns") o.patterns = split(value());
      else if (a == "--rows") o.rows = std::stoll(value());
      else if (a == "--batch") o.batch = std::stoll(value());
      else if (a == "--heads") o.heads = std::stoll(value());
      else if (a == "--budget-ms") o.budget_ms = std::stod(value());
      else if (a == "--min-reps") o.min_reps = std::stoi(value());
      else if (a == "--max-reps") o.max_reps = std::stoi(value());
      else if (a == "--warmup") o.warmup = std::stoi(value());
      else if (a == "--op") o.op = true;
      else if (a == "--nondeterministic") o.nondeterministic = true;
      else if (a == "--kernel") o.kernel = value();
      else if (a == "--help" || a == "-h") {
        print_usage();
        return 0;
      } else {
        std::fprintf(stderr, "bench_attention: unknown argument '%s'\n", a.c_str());
        print_usage();
        return 2;
      }
    }
    if (o.min_reps < 1 || o.max_reps < o.min_reps || o.heads < 1 || o.rows < 1 || o.batch < 0)
      throw ValueError("bench_attention",
                       "need 1 <= --min-reps <= --max-reps, --heads >= 1, --rows >= 1, --batch >= 0");
    for (const auto& p : o.patterns) (void)pattern_windows(p, o.heads);  // reject bad names before any work
    if (o.kernel != "mma" && o.kernel != "sm90")
      throw ValueError("bench_attention", "--kernel " + o.kernel + ": use mma or sm90");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_attention: %s\n", e.what());
    return 2;
  }

  if (!cuda::is_available()) {
    std::printf("bench_attention: no CUDA device here; nothing to measure\n");
    return 0;
  }
  try {
    cudaStream_t s = cuda::detail::stream(0);
    const cuda::DeviceInfo info = cuda::device_info(0);
    std::FILE* json = nullptr;
    if (!o.json_path.empty()) {
      json = std::fopen(o.json_path.c_str(), "w");
      if (!json) throw IoError("bench_attention", "cannot open " + o.json_path + " for writing");
    }
    const std::string batch = o.batch > 0 ? "B = " + std::to_string(o.batch)
                                          : "B = round(" + std::to_string(o.rows) + " rows / (H*T))";
    std::printf("device: %s (%d SMs), bf16, H = %lld, %s, %s, median of reps\n", info.name.c_str(),
                info.multiprocessors, (long long)o.heads, batch.c_str(),
                o.op ? "front end + autograd (--op)" : "kernels called directly");
    if (o.nondeterministic) std::printf("backward: dQ added in any order (--nondeterministic)\n");
    const bool hopper = info.major == 9 && info.minor == 0;
    if (o.kernel == "sm90")
      std::printf("forward and backward: %s\n",
                  hopper ? "Hopper's warpgroup kernels (--kernel sm90) at D 40..128, else mma"
                         : "mma: --kernel sm90 needs compute capability 9.0");
    const cuda::AttentionKernelScope kernel(o.kernel == "sm90" ? cuda::AttentionKernel::sm90
                                                               : cuda::AttentionKernel::mma);
    const DeterministicGuard mode(!o.nondeterministic);
    std::printf("FLOPs: allowed pairs only; fwd = 4*D per pair, fwd+bwd = 3.5 x fwd\n");
    std::printf("%4s %6s %5s %-10s | %9s %8s | %9s %8s | %11s %5s\n", "D", "T", "B", "pattern",
                "fwd ms", "TF/s", "f+b ms", "TF/s", "f+b us/seq", "reps");
    Generator gen(0);
    for (int64_t D : o.dims) {
      for (int64_t T : o.seqs) {
        const int64_t H = o.heads;
        const int64_t B = o.batch > 0 ? o.batch : std::max<int64_t>(1, std::llround(double(o.rows) / double(H * T)));
        // One failing config (out of memory, an unsupported shape) is reported and skipped.
        try {
          bench_config(o, D, T, B, gen, json, info.name, s);
        } catch (const std::exception& e) {
          std::printf("%4lld %6lld %5lld FAILED: %s\n", (long long)D, (long long)T, (long long)B, e.what());
          if (json) {
            std::string msg = e.what();
            for (char& c : msg)
              if (c == '"' || c == '\\' || static_cast<unsigned char>(c) < 0x20) c = ' ';
            for (const std::string& pattern : o.patterns)
              for (const char* pass : {"fwd", "fwd_bwd"})
                std::fprintf(json,
                             "{\"bench\":\"attention\",\"impl\":\"%s\",\"status\":\"error\","
                             "\"error\":\"%s\",\"device\":\"%s\",\"dtype\":\"bf16\",\"pattern\":\"%s\",\"B\":%lld,"
                             "\"H\":%lld,\"T\":%lld,\"D\":%lld,\"pass\":\"%s\"}\n",
                             impl_of(o).c_str(), msg.c_str(), info.name.c_str(), pattern.c_str(),
                             (long long)B, (long long)H, (long long)T, (long long)D, pass);
            std::fflush(json);
          }
        }
      }
    }
    if (json) std::fclose(json);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_attention: %s\n", e.what());
    return 1;
  }
  return 0;
}
