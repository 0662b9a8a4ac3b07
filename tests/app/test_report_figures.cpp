// The report's figures for teaching instability: the per-head max-logit heatmap over steps, loss
// spike markers, the learning-rate chart, and text large enough to project.
#include <doctest/doctest.h>

#include <regex>

#include "markup.h"

#include "app_test_util.h"
#include "apps/gpt2/report/logit_heatmap.h"
#include "apps/gpt2/report/report.h"
#include "apps/gpt2/report/svg_chart.h"
#include "synthetic_runs.h"

using namespace keel::app;
using keel::test::make_run;
using keel::test::read_text;
using keel::test::TempDir;

namespace {

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

using keel::test::well_formed;

void add_spike(const std::filesystem::path& run, int64_t step) {
  std::ofstream(run / "metrics.jsonl", std::ios::app)
      << "{\"kind\":\"event\",\"step\":" << step << ",\"event\":\"spike\",\"message\":\"loss 9 > 2 x mean\"}\n";
}

}  // namespace

TEST_CASE("the per-head heatmap has a cell per head and step bin, coloured by size, with spikes marked") {
  TempDir dir("heatmap");
  make_run(dir / "mhsa", {.name = "mhsa", .steps = 50, .layers = 2, .heads = 3, .logit_growth = 0.02,
                          .diverge_at = 41});
  add_spike(dir / "mhsa", 30);
  const auto records = read_metrics(metrics_path(dir / "mhsa"));
  const std::string s = svg::logit_heatmap(records, 1.0, 100.0, "mhsa", 25);
  CHECK(well_formed(s));
  // 50 steps in 25 bins of 2 steps, 6 heads: every bin has records (the diverged ones are NaN).
  CHECK(count(s, "<rect x=") == 6 * 25 + 1 + 20);  // cells, the frame, the colour key
  CHECK(count(s, "fill=\"#000\"") == 6 * 5);       // steps 41..50: bins 20..24 are non-finite
  CHECK(count(s, ">layer 0<") == 1);
  CHECK(count(s, ">layer 1<") == 1);
  CHECK(count(s, "loss spike at step 30") == 1);
  // Cells come row by row: head (0, 0) at the first bin is paler than head (1, 2) at the last
  // finite bin, whose logits grew 5x larger.
  std::vector<std::string> fills;
  static const std::regex cell(R"re(<rect x="[^"]*" y="[^"]*" width="[^"]*" height="[^"]*" fill="([^"]*)"/>)re");
  for (auto it = std::sregex_iterator(s.begin(), s.end(), cell); it != std::sregex_iterator(); ++it)
    fills.push_back((*it)[1]);
  REQUIRE(fills.size() >= 6 * 25);
  CHECK(fills[0] != fills[5 * 25 + 19]);
  CHECK(fills[5 * 25 + 20] == "#000");
  CHECK(s.find("no attention logits") == std::string::npos);
  CHECK(svg::logit_heatmap({}, 1, 2, "empty").find("no attention logits") != std::string::npos);
}

TEST_CASE("the report shows the lr schedule, spike markers and per-head heatmaps, in large text") {
  TempDir dir("report-teach");
  make_run(dir / "mhsa", {.name = "mhsa", .steps = 120, .layers = 2, .logit_growth = 0.02});
  make_run(dir / "ls", {.name = "ls", .steps = 120, .layers = 2});
  add_spike(dir / "mhsa", 77);
  const auto out = dir / "report.html";
  write_report({(dir / "mhsa").string(), (dir / "ls").string()}, out.string(), "teach");
  const std::string html = read_text(out);
  CHECK(well_formed(html.substr(html.find("<html"))));
  CHECK(count(html, "Learning-rate schedule") == 1);
  CHECK(count(html, "Validation perplexity") == 1);
  CHECK(count(html, "Max |logit| per head over training") == 1);
  CHECK(count(html, "Max logit range per head over training") == 1);
  CHECK(count(html, "mhsa: loss spike at step 77") == 1);   // on the loss curve
  CHECK(count(html, "loss spike at step 77</title>") == 3);  // and above both heatmaps
  CHECK(count(html, "font-size=\"14\"") >= 5);
  CHECK(html.find("font-size=\"11\"") == std::string::npos);
}

TEST_CASE("the per-head heatmap draws the statistic it is given, and the report survives logs without max_range") {
  TempDir dir("heatmap-range");
  make_run(dir / "mhsa", {.name = "mhsa", .steps = 20, .layers = 1, .heads = 2, .range_share = 0.5});
  const auto records = read_metrics(metrics_path(dir / "mhsa"));
  // Values 2 and 2.5 (max |logit|) or 1 and 1.25 (range) on a scale from 1 to 2.5: the range's
  // head 0 sits at the pale end, max |logit|'s does not.
  const std::string logit = svg::logit_heatmap(records, 1.0, 2.5, "m", 20);
  const std::string range = svg::logit_heatmap(records, 1.0, 2.5, "m", 20, &MetricsRecord::max_range, "max range");
  CHECK(well_formed(range));
  CHECK(range.find(">max range</text>") != std::string::npos);
  CHECK(logit.find(">max |logit|</text>") != std::string::npos);
  CHECK(range.find("fill=\"rgb(255,247,188)\"") != std::string::npos);
  CHECK(logit.find("fill=\"rgb(255,247,188)\"") == std::string::npos);

  // A log from before keel recorded max_range: the max |logit| half as before, a note for the other.
  std::string old;
  for (const auto& r : records) {
    MetricsRecord copy = r;
    copy.max_range.clear();
    old += to_json_line(copy) + "\n";
  }
  std::filesystem::create_directories(dir / "old");
  keel::test::write_text(dir / "old" / "metrics.jsonl", old);
  const auto out = dir / "report.html";
  write_report({(dir / "old").string()}, out.string(), "old");
  const std::string html = read_text(out);
  CHECK(well_formed(html.substr(html.find("<html"))));
  CHECK(html.find("No run logged max range") != std::string::npos);
  CHECK(count(html, "Layer 0: max |logit|<") == 1);
  CHECK(summarize(dir / "old").max_range != summarize(dir / "old").max_range);  // NaN: nothing logged
}
