// Run summaries, the terminal comparison table and the HTML report, on synthetic runs.
#include <doctest/doctest.h>

#include <cmath>

#include "app_test_util.h"
#include "apps/gpt2/report/report.h"
#include "apps/gpt2/report/sweep_section.h"
#include "core/error.h"
#include "synthetic_runs.h"

using namespace keel::app;
using keel::test::TempDir;
using keel::test::expect_error;
using keel::test::make_run;
using keel::test::read_text;
using keel::test::SyntheticRun;
using keel::test::write_text;

namespace {

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("summarize computes the run's headline numbers") {
  TempDir dir("report-sum");
  const auto run = dir / "mhsa-run";
  make_run(run, {.name = "mhsa", .steps = 200, .layers = 2, .heads = 4});
  std::ofstream(run / "metrics.jsonl", std::ios::app)
      << "{\"kind\":\"event\",\"step\":200,\"event\":\"spike\",\"message\":\"x\"}\n";
  const RunSummary s = summarize(run);
  CHECK(s.name == "mhsa");
  CHECK(s.steps == 200);
  // Mean over the last 10% of train records: steps 181..200.
  double want = 0;
  for (int step = 181; step <= 200; ++step)
    want += keel::test::synthetic_loss(step) + 0.05 * std::sin(0.7 * step);
  CHECK(s.final_train_loss == doctest::Approx(want / 20));
  // Validation loss falls monotonically, so the best perplexity is the final one.
  CHECK(s.final_val_ppl == doctest::Approx(std::exp(keel::test::synthetic_loss(200) + 0.1)));
  CHECK(s.best_val_ppl == s.final_val_ppl);
  CHECK(s.best_val_step == 200);
  CHECK(s.max_logit == doctest::Approx(2.0 + 1 + 0.5 * 3));  // layer 1, head 3
  CHECK(s.max_range == doctest::Approx(0.8 * (2.0 + 1 + 0.5 * 3)));
  CHECK(s.late_max_logit == doctest::Approx(2.0 + 1 + 0.5 * 3));  // constant over the run
  CHECK(s.late_max_range == doctest::Approx(0.8 * (2.0 + 1 + 0.5 * 3)));
  REQUIRE(s.final_max_logit_per_layer.size() == 2);
  CHECK(s.final_max_logit_per_layer[0] == doctest::Approx(3.5));
  CHECK(s.final_max_logit[1].size() == 4);
  CHECK(s.median_tokens_per_s == doctest::Approx(1003));
  CHECK_FALSE(s.diverged);
  CHECK(s.spikes == 1);
  CHECK(s.status() == "ok, 1 spike");
  bool found = false;
  for (const auto& [k, v] : s.config) found |= k == "model.n_layer" && v == "2";
  CHECK(found);
}

TEST_CASE("summarize flags a diverged run and keeps its last finite logits") {
  TempDir dir("report-div");
  make_run(dir / "r", {.name = "mhsa", .steps = 100, .logit_growth = 0.02, .diverge_at = 61});
  const RunSummary s = summarize(dir / "r");
  CHECK(s.diverged);
  CHECK(s.diverged_step == 61);
  CHECK(std::isnan(s.final_train_loss));
  CHECK(std::isnan(s.final_val_ppl));
  CHECK(s.best_val_step == 60);
  CHECK(s.max_logit == doctest::Approx(4.5 * std::exp(0.04 * 60)));
  REQUIRE(s.final_max_logit_per_layer.size() == 2);
  CHECK(std::isfinite(s.final_max_logit_per_layer[1]));
  CHECK(s.status().find("diverged at step 61") == 0);
  CHECK(s.nonfinite_logit_step == 61);  // NaN max logits must not vanish from the summary
  CHECK(s.status().find("max logit non-finite from step 61") != std::string::npos);
}

TEST_CASE("summarize names a run after its directory without config.json") {
  TempDir dir("report-noconf");
  make_run(dir / "baseline", {.name = "x", .steps = 10, .write_config = false});
  CHECK(summarize(dir / "baseline").name == "baseline");
  CHECK(summarize((dir / "baseline").string() + "/").name == "baseline");
}

TEST_CASE("summarize reports missing and corrupt inputs by path") {
  TempDir dir("report-missing");
  expect_error<keel::IoError>([&] { summarize(dir / "nope"); },
                              {(dir / "nope").string(), "not found"});
  std::filesystem::create_directories(dir / "empty");
  expect_error<keel::IoError>([&] { summarize(dir / "empty"); },
                              {(dir / "empty" / "metrics.jsonl").string()});
  make_run(dir / "badconf", {.name = "x", .steps = 5});
  write_text(dir / "badconf" / "config.json", "{\"name\": ");
  expect_error<keel::IoError>([&] { summarize(dir / "badconf"); },
                              {(dir / "badconf" / "config.json").string(), "malformed"});
}

TEST_CASE("compare_table lines up a row per run") {
  TempDir dir("report-table");
  make_run(dir / "a", {.name = "mhsa", .steps = 50, .diverge_at = 30});
  make_run(dir / "b", {.name = "ls", .steps = 50});
  const std::string t = compare_table({summarize(dir / "a"), summarize(dir / "b")});
  CHECK(t.find("mhsa") != std::string::npos);
  CHECK(t.find("diverged at step 30") != std::string::npos);
  CHECK(count(t, "\n") == 4);  // header, rule, two rows
  // Right-aligned numbers: every "tokens/s" cell ends where its header does.
  const size_t header_end = t.find("tokens/s") + std::string("tokens/s").size();
  size_t line = t.find('\n', t.find('\n') + 1) + 1;  // first row
  for (; line < t.size(); line = t.find('\n', line) + 1) CHECK(t.substr(line + header_end - 4, 4) == "1003");
}

TEST_CASE("write_report writes a self-contained report with a chart per layer") {
  TempDir dir("report-html");
  make_run(dir / "mhsa", {.name = "mhsa", .steps = 300, .layers = 3, .logit_growth = 0.01,
                          .diverge_at = 250});
  make_run(dir / "ls", {.name = "ls", .steps = 300, .layers = 3});
  make_run(dir / "qk", {.name = "qk_norm<&>", .steps = 300, .layers = 3});
  const auto out = dir / "report.html";
  write_report({(dir / "mhsa").string(), (dir / "ls").string(), (dir / "qk").string()},
               out.string(), "MHSA vs LS");
  const std::string html = read_text(out);
  CHECK(html.rfind("<!DOCTYPE html>", 0) == 0);
  CHECK(html.find("http://") == std::string::npos);
  CHECK(html.find("https://") == std::string::npos);
  CHECK(html.find("<script") == std::string::npos);
  CHECK(html.find("<link") == std::string::npos);
  for (const char* layer : {"Layer 0", "Layer 1", "Layer 2"}) {
    CHECK(count(html, std::string(layer) + ": max |logit|<") == 1);
    CHECK(count(html, std::string(layer) + ": max range<") == 1);
  }
  CHECK(html.find("Layer 3") == std::string::npos);
  // loss, val ppl, lr, then for each statistic one chart per layer and one per-head heatmap per run
  CHECK(count(html, "<svg class=\"chart\"") == 3 + 2 * (3 + 3));
  CHECK(count(html, "<table class=\"heat\"") == 2 * 3);
  // The toggle between the statistics: radio buttons and CSS, max |logit| first.
  CHECK(count(html, "<input type=\"radio\" name=\"signal\"") == 2);
  CHECK(html.find("id=\"signal-logit\" checked/>") != std::string::npos);
  CHECK(html.find("#signal-range:checked~.signal-range{display:block}") != std::string::npos);
  CHECK(html.find("<div class=\"signal-logit\">") < html.find("<div class=\"signal-range\">"));
  CHECK(html.find("<th>max range</th>") != std::string::npos);
  CHECK(html.find(">diverged<") != std::string::npos);  // the divergence marker
  CHECK(html.find("qk_norm&lt;&amp;&gt;") != std::string::npos);
  CHECK(html.find("qk_norm<&>") == std::string::npos);
  CHECK(html.find("</html>") != std::string::npos);
}

TEST_CASE("write_report fails cleanly on a missing run and writes nothing") {
  TempDir dir("report-fail");
  make_run(dir / "ok", {.name = "ls", .steps = 10});
  const auto out = dir / "report.html";
  expect_error<keel::IoError>(
      [&] { write_report({(dir / "ok").string(), (dir / "gone").string()}, out.string(), "t"); },
      {(dir / "gone").string()});
  CHECK_FALSE(std::filesystem::exists(out));
  expect_error<keel::ValueError>([&] { write_report({}, out.string(), "t"); }, {"no run"});
}

TEST_CASE("write_report copes with an empty log and a run that is NaN from the start") {
  TempDir dir("report-empty");
  std::filesystem::create_directories(dir / "empty");
  write_text(dir / "empty" / "metrics.jsonl", "");
  make_run(dir / "dead", {.name = "dead", .steps = 30, .diverge_at = 1});
  const RunSummary e = summarize(dir / "empty");
  CHECK(e.steps == 0);
  CHECK(std::isnan(e.final_train_loss));
  CHECK(e.status() == "ok");
  const auto out = dir / "r.html";
  write_report({(dir / "empty").string(), (dir / "dead").string()}, out.string(), "edge cases");
  const std::string html = read_text(out);
  CHECK(html.find("no data") != std::string::npos);  // the val chart has no finite point
  CHECK(html.find("diverged at step 1") != std::string::npos);
  // loss, val ppl, lr, then per statistic 2 layers and a per-head heatmap per run (the empty run's
  // says so)
  CHECK(count(html, "<svg class=\"chart\"") == 3 + 2 * (2 + 2));
  CHECK(count(html, "no attention logits logged") == 2);
  const std::string table = compare_table({e, summarize(dir / "dead")});
  CHECK(table.find("dead") != std::string::npos);
}

TEST_CASE("the sweep section plots a point per run against the swept value, n/d for seq_len") {
  // Runs as `gpt2 compare --sweep seq-len=...` leaves them: flattened config.json keys.
  auto run = [](const std::string& attention, int T, double ppl, double range) {
    RunSummary s;
    s.name = attention + " seq-len=" + std::to_string(T);
    s.config = {{"train.seq_len", std::to_string(T)}, {"model.attention", attention},
                {"model.n_embd", "16"}, {"model.n_head", "4"}, {"train.ls_window", "8"}};
    s.final_val_ppl = ppl, s.late_max_range = range, s.late_max_logit = range / 2;
    return s;
  };
  const std::vector<RunSummary> runs = {run("mhsa", 64, 6.5, 40), run("mhsa", 256, 7.5, 90), run("ls", 64, 6.6, 10),
                                        run("ls", 256, 6.7, 11)};
  CHECK(sweep_x(runs[1], "seq_len") == 64.0);  // T = 256 over D = 16 / 4
  CHECK(sweep_x(runs[1], "ls_window") == 8.0);
  CHECK_FALSE(sweep_x(runs[1], "lr").has_value());
  CHECK(sweep_axis_label("seq_len") == "n/d (sequence length / head width)");
  CHECK(sweep_axis_label("ls_window") == "--ls-window");
  const std::string h = sweep_section(runs, {"#111", "#111", "#222", "#222"}, "seq_len");
  CHECK(count(h, "<svg class=\"chart\"") == 3);  // perplexity, max range, max |logit|
  CHECK(count(h, "<tr><td>") == 4);
  CHECK(h.find("<td>mhsa</td><td class=\"num\">64</td><td class=\"num\">7.50</td><td class=\"num\">90.0</td>") !=
        std::string::npos);
  CHECK(h.find("n/d (sequence length / head width)") != std::string::npos);
  const std::string none = sweep_section(runs, {"#1", "#1", "#2", "#2"}, "lr");
  CHECK(none.find("No run records the swept value") != std::string::npos);
}
