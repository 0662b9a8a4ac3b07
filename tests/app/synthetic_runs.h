// Synthetic run directories for the report tests: a config.json and a metrics.jsonl whose
// curves look like real MHSA / LS-attention runs (and whose numbers the tests can predict).
#pragma once

#include <cmath>
#include <filesystem>
#include <limits>
#include <string>

#include "app_test_util.h"
#include "apps/gpt2/run/metrics.h"

namespace keel::test {

struct SyntheticRun {
  std::string name;
  int64_t steps = 200;
  int layers = 2, heads = 4;
  double logit_growth = 0;     // logits grow like exp(growth * step) (MHSA on long sequences)
  double range_share = 0.8;    // max_range = range_share * max_logit
  int64_t diverge_at = -1;     // loss is NaN from this step on
  int64_t val_every = 20;
  bool write_config = true;
};

inline double synthetic_loss(int64_t step) { return 3.0 + 7.0 * std::exp(-0.02 * step); }

inline void make_run(const std::filesystem::path& dir, const SyntheticRun& r) {
  using keel::app::MetricsRecord;
  using keel::app::RecordKind;
  std::filesystem::create_directories(dir);
  if (r.write_config)
    write_text(dir / "config.json",
               "{\"name\":\"" + r.name + "\",\"model\":{\"n_layer\":" + std::to_string(r.layers) +
                   ",\"n_head\":" + std::to_string(r.heads) + ",\"attention\":\"" + r.name +
                   "\"},\"lr\":0.0006}");
  keel::app::MetricsLog log(dir);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (int64_t s = 1; s <= r.steps; ++s) {
    const bool dead = r.diverge_at >= 0 && s >= r.diverge_at;
    MetricsRecord t;
    t.kind = RecordKind::Train;
    t.step = s;
    t.loss = dead ? nan : synthetic_loss(s) + 0.05 * std::sin(0.7 * static_cast<double>(s));
    t.lr = 6e-4;
    t.grad_norm = 1.0;
    t.tokens_per_s = 1000.0 + static_cast<double>(s % 7);  // median 1003
    t.elapsed_s = 0.1 * static_cast<double>(s);
    for (int l = 0; l < r.layers; ++l) {
      auto& row = t.max_logit.emplace_back();
      auto& range = t.max_range.emplace_back();
      for (int h = 0; h < r.heads; ++h) {
        row.push_back(dead ? nan
                           : (2.0 + l + 0.5 * h) *
                                 std::exp(r.logit_growth * (1 + l) * static_cast<double>(s)));
        range.push_back(r.range_share * row.back());
      }
    }
    log.write(t);
    if (s % r.val_every == 0) {
      MetricsRecord v;
      v.kind = RecordKind::Val;
      v.step = s;
      v.val_loss = dead ? nan : synthetic_loss(s) + 0.1;
      v.val_ppl = std::exp(v.val_loss);
      log.write(v);
    }
    if (s == r.diverge_at) {
      MetricsRecord e;
      e.kind = RecordKind::Event;
      e.step = s;
      e.event = "nonfinite";
      e.message = "loss is nan";
      log.write(e);
    }
  }
}

}  // namespace keel::test
