// `gpt2 train --cuda-graph 1` (apps/gpt2/train/step_graph.h): the same run as without it, bit for
// bit (weights, optimizer state, every logged number), for f32, bf16 and f16 (whose loss scale
// moves and so captures again) and with gradient accumulation, with a forward and backward that
// cost one launch a step; and the configurations a graph cannot serve refused before any work.
// Skipped without a GPU.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "apps/gpt2/run/checkpoint.h"
#include "apps/gpt2/run/metrics.h"
#include "apps/gpt2/run/placement.h"
#include "apps/gpt2/train/step_graph.h"
#include "apps/gpt2/train/trainer.h"
#include "checks.h"
#include "core/cuda/counters.h"
#include "core/factory.h"
#include "cuda_test.h"
#include "nn/gpt2.h"
#include "optim/adamw.h"
#include "train_fixture.h"

using namespace keel;

namespace {

// The run's last checkpoint (model and optimizer) and its training records.
struct Outcome {
  NamedTensors model, optimizer;
  std::vector<app::MetricsRecord> train;
};

Outcome run(app::TrainConfig c) {
  app::train(c);
  Outcome o;
  const auto ckpt = app::latest_checkpoint(c.run_dir);
  REQUIRE(ckpt);
  app::Checkpoint k = app::load_checkpoint(*ckpt);
  o.model = k.model, o.optimizer = k.optimizer;
  for (auto& r : app::read_metrics(app::metrics_path(c.run_dir)))
    if (r.kind == app::RecordKind::Train) o.train.push_back(r);
  return o;
}

void check_same(const NamedTensors& a, const NamedTensors& b) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    CAPTURE(a[i].first);
    CHECK(a[i].first == b[i].first);
    CHECK(testing::bits(a[i].second) == testing::bits(b[i].second));
  }
}

}  // namespace

TEST_CASE("train --cuda-graph 1 is the run without it, bit for bit: f32, bf16, f16 with its loss scale, grad-accum") {
  KEEL_REQUIRE_CUDA();
  struct Case {
    const char* dtype;
    int64_t accum;
  } cases[] = {{"f32", 1}, {"bf16", 1}, {"f16", 1}, {"bf16", 3}};
  for (const Case& k : cases) {
    const std::string dtype = k.dtype, name = dtype + "_" + std::to_string(k.accum);
    CAPTURE(name);
    app::TrainConfig c = testing::tiny_config("graph_eager_" + name);
    c.model.n_head = 2;  // head dim 32
    c.device = "cuda";
    c.dtype = dtype;
    c.grad_accum = k.accum;  // the replay runs every micro-batch, the gradients adding up in f32
    c.max_steps = 4;
    c.val_every = 2;  // an evaluation between replays
    c.ckpt_every = 4;
    const Outcome eager = run(c);
    c.cuda_graph = 1;
    c.run_dir = testing::scratch_dir("graph_" + name).string();
    const Outcome graph = run(c);
    check_same(graph.model, eager.model);
    check_same(graph.optimizer, eager.optimizer);
    REQUIRE(graph.train.size() == eager.train.size());
    for (size_t i = 0; i < eager.train.size(); ++i) {
      CAPTURE(i);
      CHECK(testing::bits(from_vector<double>({graph.train[i].loss, graph.train[i].grad_norm}, {2})) ==
            testing::bits(from_vector<double>({eager.train[i].loss, eager.train[i].grad_norm}, {2})));
      CHECK(graph.train[i].max_logit == eager.train[i].max_logit);
      CHECK(graph.train[i].loss_scale == eager.train[i].loss_scale);
    }
  }
}

TEST_CASE("StepGraph: a replayed micro-batch is one launch and leaves the eager gradients, bound to the parameters") {
  KEEL_REQUIRE_CUDA();
  const Device dev = Device::cuda(0);
  nn::GPT2Config c;
  c.n_layer = 2, c.n_head = 2, c.n_embd = 64, c.block_size = 32, c.vocab_size = 512;
  nn::GPT2 model(c, 5), twin(c, 5);
  for (nn::GPT2* m : {&model, &twin}) m->to(dev), m->to(DType::bf16);
  optim::AdamW opt(model.named_parameters()), twin_opt(twin.named_parameters());
  app::StepGraph graph(model.parameters(), dev, 2);
  auto body_of = [](nn::GPT2& m) {
    return [&m](const Tensor& batch, optim::StepReadback& rb) {
      const auto [ids, targets] = app::split_batch(batch);
      Tensor loss = m.forward(ids, targets, nn::StatsOn::device).loss;  // nothing read back
      loss.backward();
      rb.add_quotient(1, loss, 1.0);
    };
  };
  std::vector<int32_t> ids(2 * 2 * 32);
  for (int step = 0; step < 3; ++step) {
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t((i * 7919 + 13 * step) % 512);
    const Tensor batch = from_vector(ids, {2, 2, 32});
    opt.zero_grad(), twin_opt.zero_grad();
    graph.readback().reset();
    const cuda::Counters before = cuda::counters();
    graph.run(batch, 1.0, body_of(model));
    const cuda::Counters d = cuda::counters() - before;
    if (step > 0) CHECK(d.launches == 1);  // the replay; the batch's upload is a copy
    if (step > 0) CHECK(d.syncs <= 1);     // that upload from pageable memory, as in the eager step
    optim::StepReadback rb(dev, 2);
    body_of(twin)(batch.to(dev), rb);
    CHECK(graph.readback().read()[1] == rb.read()[1]);
    auto a = model.named_parameters(), b = twin.named_parameters();
    for (size_t i = 0; i < a.size(); ++i) {
      CAPTURE(a[i].first);
      REQUIRE(a[i].second.grad().defined());
      CHECK(testing::bits(a[i].second.grad().to(Device::cpu())) == testing::bits(b[i].second.grad().to(Device::cpu())));
    }
    opt.step(1e-2), twin_opt.step(1e-2);
  }
  CHECK(graph.captures() == 1);
  // A new loss factor is a new graph; a gradient left from before is refused (the graph writes).
  opt.zero_grad();
  graph.run(from_vector(ids, {2, 2, 32}), 2.0, body_of(model));
  CHECK(graph.captures() == 2);
  CHECK_THROWS_AS(graph.run(from_vector(ids, {2, 2, 32}), 2.0, body_of(model)), ValueError);
}

TEST_CASE("train --cuda-graph 1 refuses what a graph cannot replay, naming the flag and the way out") {
  KEEL_REQUIRE_CUDA();
  struct Case {
    const char* what;
    void (*change)(app::TrainConfig&);
    const char* says;
  } cases[] = {
      {"cpu", [](app::TrainConfig& c) { c.device = "cpu"; }, "needs a CUDA device"},
      {"dropout", [](app::TrainConfig& c) { c.model.dropout = 0.1; }, "dropout"},
      {"profile", [](app::TrainConfig& c) { c.profile = 1; }, "profile"},
  };
  for (const Case& k : cases) {
    CAPTURE(std::string(k.what));
    app::TrainConfig c = testing::tiny_config(std::string("graph_refused_") + k.what);
    c.model.n_head = 2;
    c.device = "cuda";
    c.cuda_graph = 1;
    k.change(c);
    try {
      app::train(c);
      FAIL("expected a ConfigError");
    } catch (const ConfigError& e) {
      const std::string message = e.what();
      CHECK(message.find("--cuda-graph 1") != std::string::npos);
      CHECK(message.find(k.says) != std::string::npos);
    }
    CHECK_FALSE(std::filesystem::exists(std::filesystem::path(c.run_dir) / "config.json"));  // nothing written
  }
}
