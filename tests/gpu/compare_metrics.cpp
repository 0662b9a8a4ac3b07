// compare_metrics: do two training runs agree? Reads two metrics.jsonl files (gpt2 train's log)
// and compares their train records step by step: the loss, and optionally the max logit of
// every layer and head. Used by tests/gpu/check.sh (CUDA against CPU, bf16/f16 against f32,
// interrupted-and-resumed against uninterrupted) and tested on the CPU by ctest.
//
//   compare_metrics A.jsonl B.jsonl [--steps N] [--loss-rel R] [--loss-abs A]
//                   [--logit-rel R] [--logit-abs A] [--exact]
//
// Values a, b agree when |a - b| <= abs + rel * |b| (B is the reference). --exact demands
// bit-identical losses and max logits. A non-finite loss or max logit in either run, a step
// missing from one of them, or fewer than N train records is a failure: these checks are about
// runs that must train sanely. Prints one line per failure (at most 10) and a summary; exit 0
// when they agree, 1 when not, 2 on bad arguments or unreadable files.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <map>

#include "apps/gpt2/run/metrics.h"
#include "core/error.h"

using keel::app::MetricsRecord;
using keel::app::RecordKind;

namespace {

struct Tolerance {
  double rel = 0, abs = 0;
  bool exact = false;
  bool agree(double a, double b) const {
    if (!std::isfinite(a) || !std::isfinite(b)) return false;
    return exact ? a == b : std::abs(a - b) <= abs + rel * std::abs(b);
  }
};

std::map<int64_t, MetricsRecord> train_records(const std::string& path) {
  std::map<int64_t, MetricsRecord> out;
  for (auto& r : keel::app::read_metrics(path))
    if (r.kind == RecordKind::Train) out[r.step] = std::move(r);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"compare the train records of two gpt2 metrics.jsonl files", "compare_metrics"};
  std::string a_path, b_path;
  int64_t min_steps = 1;
  Tolerance loss{1e-4, 0}, logit{0, 0};
  bool check_logits = false;
  app.add_option("a", a_path, "metrics.jsonl of the run under test")->required();
  app.add_option("b", b_path, "metrics.jsonl of the reference run")->required();
  app.add_option("--steps", min_steps, "train records both files must have at least");
  app.add_option("--loss-rel", loss.rel, "relative tolerance of the loss");
  app.add_option("--loss-abs", loss.abs, "absolute tolerance of the loss");
  auto* lr = app.add_option("--logit-rel", logit.rel, "relative tolerance of each max logit (compares them)");
  auto* la = app.add_option("--logit-abs", logit.abs, "absolute tolerance of each max logit (compares them)");
  bool exact = false;
  app.add_flag("--exact", exact, "losses and max logits must be bit-identical");
  CLI11_PARSE(app, argc, argv);
  check_logits = lr->count() > 0 || la->count() > 0 || exact;
  if (exact) loss.exact = logit.exact = true;

  std::map<int64_t, MetricsRecord> a, b;
  try {
    a = train_records(a_path);
    b = train_records(b_path);
  } catch (const keel::Error& e) {
    fmt::print(stderr, "compare_metrics: {}\n", e.what());
    return 2;
  }
  int failures = 0;
  auto fail = [&](const std::string& what) {
    if (++failures <= 10) fmt::print("  {}\n", what);
  };
  if (int64_t(a.size()) < min_steps || int64_t(b.size()) < min_steps)
    fail(fmt::format("too few train records: {} and {}, need {}", a.size(), b.size(), min_steps));
  for (const auto& [step, rb] : b)
    if (!a.count(step)) fail(fmt::format("step {}: only in {}", step, b_path));
  double worst_loss = 0, worst_logit = 0;
  for (const auto& [step, ra] : a) {
    auto it = b.find(step);
    if (it == b.end()) {
      fail(fmt::format("step {}: only in {}", step, a_path));
      continue;
    }
    const MetricsRecord& rb = it->second;
    worst_loss = std::max(worst_loss, std::abs(ra.loss - rb.loss));
    if (!loss.agree(ra.loss, rb.loss)) fail(fmt::format("step {}: loss {} vs {}", step, ra.loss, rb.loss));
    if (!check_logits) continue;
    if (ra.max_logit.size() != rb.max_logit.size()) {
      fail(fmt::format("step {}: {} vs {} layers of max logits", step, ra.max_logit.size(), rb.max_logit.size()));
      continue;
    }
    for (size_t l = 0; l < ra.max_logit.size(); ++l) {
      if (ra.max_logit[l].size() != rb.max_logit[l].size()) {
        fail(fmt::format("step {} layer {}: head counts differ", step, l));
        continue;
      }
      for (size_t h = 0; h < ra.max_logit[l].size(); ++h) {
        const double x = ra.max_logit[l][h], y = rb.max_logit[l][h];
        worst_logit = std::max(worst_logit, std::abs(x - y));
        if (!logit.agree(x, y)) fail(fmt::format("step {} layer {} head {}: max logit {} vs {}", step, l, h, x, y));
      }
    }
  }
  fmt::print("compare_metrics: {} steps, largest loss difference {:.3g}{}: {}\n", a.size(), worst_loss,
             check_logits ? fmt::format(", largest max-logit difference {:.3g}", worst_logit) : "",
             failures ? fmt::format("{} disagreements", failures) : "agree");
  return failures ? 1 : 0;
}
