// The max logit is the instability signal: a NaN in it must reach the user. A model with one
// NaN weight in layer 0's attention (head 0's query) must report NaN for that head and for
// every head of layer 1 (fed by NaN activations) in `gpt2 eval --json`, and finite values
// for the untouched heads of layer 0. Also the pure mapping from GPU name to peak FLOP/s
// that MFU divides by.
#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "apps/gpt2/run/checkpoint.h"
#include "apps/gpt2/run/max_logit.h"
#include "apps/gpt2/run/metrics.h"
#include "apps/gpt2/train/mfu.h"
#include "apps/gpt2/train/step_signals.h"
#include "apps/gpt2/train/trainer.h"
#include "nn/hf.h"
#include "train_fixture.h"

using namespace keel;

namespace {
// The stdout of a shell command (and its exit status).
std::string run_command(const std::string& cmd, int& status) {
  std::string out;
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(cmd.c_str(), "r"), pclose);
  REQUIRE(pipe);
  std::array<char, 4096> buf{};
  while (fgets(buf.data(), buf.size(), pipe.get())) out += buf.data();
  status = pclose(pipe.release());
  return out;
}

bool is_nan_entry(const nlohmann::json& v) { return v.is_string() && v.get<std::string>() == "nan"; }
}  // namespace

TEST_CASE("MaxLogit: NaN wins every merge, inf beats finite values, 0 is the identity") {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  CHECK(std::isnan(nan_max(0.0, nan)));  // std::max(0.0, NaN) would say 0
  CHECK(std::isnan(nan_max(nan, 5.0)));
  CHECK(nan_max(3.0, inf) == inf);
  app::MaxLogit m(2, 2);
  m.merge({1, 2, 3, 4});
  m.merge({0, nan, 5, 1});
  CHECK(m.values()[0] == 1);
  CHECK(std::isnan(m.values()[1]));
  CHECK(m.at(1, 0) == 5);
  CHECK(m.at(1, 1) == 4);
  CHECK(std::isnan(m.top()));
  CHECK(m.top_index() == 1);
  m.merge({0, 0, 0, 0});
  CHECK(std::isnan(m.at(0, 1)));  // a later finite batch cannot wash the NaN out
  CHECK_THROWS_AS(m.merge({1, 2}), ShapeError);
  app::MaxLogit f(1, 3);
  f.merge({1, inf, 7});
  CHECK(f.top() == inf);
  CHECK(f.top_index() == 1);
}

#ifdef KEEL_GPT2_BIN
TEST_CASE("gpt2 eval --json reports NaN for a head poisoned by one NaN weight, and for the layers it feeds") {
  app::TrainConfig cfg = testing::tiny_config("eval_nan");
  nn::GPT2Config mc = app::model_config(cfg, 512);
  REQUIRE(mc.n_layer == 2);
  REQUIRE(mc.n_head >= 2);
  nn::GPT2 model(mc, 1);
  bool poisoned = false;
  for (auto& [name, p] : model.named_parameters())
    if (name == "transformer.h.0.attn.c_attn.weight") {  // (3C, C): row 0 is head 0's first query channel
      p.data<float>()[0] = std::numeric_limits<float>::quiet_NaN();
      poisoned = true;
    }
  REQUIRE(poisoned);
  const auto hf = testing::scratch_dir("eval_nan_hf");
  nn::save_pretrained(model, hf);

  int status = 0;
  const std::string out = run_command(std::string(KEEL_GPT2_BIN) + " eval --init-from " + hf.string() + " --data " +
                                          testing::tiny_dataset().string() + " --seq-len 32 --max-batches 1 --json --device cpu",
                                      status);
  REQUIRE_MESSAGE(status == 0, out);
  const auto line = out.substr(out.find('{'));
  const auto j = nlohmann::json::parse(line);
  const auto& ml = j.at("max_logit");
  REQUIRE(ml.size() == 2);
  CHECK_MESSAGE(is_nan_entry(ml[0][0]), line);
  for (size_t h = 1; h < ml[0].size(); ++h) CHECK_MESSAGE(ml[0][h].is_number(), line);  // heads 1.. are untouched
  for (const auto& v : ml[1]) CHECK_MESSAGE(is_nan_entry(v), line);
  CHECK(is_nan_entry(j.at("loss")));
  // The row range is poisoned exactly like max |logit|.
  const auto& mr = j.at("max_range");
  REQUIRE(mr.size() == 2);
  CHECK_MESSAGE(is_nan_entry(mr[0][0]), line);
  for (size_t h = 1; h < mr[0].size(); ++h) CHECK_MESSAGE(mr[0][h].is_number(), line);
  for (const auto& v : mr[1]) CHECK_MESSAGE(is_nan_entry(v), line);
}
#endif

TEST_CASE("peak FLOP/s come from the device name, and an unknown GPU gets 0 (no MFU), never a guess") {
  using app::peak_flops_of;
  CHECK(peak_flops_of("NVIDIA H100 80GB HBM3", DType::bf16) == 989e12);  // SXM
  CHECK(peak_flops_of("NVIDIA H100 80GB HBM3", DType::f16) == 989e12);
  CHECK(peak_flops_of("NVIDIA H100 80GB HBM3", DType::f32) == 67e12);
  CHECK(peak_flops_of("NVIDIA H100 PCIe", DType::bf16) == 756e12);
  CHECK(peak_flops_of("NVIDIA H100 PCIe", DType::f32) == 51e12);
  CHECK(peak_flops_of("NVIDIA H100 NVL", DType::bf16) == 835e12);
  CHECK(peak_flops_of("NVIDIA H200", DType::bf16) == 989e12);
  CHECK(peak_flops_of("NVIDIA H200", DType::f32) == 67e12);
  CHECK(peak_flops_of("NVIDIA A100-SXM4-80GB", DType::bf16) == 312e12);
  CHECK(peak_flops_of("NVIDIA H100 80GB HBM3 MIG 1g.10gb", DType::bf16) == 0);
  CHECK(peak_flops_of("NVIDIA H100", DType::bf16) == 0);  // SXM or PCIe? unknown: no guess
  CHECK(peak_flops_of("NVIDIA GeForce RTX 4090", DType::bf16) == 0);
  CHECK(peak_flops_of("NVIDIA H100 80GB HBM3", DType::f64) == 0);
}

TEST_CASE("the loss scale is logged in every train record and saved in the checkpoint") {
  app::TrainConfig c = testing::tiny_config("scale_logged");
  c.max_steps = 2;
  c.log_every = 1;
  app::train(c);
  int records = 0;
  for (const auto& r : app::read_metrics(app::metrics_path(c.run_dir)))
    if (r.kind == app::RecordKind::Train) {
      CHECK(r.loss_scale == 1.0);  // f32: the scaler is off, its scale 1
      CHECK_FALSE(r.skipped);
      ++records;
    }
  CHECK(records == 2);
  const auto ckpt = app::latest_checkpoint(c.run_dir);
  REQUIRE(ckpt);
  bool found = false;
  for (const auto& [name, t] : app::load_checkpoint(*ckpt).optimizer)
    found |= name == "scaler.scale";  // (the disabled scaler keeps its initial 2^16 there)
  CHECK(found);
}

TEST_CASE("SpikeDetector: a loss above factor x the recent mean is a spike, once 10 losses are known") {
  app::SpikeDetector d(2.0);
  for (int i = 0; i < 9; ++i) CHECK_FALSE(d.observe(1.0));
  CHECK_FALSE(d.observe(100.0));  // only 9 losses known: no verdict yet, but it joins the window
  const auto spike = d.observe(50.0);  // mean of ten: (9 + 100) / 10 = 10.9; 50 > 21.8
  REQUIRE(spike);
  CHECK(spike->find("the mean of the last 10 steps") != std::string::npos);
  CHECK_FALSE(d.observe(std::nan("")));  // NaN is no spike (the divergence check reports it) ...
  CHECK(d.recent().size() == 11);         // ... and never joins the window
  for (int i = 0; i < 60; ++i) d.observe(1.0);
  CHECK(d.recent().size() == 50);

  app::SpikeDetector resumed(2.0);
  resumed.restore(d.recent());
  CHECK(resumed.observe(3.0).has_value() == d.observe(3.0).has_value());
}

TEST_CASE("StepStats names the hottest head by the chosen statistic, NaN first") {
  app::StepStats s{app::MaxLogit(2, 2), app::MaxLogit(2, 2)};
  s.max_logit.merge({1, 2, 30, 4});
  s.max_range.merge({5, 60, 7, 8});
  CHECK(s.hottest_head("max_logit") == "layer 1 head 0 (max |logit| 30.0)");
  CHECK(s.hottest_head("max_range") == "layer 0 head 1 (max range 60.0)");
  s.max_logit.merge({0, 0, 0, std::nanf("")});
  CHECK(s.hottest_head("max_logit") == "layer 1 head 1 (max |logit| nan)");
}
