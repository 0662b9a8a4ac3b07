// bench_profile: the predicted step time of GPT-2 124M on a named GPU, from the profiler's
// exact counts on the emulated GPU (core/profiler_predict.h for the model and its limits). On a
// real GPU the same program prints measured times beside the predictions.
//
// The emulator runs kernels on the host, so computing a whole gpt2-124m step at B 16 x T 1024
// is out of its reach. What it runs: the full widths (C 768, 12 heads of 64, vocabulary 50257,
// bf16, tied lm_head) at a given B x T (default 1 x 32, about 30 s), with 1 and then 2 layers.
// Every layer does the same work, so one layer's cost is the difference of the two profiles, and
// 12 layers are the 1-layer step plus 11 more layers: exact in depth for counts, FLOPs, bytes and
// the prediction. With --count-only the emulator skips the kernels' and products' work
// (cuda::set_emulated_count_only) and the same counts and prediction come out in seconds at any
// B x T, the training runs' 16 x 1024 included: nothing in them depends on the values.
//
// --preset paper (with --attention mhsa or ls) profiles the paper's model the same way, for the
// LS-against-MHSA step at its training size.
//
//   bench_profile [--gpu H100|H200] [--batch B] [--seq T] [--layers L] [--count-only]
//                 [--preset gpt2-124m|paper|tiny] [--attention mhsa|ls|qk_norm|softcap]
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "apps/gpt2/run/placement.h"
#include "apps/gpt2/train/step_graph.h"
#include "core/cuda/counters.h"
#include "core/cuda/runtime.h"
#include "core/error.h"
#include "core/factory.h"
#include "core/profiler.h"
#include "core/profiler_predict.h"
#include "nn/config.h"
#include "nn/gpt2.h"
#include "optim/adamw.h"
#include "optim/clip.h"
#include "optim/step_readback.h"

using namespace keel;

namespace {

struct Totals {
  double predicted_us = 0, flops = 0, bytes = 0, operations = 0, syncs = 0;
  std::map<std::string, double> groups;  // predicted us per kind of op
};

// The group an op's row belongs to in the breakdown.
std::string group_of(const profiler::Row& r) {
  if (r.phase == profiler::Phase::optimizer) return "optimizer (AdamW, grad norm, clip)";
  if (r.name == "AccumulateGrad" || r.name == "accumulate_grad") return "gradient accumulation (autograd)";
  if (r.name == "linear" || r.name == "LinearBackward" || r.name == "linear_gelu" || r.name == "LinearGeluBackward" ||
      r.name == "mlp" || r.name == "MLPBackward")
    return "matmuls (linear layers, MLP, lm_head)";
  if (r.name == "attention" || r.name == "AttentionBackward" || r.name == "AttentionPackedBackward") return "attention";
  if (r.name == "cross_entropy" || r.name == "CrossEntropyBackward") return "loss (cross-entropy)";
  if (r.name.rfind("copy", 0) == 0 || r.name == "batch_to_device") return "copies";
  return "element-wise (layernorm, gelu, add, embedding, ...)";
}

// The model's widths (gpt2-124m's by default) with `layers` layers, bf16 on the first GPU, its
// AdamW, and a step as the trainer takes it (apps/gpt2/train/trainer.cpp).
struct Bench {
  nn::GPT2Config c;
  Device dev = Device::cuda(0);
  nn::GPT2 model;
  optim::AdamW opt;
  std::vector<int32_t> ids;  // (2, B, T): inputs, then the same as targets

  Bench(const nn::GPT2Config& base, int64_t layers, int64_t B, int64_t T)
      : c(with_layers(base, layers)), model(c, 1), opt(on_gpu(model).named_parameters()), ids(size_t(2 * B * T)) {
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t((i % size_t(B * T) * 7919 + 13) % c.vocab_size);
  }
  static nn::GPT2Config with_layers(nn::GPT2Config g, int64_t layers) {
    g.n_layer = layers;
    return g;
  }
  nn::GPT2& on_gpu(nn::GPT2& m) const {
    m.to(dev);
    m.to(DType::bf16);
    return m;
  }
  int64_t slots() const { return 2 + 2 * c.n_layer * c.n_head; }
  // The micro-batch: the loss and statistics kept on the device, for the step's one read-back.
  void micro_batch(const Tensor& batch, optim::StepReadback& rb) {
    const auto [x, y] = app::split_batch(batch);
    nn::GPT2Output out = model.forward(x, y, nn::StatsOn::device);
    out.loss.backward();
    rb.add_quotient(1, out.loss, 1.0);
    rb.merge_max(2, out.max_logit);
    rb.merge_max(slots() - c.n_layer * c.n_head, out.max_range);
  }
  // The trainer's ReplicatedAdamW on one GPU between logged steps: the norm's sum of squares,
  // the skip and the clip's factor stay on the device (AdamW::step_gated). A logged step adds
  // one read of the readback (one host sync).
  void optimizer_step(optim::StepReadback& rb) {
    profiler::PhaseGuard optimizer(profiler::Phase::optimizer);
    optim::grad_sum_of_squares(model.parameters(), rb);
    opt.step_gated(opt.lr(), 1.0, rb.buffer(), optim::StepReadback::kGradSumSq, 1);
  }
};

Totals profile_step(const nn::GPT2Config& base, int64_t layers, int64_t B, int64_t T, const std::string& gpu) {
  Bench b(base, layers, B, T);
  const Tensor batch = from_vector(b.ids, {2, B, T}).to(b.dev);
  const Device dev = b.dev;
  auto step = [&] {
    b.opt.zero_grad();
    optim::StepReadback readback(dev, b.slots());
    b.micro_batch(batch, readback);
    b.optimizer_step(readback);
  };
  step();  // warm-up: allocator cache, cuBLAS handles
  profiler::Session session({dev, gpu});
  session.step_begin();
  step();
  session.step_end();
  const profiler::Profile p = session.finish();
  const profiler::Summary s = profiler::summarize(p);
  if (layers == 1) fmt::print("{}\n", profiler::table(p, 25));
  Totals t;
  t.predicted_us = s.step_predicted_us, t.flops = s.flops, t.bytes = s.bytes;
  t.operations = double(s.counts.operations()), t.syncs = double(s.counts.syncs);
  for (const profiler::Row& r : s.rows) t.groups[group_of(r)] += r.predicted_us;
  return t;
}

// The stream operations and host syncs of the same step under `gpt2 train --cuda-graph 1`
// (apps/gpt2/train/step_graph.h), counted on a step that replays: the batch's upload, the
// readback's zeroing, the graph, the gradient norm, AdamW deciding on the device (the trainer
// adds one copy: the graph's scalars into its table of pending steps).
cuda::Counters graph_step(const nn::GPT2Config& base, int64_t layers, int64_t B, int64_t T) {
  Bench b(base, layers, B, T);
  const Tensor batch = from_vector(b.ids, {2, B, T});  // on the host: uploaded every step
  app::StepGraph graph(b.model.parameters(), b.dev, b.slots());
  auto step = [&] {
    b.opt.zero_grad();
    graph.readback().reset();
    graph.run(batch, 1.0, [&](const Tensor& in, optim::StepReadback& rb) { b.micro_batch(in, rb); });
    b.optimizer_step(graph.readback());
  };
  step();  // the eager warm-up and the capture
  const cuda::Counters before = cuda::counters();
  step();
  return cuda::counters() - before;
}

struct Args {
  std::string gpu = "H100", preset = "gpt2-124m", attention;
  int64_t B = 1, T = 32, L = 0;  // L 0: the preset's depth
};

int run(const Args& a) {
  nn::GPT2Config base = nn::GPT2Config::preset(a.preset);
  if (!a.attention.empty()) base.attention = nn::parse_attention_kind(a.attention);
  base.fill_ls_shape();  // LS on a preset without its shape: the paper's (every head but one local, w 50)
  const int64_t B = a.B, T = a.T, L = a.L > 0 ? a.L : base.n_layer;
  nn::GPT2Config full = Bench::with_layers(base, L);
  full.block_size = std::max(full.block_size, T);
  full.validate();  // a bad --attention or --seq fails here, with the field named
  base.block_size = full.block_size;
  const std::string model = a.preset + " (" + full.summary() + ", bf16)";
  const std::string& gpu = a.gpu;
  const auto t0 = std::chrono::steady_clock::now();
  const Totals one = profile_step(base, 1, B, T, gpu), two = profile_step(base, 2, B, T, gpu);
  const double k = double(L - 1);
  auto at_depth = [&](double x, double y) { return x + k * (y - x); };
  fmt::print("{}, B {} x T {}, predicted for an {} from 1- and 2-layer profiles on {} ({:.0f} s):\n", model, B, T,
             gpu, cuda::device_info(0).name,
             std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  fmt::print("  per step: {:.3g} GFLOP, {:.3g} GB moved, {:.0f} stream operations, {:.0f} host syncs (+1 on a logged step)\n",
             at_depth(one.flops, two.flops) / 1e9, at_depth(one.bytes, two.bytes) / 1e9,
             at_depth(one.operations, two.operations), at_depth(one.syncs, two.syncs));
  const double step_us = at_depth(one.predicted_us, two.predicted_us);
  for (const auto& [group, us] : one.groups) {
    const double g = at_depth(us, two.groups.count(group) ? two.groups.at(group) : 0.0);
    fmt::print("  {:<52} {:8.3f} ms {:5.1f}%\n", group, g / 1000, 100 * g / step_us);
  }
  // The host issues every stream operation: past the device's time, the GPU waits for it.
  const double host_us = at_depth(one.operations, two.operations) * profiler::gpu_model(gpu).host_op_us;
  fmt::print("  host issuing the operations at ~{} us each: {:.3f} ms: {}\n", profiler::gpu_model(gpu).host_op_us,
             host_us / 1000, host_us > step_us ? "launch-bound" : "device-bound");
  fmt::print("predicted {} step time of {} at B {} x T {}: {:.3f} ms, {:.0f} tokens/s (one layer {:.3f} ms)\n", gpu,
             a.preset, B, T, step_us / 1000, double(B * T) / (step_us * 1e-6), (two.predicted_us - one.predicted_us) / 1000);
  // The same device work with the forward and backward replayed as one graph: the host's part
  // shrinks to the operations around it.
  // Counted on the 2-layer model: a replayed step's operations do not grow with depth, but for
  // AdamW's and the norm's multi-tensor launches (one per 48 tensors: a few more at 12 layers).
  const cuda::Counters g = graph_step(base, 2, B, T);
  const double graph_host_us = double(g.operations()) * profiler::gpu_model(gpu).host_op_us;
  fmt::print("with --cuda-graph 1: {} stream operations per step at 2 layers ({} host syncs), issued in ~{:.3f} ms: "
             "the {} step becomes {}\n",
             g.operations(), g.syncs, graph_host_us / 1000, gpu, graph_host_us > step_us ? "launch-bound" : "device-bound");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_profile: a GPT-2's predicted training step on a GPU, from the emulated GPU's exact counts"};
  Args a;
  app.add_option("--gpu", a.gpu, "the GPU to predict for: H100 | H200");
  app.add_option("--batch", a.B, "sequences per step");
  app.add_option("--seq", a.T, "sequence length");
  app.add_option("--layers", a.L, "layers of the model predicted (default: the preset's; gpt2-124m: 12)");
  app.add_option("--preset", a.preset, "the model: gpt2-124m | paper | tiny");
  app.add_option("--attention", a.attention, "the attention variant (default: the preset's): " + nn::attention_kind_names(" | "));
  bool count_only = false;
  app.add_flag("--count-only", count_only,
               "emulated GPU: run no kernel and no product, only count (any B x T in seconds; the same prediction)");
  CLI11_PARSE(app, argc, argv);
  if (cuda::device_count() == 0) {
    fmt::print("bench_profile: no CUDA device (real or emulated); nothing to profile\n");
    return 0;
  }
  if (count_only && !cuda::is_emulated()) {
    fmt::print(stderr, "bench_profile: --count-only needs the emulated GPU (preset emu); a real GPU runs the step\n");
    return 2;
  }
  try {
    if (count_only) cuda::set_emulated_count_only(true);
    return run(a);
  } catch (const Error& e) {
    fmt::print(stderr, "bench_profile: {}\n", e.what());
    return 2;
  }
}
