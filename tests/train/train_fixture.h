// A small prepared dataset (the bundled Austen corpus with a 512-token BPE vocabulary) and a
// tiny training configuration, shared by the training tests. The dataset is made once per
// process in a temporary directory.
#pragma once

#include <filesystem>
#include <string>

#include <vector>

#include "apps/gpt2/run/metrics.h"
#include "apps/gpt2/train/train_config.h"
#include "data/assets.h"
#include "data/prepare.h"
#include "temp_dir.h"

namespace keel::testing {

// ROOT/name, not yet created (a run directory the trainer makes), where ROOT is one scratch
// directory per test process, removed when the process exits.
inline std::filesystem::path scratch_dir(const std::string& name) {
  static const test::TempDir root("train");
  auto p = root / name;
  std::filesystem::remove_all(p);
  return p;
}

inline const std::filesystem::path& tiny_dataset() {
  static const std::filesystem::path dir = [] {
    auto out = scratch_dir("data");
    data::PrepareOptions o;
    o.inputs = {data::bundled_corpus_path()};
    o.out = out;
    o.train_vocab = 512;
    o.progress = false;
    data::prepare_dataset(o);
    return out;
  }();
  return dir;
}

// 2 layers, 4 heads of 16, T = 32, B = 4: a step takes milliseconds on the CPU.
inline app::TrainConfig tiny_config(const std::string& run) {
  app::TrainConfig c;
  c.preset = "tiny";
  c.model.n_embd = 64;
  c.seq_len = 32;
  c.batch_size = 4;
  c.max_steps = 12;
  c.warmup_steps = 2;
  c.lr = 3e-3;
  c.min_lr = 3e-4;
  c.val_every = 6;
  c.val_batches = 2;
  c.ckpt_every = 6;
  c.device = "cpu";
  c.data = tiny_dataset().string();
  c.run_dir = scratch_dir(run).string();
  return c;
}

// The train records of a run's metrics.jsonl, in step order.
inline std::vector<app::MetricsRecord> train_records(const std::filesystem::path& run_dir) {
  std::vector<app::MetricsRecord> out;
  for (auto& r : app::read_metrics(app::metrics_path(run_dir)))
    if (r.kind == app::RecordKind::Train) out.push_back(r);
  return out;
}

}  // namespace keel::testing
