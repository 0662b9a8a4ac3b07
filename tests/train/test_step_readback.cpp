// A training step on the GPU reads the device once for its scalars (optim/step_readback.h): the
// gradient norm, the loss and the attention statistics come back in one copy, whatever the
// number of parameters and micro-batches, and the logged numbers keep the bits they had when
// each micro-batch's loss and statistics and each gradient's sum of squares were read apart.
// Counted through `gpt2 train --profile` on the emulated GPU, where the counts are exact.
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <vector>

#include "apps/gpt2/infer/run_model.h"
#include "apps/gpt2/run/checkpoint.h"
#include "apps/gpt2/run/metrics.h"
#include "apps/gpt2/train/trainer.h"
#include "core/io.h"
#include "cuda_test.h"
#include "train_fixture.h"

using namespace keel;

namespace {
// 2 (or `layers`) layers of 2 heads of 32, grad-accum 2, 4 steps; steps 2 and 3 profiled.
app::TrainConfig config(const std::string& run, int64_t layers) {
  app::TrainConfig c = testing::tiny_config(run);
  c.model.n_head = 2;  // head dim 32, which the CUDA attention kernels take
  c.model.n_layer = layers;
  c.device = "cuda";
  c.grad_accum = 2;
  c.max_steps = 4;
  c.log_every = 1;
  c.profile = 2;
  return c;
}

nlohmann::json profile_of(const app::TrainConfig& c) {
  return nlohmann::json::parse(io::read_file(std::filesystem::path(c.run_dir) / "profile.json", "test"));
}

// syncs per step of the profiled steps, in rows of `phase` ("" for every row)
double syncs(const nlohmann::json& p, const std::string& phase) {
  double n = 0;
  for (const auto& r : p["ops"])
    if (phase.empty() || r["phase"] == phase) n += r["counts_per_step"]["syncs"].get<double>();
  return n;
}

// The run's train records by step.
std::map<int64_t, app::MetricsRecord> train_records(const std::string& run_dir) {
  std::map<int64_t, app::MetricsRecord> out;
  for (auto& r : app::read_metrics(app::metrics_path(run_dir)))
    if (r.kind == app::RecordKind::Train) out[r.step] = r;
  return out;
}

// The two runs end with the same weights, bit for bit.
void check_same_weights(const std::string& run_a, const std::string& run_b) {
  const auto a = app::load_run_model(run_a), b = app::load_run_model(run_b);
  const NamedTensors pa = a->named_parameters(), pb = b->named_parameters();
  REQUIRE(pa.size() == pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    CAPTURE(pa[i].first);
    CHECK(pa[i].second.to_vector<double>() == pb[i].second.to_vector<double>());
  }
}

double top(const std::vector<std::vector<double>>& rows) {
  double m = 0;
  for (const auto& row : rows) m = std::max(m, *std::max_element(row.begin(), row.end()));
  return m;
}
}  // namespace

TEST_CASE("a GPU training step reads its loss, statistics and gradient norm in one host sync") {
  KEEL_REQUIRE_CUDA();
  const app::TrainConfig small = config("readback_2", 2), deep = config("readback_4", 4);
  app::train(small);
  app::train(deep);
  const nlohmann::json p2 = profile_of(small), p4 = profile_of(deep);
  INFO(p2["step"].dump());
  REQUIRE(p2["steps"] == 2);
  // The optimizer phase waits once: the readback, in the gradient norm's copy. Before, it waited
  // once per parameter tensor (28 here), and after every micro-batch for the loss and statistics.
  CHECK(syncs(p2, "optimizer") == 1);
  CHECK(syncs(p4, "optimizer") == 1);
  for (const auto& r : p2["ops"]) {
    CAPTURE(r["name"].get<std::string>());
    CHECK(r["name"] != "loss_to_host");
    CHECK(r["name"] != "copy_to_host");  // the statistics stay on the device
  }
  // Twice the layers (and parameter tensors), the same waits per step: the readback alone. The
  // micro-batches' uploads go through pinned memory and are not waited for (core/cuda/runtime.h;
  // before, one wait each), the embeddings check and group their ids on the device and the
  // cross-entropy counts its targets there: before all that, 11 waits here.
  CHECK(p2["step"]["counts"]["syncs"] == p4["step"]["counts"]["syncs"]);
  CHECK(p2["step"]["counts"]["syncs"].get<double>() == 1);
  CHECK(syncs(p2, "") == p2["step"]["counts"]["syncs"].get<double>());  // every wait belongs to an op
}

TEST_CASE("a GPU training step logs the bits it logged when it read every value apart") {
  KEEL_REQUIRE_CUDA();
  const app::TrainConfig c = config("readback_bits", 2);
  app::train(c);
  if (!profile_of(c)["emulated"].get<bool>()) return;  // a real GPU rounds its own way
  // loss, grad norm, top max_logit, top max_range of steps 1-4 of this run, logged by the trainer
  // before the readback (commit 8d82e65: each value read on its own), on the emulated GPU.
  const double want[4][4] = {{0x1.9088460000000p+2, 0x1.9d31dc050846ep+0, 0x1.f29ee20000000p-4, 0x1.6f11a00000000p-3},
                             {0x1.8b94860000000p+2, 0x1.8d02e0e18a373p+0, 0x1.00eebe0000000p-3, 0x1.82509c0000000p-3},
                             {0x1.84e8780000000p+2, 0x1.c53fada978be8p-1, 0x1.1385260000000p-3, 0x1.b38bf40000000p-3},
                             {0x1.81006b0000000p+2, 0x1.821708103e7ddp-1, 0x1.3c3b5a0000000p-3, 0x1.c84e5c0000000p-3}};
  std::vector<app::MetricsRecord> train;
  for (auto& r : app::read_metrics(app::metrics_path(c.run_dir)))
    if (r.kind == app::RecordKind::Train) train.push_back(r);
  REQUIRE(train.size() == 4);
  for (size_t s = 0; s < 4; ++s) {
    CAPTURE(s);
    CHECK(train[s].loss == want[s][0]);
    CHECK(train[s].grad_norm == want[s][1]);
    CHECK(top(train[s].max_logit) == want[s][2]);
    CHECK(top(train[s].max_range) == want[s][3]);
  }
}

TEST_CASE("with --log-every N, the steps between reports queue without a host wait and log the same bits") {
  KEEL_REQUIRE_CUDA();
  // 80 steps, a metrics line every 8th (and a plain progress line every 4th, printed late).
  app::TrainConfig every = config("deferred_every", 2);
  every.grad_accum = 1;
  every.max_steps = 80;
  every.val_every = 0;
  every.ckpt_every = 40;
  every.profile = 0;
  app::TrainConfig sparse = every;
  sparse.run_dir = testing::scratch_dir("deferred_sparse").string();
  sparse.log_every = 8;
  sparse.profile = 4;
  sparse.profile_warmup = 13;  // steps 14-17, of which 17 logs and so reads the device
  app::train(every);
  app::train(sparse);

  // One wait in the 4 profiled steps, by the step that reports them: the readback of the 4.
  const nlohmann::json p = profile_of(sparse);
  INFO(p["step"].dump());
  REQUIRE(p["steps"] == 4);
  CHECK(p["step"]["counts_total"]["syncs"] == 1);
  double readbacks = 0;
  for (const auto& r : p["ops"]) readbacks += r["name"] == "step_readback" ? r["counts_total"]["syncs"].get<double>() : 0;
  CHECK(readbacks == 1);

  // The logged steps (1, 9, ..., 73 and the last) log what the run that read every step logged.
  const std::map<int64_t, app::MetricsRecord> by_step = train_records(every.run_dir);
  int64_t logged = 0;
  for (const auto& [step, r] : train_records(sparse.run_dir)) {
    CAPTURE(r.step);
    CHECK(((r.step - 1) % 8 == 0 || r.step == 80));
    const app::MetricsRecord& want = by_step.at(r.step);
    CHECK(r.loss == want.loss);
    CHECK(r.grad_norm == want.grad_norm);
    CHECK(r.lr == want.lr);
    CHECK(r.max_logit == want.max_logit);
    CHECK(r.max_range == want.max_range);
    ++logged;
  }
  CHECK(logged == 11);
  check_same_weights(every.run_dir, sparse.run_dir);
}

TEST_CASE("an f16 run that decides its steps and loss scale on the GPU takes the steps the host decides") {
  KEEL_REQUIRE_CUDA();
  // ZeRO-1 decides on the host (its norm sums the ranks' slices there); at one rank its step is
  // replicated AdamW's. So the two runs differ only in who decides: the host, or the device.
  app::TrainConfig device = config("f16_device", 2);
  device.dtype = "f16";
  device.max_steps = 6;
  device.log_every = 2;
  device.profile = 0;
  device.val_every = 0;
  app::TrainConfig host = device;
  host.run_dir = testing::scratch_dir("f16_host").string();
  host.zero = 1;
  app::train(device);
  app::train(host);
  const std::map<int64_t, app::MetricsRecord> by_step = train_records(host.run_dir);
  int64_t logged = 0;
  for (const auto& [step, r] : train_records(device.run_dir)) {
    CAPTURE(r.step);
    const app::MetricsRecord& want = by_step.at(r.step);
    CHECK(r.loss == want.loss);
    // ZeRO adds the squares in another order (per slice): the norm agrees to its last bits.
    CHECK(r.grad_norm == doctest::Approx(want.grad_norm).epsilon(1e-12));
    CHECK(r.loss_scale == want.loss_scale);
    CHECK(r.skipped == want.skipped);
    ++logged;
  }
  CHECK(logged == 4);  // steps 1, 3, 5 and the last
  // The same weights, bit for bit (the clip factors agree in the f32 the step reads them in).
  check_same_weights(device.run_dir, host.run_dir);
}

TEST_CASE("a resume from a checkpoint of steps decided on the GPU continues bit-exactly: f16 and bf16") {
  KEEL_REQUIRE_CUDA();
  for (const char* dtype : {"f16", "bf16"}) {
    CAPTURE(dtype);
    // 8 steps, checkpoints at 4 and 8; steps 2-3 and 6-7 are never read before the checkpoint.
    app::TrainConfig c = config(std::string("resume_straight_") + dtype, 2);
    c.dtype = dtype;
    c.max_steps = 8;
    c.ckpt_every = 4;
    c.log_every = 4;
    c.profile = 0;
    c.val_every = 0;
    app::train(c);
    // The same run stopped after its step-4 checkpoint: the step-8 one removed, then resumed.
    const std::filesystem::path resumed = testing::scratch_dir(std::string("resume_again_") + dtype);
    std::filesystem::remove_all(resumed);
    std::filesystem::copy(c.run_dir, resumed, std::filesystem::copy_options::recursive);
    std::filesystem::remove_all(*app::latest_checkpoint(resumed));
    app::TrainConfig r = c;
    r.run_dir = resumed.string();
    r.resume = true;
    app::train(r);
    check_same_weights(c.run_dir, r.run_dir);
    // And the optimizer's state: moments, step counts, the loss scaler.
    const auto a = app::load_checkpoint(*app::latest_checkpoint(c.run_dir)).optimizer;
    const auto b = app::load_checkpoint(*app::latest_checkpoint(r.run_dir)).optimizer;
    REQUIRE(a.size() == b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      CAPTURE(a[i].first);
      CHECK(a[i].first == b[i].first);
      CHECK(a[i].second.to_vector<double>() == b[i].second.to_vector<double>());
    }
  }
}
