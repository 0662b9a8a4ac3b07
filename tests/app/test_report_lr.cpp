// The learning-rate sensitivity figure (report/lr_section.h) and the output softmax's log Z
// (report/log_z_section.h): lines of runs that differ only in the learning rate, the paper's LR
// sensitivity computed from them, diverged runs marked, and a report that opens with them.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "app_test_util.h"
#include "apps/gpt2/report/log_z_section.h"
#include "apps/gpt2/report/lr_section.h"
#include "apps/gpt2/report/report.h"
#include "synthetic_runs.h"

using namespace keel::app;
using keel::test::make_run;
using keel::test::read_text;
using keel::test::SyntheticRun;
using keel::test::TempDir;
using keel::test::write_text;

namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

// A run as `gpt2 compare --sweep lr=...` leaves it: flattened config.json keys.
RunSummary run(const std::string& attention, const std::string& lr, double val_loss, int width = 16) {
  RunSummary s;
  s.name = attention + " lr=" + lr + " n-embd=" + std::to_string(width);
  s.config = {{"name", s.name},
              {"train.lr", lr},
              {"train.run_dir", "runs/" + attention + "/" + lr},
              {"model.attention", attention},
              {"model.n_embd", std::to_string(width)},
              {"model.vocab_size", "320"}};
  s.final_val_loss = val_loss;
  s.diverged = std::isnan(val_loss);
  s.max_logit = 10 * std::stod(lr) * 1000, s.max_log_z = 6.0;
  return s;
}

}  // namespace

TEST_CASE("lr_lines: one line per variant and size, by learning rate, with the paper's LR sensitivity") {
  // Out of order on purpose; the last run belongs to no line (no train.lr), the 32-wide ones to their own.
  const std::vector<RunSummary> runs = {run("mhsa", "0.1", kNaN),   run("mhsa", "0.001", 3.0), run("mhsa", "0.01", 2.5),
                                        run("qk_norm", "0.001", 3.0), run("qk_norm", "0.01", 2.6),
                                        run("qk_norm", "0.1", 2.7),  run("mhsa", "0.01", 2.4, 32),
                                        run("mhsa", "0.1", 6.5, 32),  RunSummary{}};
  const std::vector<LrLine> lines = lr_lines(runs);
  REQUIRE(lines.size() == 3);
  CHECK(lines[0].label == "mhsa n-embd=16");
  CHECK(lines[0].lrs == std::vector<double>{0.001, 0.01, 0.1});
  CHECK(lines[0].runs[2] == &runs[0]);
  const double L0 = std::log(320.0);
  CHECK(lines[0].initial_loss == doctest::Approx(L0));
  // mean over the lrs of min(loss, L0) - best: the diverged run counts as L0.
  CHECK(lines[0].sensitivity == doctest::Approx((0.5 + 0.0 + (L0 - 2.5)) / 3));
  CHECK(lines[0].diverged == 1);
  CHECK(lines[0].best_lr == 0.01);
  CHECK(lines[0].best_loss == 2.5);
  CHECK(lines[1].label == "qk_norm n-embd=16");
  CHECK(lines[1].sensitivity == doctest::Approx((0.4 + 0.0 + 0.1) / 3));
  CHECK(lines[1].diverged == 0);
  // A finite loss above L0 is capped at L0, and is no divergence.
  CHECK(lines[2].label == "mhsa n-embd=32");
  CHECK(lines[2].sensitivity == doctest::Approx((0.0 + (L0 - 2.4)) / 2));
  CHECK(lines[2].diverged == 0);
  CHECK(lines[0].color != lines[1].color);
}

TEST_CASE("lr_section: the loss, max logit and max |log Z| against lr, diverged runs marked, and questions") {
  const std::vector<RunSummary> runs = {run("mhsa", "0.001", 3.0), run("mhsa", "0.01", 2.5), run("mhsa", "0.1", kNaN),
                                        run("ls", "0.001", 3.1), run("ls", "0.01", 2.7)};
  const std::string h = lr_section(runs);
  CHECK(count(h, "<svg class=\"chart\"") == 3);
  CHECK(h.find("Final validation loss") != std::string::npos);
  CHECK(h.find("Max attention logit") != std::string::npos);
  CHECK(h.find("Max |log Z|") != std::string::npos);
  CHECK(count(h, "mhsa n-embd=16: diverged at lr 0.1") == 3);  // a mark on each chart
  CHECK(h.find("ls n-embd=16: diverged") == std::string::npos);
  CHECK(h.find("peak learning rate (log scale)") != std::string::npos);
  CHECK(h.find("Questions for the class") != std::string::npos);
  CHECK(h.find("QK-norm flatten") != std::string::npos);
  CHECK(h.find("<b>") != std::string::npos);
  // The line table and every run, the diverged one with its status.
  CHECK(h.find("<td class=\"num\">1</td><td class=\"num\">0.01</td><td class=\"num\">2.500</td>") !=
        std::string::npos);
  CHECK(h.find("diverged at step") != std::string::npos);
  CHECK(lr_section({RunSummary{}}).find("No run records its learning rate") != std::string::npos);
}

TEST_CASE("write_report of an lr sweep opens with the LR figure, and every report plots log Z when logged") {
  TempDir dir("report_lr");
  for (const char* lr : {"0.001", "0.01"}) {
    const auto d = dir / (std::string("mhsa_") + lr);
    make_run(d, SyntheticRun{"mhsa", 40, 2, 2, 0.0, 0.8, lr == std::string("0.01") ? 30 : -1, 20, false});
    write_text(d / "config.json", std::string("{\"name\":\"mhsa lr=") + lr + "\",\"train\":{\"lr\":" + lr +
                                      "},\"model\":{\"attention\":\"mhsa\",\"vocab_size\":320}}");
  }
  const auto out = dir / "report.html";
  write_report({(dir / "mhsa_0.001").string(), (dir / "mhsa_0.01").string()}, out.string(), "lr", "lr");
  const std::string h = read_text(out);
  REQUIRE(h.find("<h2>Learning-rate sensitivity</h2>") != std::string::npos);
  CHECK(h.find("<h2>Learning-rate sensitivity</h2>") < h.find("<h2>Summary</h2>"));
  CHECK(h.find("mhsa: diverged at lr 0.01") != std::string::npos);
  CHECK(h.find("Sweep over") == std::string::npos);  // not the generic sweep section as well
  // The synthetic logs carry no log Z: the section says so.
  CHECK(h.find("No run logged log Z") != std::string::npos);
}

TEST_CASE("summarize and the log Z section read log Z from the train records") {
  std::vector<MetricsRecord> recs;
  for (int s = 1; s <= 4; ++s) {
    MetricsRecord r;
    r.step = s;
    r.loss = 3.0;
    r.log_z_mean = 6.0 - s;
    r.log_z_max = s == 3 ? kNaN : 7.0 - 0.5 * s;
    recs.push_back(r);
  }
  MetricsRecord v;
  v.kind = RecordKind::Val, v.step = 4, v.val_loss = 2.75, v.val_ppl = std::exp(2.75);
  recs.push_back(v);
  const RunSummary s = summarize(recs);
  CHECK(s.max_log_z == 6.5);    // the largest finite one
  CHECK(s.final_log_z == 2.0);  // the last record's mean
  CHECK(s.final_val_loss == 2.75);
  const std::string h = log_z_section({{"mhsa", "#111", &recs}});
  CHECK(count(h, "<svg class=\"chart\"") == 2);
  CHECK(h.find("Mean log Z per step") != std::string::npos);
  CHECK(h.find("Max |log Z| per step") != std::string::npos);
  std::vector<MetricsRecord> old(1);
  CHECK(log_z_section({{"old", "#111", &old}}).find("No run logged log Z") != std::string::npos);
}
