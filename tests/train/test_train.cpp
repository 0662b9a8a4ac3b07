// gpt2 train on the CPU: the loss falls, a resumed run continues the same loss curve exactly,
// every attention variant trains, and exported weights reload as the same model.
#include <doctest/doctest.h>

#include <csignal>
#include <fstream>
#include <thread>

#include "apps/gpt2/infer/run_model.h"
#include "apps/gpt2/run/checkpoint.h"
#include "apps/gpt2/run/metrics.h"
#include "apps/gpt2/train/trainer.h"
#include "core/autograd.h"
#include "core/factory.h"
#include "nn/hf.h"
#include "train_fixture.h"

using namespace keel;
using namespace keel::app;
namespace fs = std::filesystem;

namespace {
std::vector<double> train_losses(const fs::path& run_dir) {
  std::vector<double> out;
  for (const auto& r : read_metrics(metrics_path(run_dir)))
    if (r.kind == RecordKind::Train) out.push_back(r.loss);
  return out;
}
}  // namespace

TEST_CASE("a tiny GPT-2 trains on the CPU and its loss falls") {
  TrainConfig c = testing::tiny_config("falls");
  c.max_steps = 40;
  TrainResult r = train(c);
  auto losses = train_losses(c.run_dir);
  REQUIRE(losses.size() == 40);
  CHECK(losses.front() == doctest::Approx(std::log(512.0)).epsilon(0.05));  // uniform over the vocabulary
  // 40 steps of 128 tokens take the model from uniform (ln 512 = 6.24) to about the unigram
  // entropy of the text (5.3).
  CHECK(losses.back() < losses.front() - 0.7);
  CHECK(r.val_loss < losses.front() - 0.7);
  CHECK(fs::exists(fs::path(c.run_dir) / "config.json"));
  CHECK(latest_checkpoint(c.run_dir).has_value());
  // Every train and val record carries both attention statistics of every layer and head. Two
  // logits of a row differ by at most twice the largest |logit|.
  auto recs = read_metrics(metrics_path(c.run_dir));
  CHECK(recs.front().max_logit.size() == 2);
  CHECK(recs.front().max_logit[0].size() == 4);
  int checked = 0;
  for (const auto& rec : recs) {
    if (rec.kind == RecordKind::Event) continue;
    REQUIRE(rec.max_range.size() == 2);
    for (size_t l = 0; l < 2; ++l) {
      REQUIRE(rec.max_range[l].size() == 4);
      for (size_t h = 0; h < 4; ++h) {
        CHECK(rec.max_range[l][h] > 0);
        CHECK(rec.max_range[l][h] <= 2 * rec.max_logit[l][h] * (1 + 1e-6));
        ++checked;
      }
    }
  }
  CHECK(checked >= 41 * 8);  // 40 train records and the final val record
}

TEST_CASE("a resumed run logs the same losses as an uninterrupted one") {
  TrainConfig full = testing::tiny_config("uninterrupted");
  full.model.dropout = 0.1;  // the dropout RNG must be restored too
  train(full);

  TrainConfig part = full;
  part.run_dir = testing::scratch_dir("resumed").string();
  part.keep_checkpoints = 5;
  train(part);
  // Pretend the run died after step 6: drop the final checkpoint, resume from the one at 6.
  fs::remove_all(fs::path(part.run_dir) / "checkpoints" / "step_00000012");
  part.resume = true;
  train(part);

  CHECK(train_losses(part.run_dir) == train_losses(full.run_dir));
}

TEST_CASE("SIGINT stops a run with a checkpoint and --resume finishes it identically") {
  TrainConfig full = testing::tiny_config("sig_full");
  full.max_steps = 30;
  full.ckpt_every = 0;
  train(full);

  TrainConfig c = full;
  c.run_dir = testing::scratch_dir("sig_run").string();
  std::thread killer([&] {
    // Once a few steps are logged, interrupt as a user pressing Ctrl-C would.
    for (int i = 0; i < 2000; ++i) {
      std::ifstream f(metrics_path(c.run_dir));
      int lines = 0;
      for (std::string l; std::getline(f, l);) ++lines;
      if (lines >= 3) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    std::raise(SIGINT);
  });
  TrainResult r = train(c);
  killer.join();
  REQUIRE(r.interrupted);
  CHECK(r.steps < 30);
  c.resume = true;
  TrainResult done = train(c);
  CHECK_FALSE(done.interrupted);
  CHECK(train_losses(c.run_dir) == train_losses(full.run_dir));
}

TEST_CASE("every attention variant of nn::kAttentionKinds trains") {
  for (const auto& [kind, v] : nn::kAttentionKinds) {
    TrainConfig c = testing::tiny_config(std::string("variant_") + v);
    c.model.attention = v;
    c.model.ls_window = 8;
    c.max_steps = 6;
    TrainResult r = train(c);
    CHECK_MESSAGE(std::isfinite(r.final_loss), v);
    CHECK_MESSAGE(r.final_loss < std::log(512.0), v);
  }
}

TEST_CASE("gradient accumulation of 2 micro-batches of 2 matches one batch of 4") {
  TrainConfig a = testing::tiny_config("accum_a");
  a.max_steps = 4;
  TrainConfig b = a;
  b.run_dir = testing::scratch_dir("accum_b").string();
  b.batch_size = 2;
  b.grad_accum = 2;
  train(a);
  train(b);
  // The loader's consecutive batches of 2 hold exactly the windows of one batch of 4, and the
  // 1/accum scaling makes the summed gradient the mean's: the runs agree up to rounding.
  auto la = train_losses(a.run_dir), lb = train_losses(b.run_dir);
  REQUIRE(la.size() == 4);
  REQUIRE(lb.size() == 4);
  for (size_t i = 0; i < la.size(); ++i) CHECK(lb[i] == doctest::Approx(la[i]).epsilon(1e-4));
}

TEST_CASE("--zero 1 in one process (one slice holding everything) trains exactly like plain AdamW") {
  TrainConfig a = testing::tiny_config("zero_a");
  a.max_steps = 4;
  TrainConfig b = a;
  b.run_dir = testing::scratch_dir("zero_b").string();
  b.zero = 1;
  train(a);
  train(b);
  // The same update on the same (unreduced) gradients: only the norm's f64 sum is ordered otherwise.
  auto la = train_losses(a.run_dir), lb = train_losses(b.run_dir);
  REQUIRE(la.size() == 4);
  REQUIRE(lb.size() == 4);
  for (size_t i = 0; i < la.size(); ++i) CHECK(lb[i] == doctest::Approx(la[i]).epsilon(1e-6));
}

TEST_CASE("gpt2 export writes a Hugging Face directory that reloads as the same model") {
  TrainConfig c = testing::tiny_config("export");
  c.max_steps = 3;
  train(c);
  auto model = load_run_model(c.run_dir);
  fs::path hf = testing::scratch_dir("export_hf");
  nn::save_pretrained(*model, hf);
  auto back = nn::load_pretrained(hf);
  Tensor ids = from_vector<int32_t>({1, 5, 9, 200, 3, 7}, {1, 6});
  NoGradGuard no_grad;
  CHECK(model->forward(ids).logits.to_vector<float>() == back->forward(ids).logits.to_vector<float>());
}

TEST_CASE("a diverging run stops with a diagnosis, or skips the bad steps when asked") {
  TrainConfig c = testing::tiny_config("diverge_stop");
  c.lr = 1e5;  // absurd on purpose, and unclipped: the weights blow up within a few steps
  c.min_lr = 1e5;
  c.warmup_steps = 0;
  c.grad_clip = 0;
  c.max_steps = 30;
  try {
    train(c);
    FAIL("the run did not diverge");
  } catch (const ValueError& e) {
    std::string m = e.what();
    CHECK(m.find("training diverged") != std::string::npos);
    CHECK(m.find("layer") != std::string::npos);  // names the hottest layer and head
  }
  bool logged = false;
  for (const auto& r : read_metrics(metrics_path(c.run_dir)))
    logged |= r.kind == RecordKind::Event && r.event == "nonfinite";
  CHECK(logged);

  // --spike-signal max_range: the diagnosis names the hottest head by the row range.
  TrainConfig by_range = c;
  by_range.run_dir = testing::scratch_dir("diverge_range").string();
  by_range.spike_signal = "max_range";
  try {
    train(by_range);
    FAIL("the run did not diverge");
  } catch (const ValueError& e) {
    CHECK(std::string(e.what()).find("max range") != std::string::npos);
  }

  TrainConfig s = c;
  s.run_dir = testing::scratch_dir("diverge_skip").string();
  s.on_nonfinite = "skip";
  TrainResult r = train(s);
  CHECK(r.steps == 30);
  int skipped = 0;
  for (const auto& rec : read_metrics(metrics_path(s.run_dir))) skipped += rec.kind == RecordKind::Train && rec.skipped;
  CHECK(skipped > 0);
}

TEST_CASE("bias and tied embeddings can be switched from the command-line config") {
  TrainConfig c = testing::tiny_config("untied");
  c.model.bias = 0;
  c.model.tie_embeddings = 0;
  c.max_steps = 2;
  train(c);
  auto model = load_run_model(c.run_dir);
  CHECK_FALSE(model->config().bias);
  CHECK_FALSE(model->config().tie_embeddings);
  bool has_lm_head = false;
  for (const auto& [name, t] : model->named_parameters()) has_lm_head |= name == "lm_head.weight";
  CHECK(has_lm_head);
}
