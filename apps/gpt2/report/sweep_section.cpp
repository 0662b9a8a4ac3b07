#include "apps/gpt2/report/sweep_section.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "apps/gpt2/report/reading.h"
#include "apps/gpt2/report/svg_chart.h"

namespace keel::app {

namespace {

// The line a run belongs to: its attention variant.
std::string group_of(const RunSummary& run) { return config_value(run, "model.attention").value_or(run.name); }

std::string cell(double v, int decimals) {
  return std::isnan(v) ? "-" : std::abs(v) >= 1e5 ? svg::short_number(v) : fmt::format("{:.{}f}", v, decimals);
}

}  // namespace

std::optional<double> sweep_x(const RunSummary& run, const std::string& key) {
  return key == "seq_len" ? n_over_d(run) : config_number(run, "train." + key);
}

std::string sweep_axis_label(const std::string& key) {
  if (key == "seq_len") return "n/d (sequence length / head width)";
  std::string flag = "--" + key;
  std::replace(flag.begin(), flag.end(), '_', '-');
  return flag;
}

std::string sweep_section(const std::vector<RunSummary>& runs, const std::vector<std::string>& colors,
                          const std::string& key) {
  struct Point {
    double x;
    const RunSummary* run;
  };
  std::map<std::string, std::vector<Point>> lines;  // by variant
  std::map<std::string, std::string> line_color;
  std::set<double> xs;
  for (size_t i = 0; i < runs.size(); ++i)
    if (const auto x = sweep_x(runs[i], key)) {
      const std::string g = group_of(runs[i]);
      lines[g].push_back({*x, &runs[i]});
      line_color.emplace(g, colors[i]);
      xs.insert(*x);
    }
  const std::string axis = sweep_axis_label(key);
  std::string h = fmt::format("<h2>Sweep over {}</h2>\n", svg::escape(axis));
  if (lines.empty()) return h + "<p>No run records the swept value.</p>\n";
  h += "<p>One point per run, one line per attention variant. The signals are where training left "
       "them: the largest value over every layer and head, averaged over the last 10% of logged steps.</p>\n"
       "<div class=\"grid\">";
  const auto chart = [&](const std::string& title, const std::string& y_label, double RunSummary::*y,
                         svg::Scale scale) {
    std::vector<svg::Series> series;
    for (auto& [g, pts] : lines) {
      std::sort(pts.begin(), pts.end(), [](const Point& a, const Point& b) { return a.x < b.x; });
      svg::Series se{g, line_color[g], {}, {}};
      se.stroke_width = 2.5;
      for (const Point& p : pts) se.x.push_back(p.x), se.y.push_back(p.run->*y);
      series.push_back(std::move(se));
    }
    svg::ChartOptions o = svg::projected({title, axis, y_label, scale, 560, 340});
    o.integer_x = false;
    o.log_x = key == "seq_len";
    o.x_ticks.assign(xs.begin(), xs.end());
    return svg::line_chart(series, o);
  };
  h += chart("Validation perplexity", "perplexity", &RunSummary::final_val_ppl, svg::Scale::Auto);
  h += chart("Max logit range (late)", "max range", &RunSummary::late_max_range, svg::Scale::Linear);
  h += chart("Max |logit| (late)", "max |logit|", &RunSummary::late_max_logit, svg::Scale::Linear);
  h += "</div>\n";

  h += fmt::format("<table><tr><th>variant</th><th>{}</th><th>val ppl</th><th>max range (late)</th>"
                   "<th>max |logit| (late)</th><th>status</th></tr>\n",
                   svg::escape(axis));
  for (const auto& [g, pts] : lines)
    for (const Point& p : pts)
      h += fmt::format("<tr><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>"
                       "<td class=\"num\">{}</td><td>{}</td></tr>\n",
                       svg::escape(g), svg::short_number(p.x), cell(p.run->final_val_ppl, 2),
                       cell(p.run->late_max_range, 1), cell(p.run->late_max_logit, 1), svg::escape(p.run->status()));
  return h + "</table>\n";
}

}  // namespace keel::app
