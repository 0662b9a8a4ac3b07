#include "apps/gpt2/report/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <tuple>

#include "apps/gpt2/report/finite_values.h"
#include "apps/gpt2/report/log_z_section.h"
#include "apps/gpt2/report/lr_section.h"
#include "apps/gpt2/report/profile_section.h"
#include "apps/gpt2/report/reading.h"
#include "apps/gpt2/report/signal_sections.h"
#include "apps/gpt2/report/sweep_section.h"
#include "apps/gpt2/report/svg_chart.h"
#include "core/error.h"
#include "core/io.h"

namespace keel::app {

namespace fs = std::filesystem;

namespace {

void flatten(const nlohmann::json& j, const std::string& prefix,
             std::vector<std::pair<std::string, std::string>>& out) {
  if (j.is_object() && !j.empty()) {
    for (const auto& [k, v] : j.items()) flatten(v, prefix.empty() ? k : prefix + "." + k, out);
    return;
  }
  out.emplace_back(prefix, j.is_string() ? j.get<std::string>() : j.dump());
}

// "-" for a value that is missing (or NaN: the status column says why), else fixed decimals.
std::string cell(double v, int decimals) {
  if (std::isnan(v)) return "-";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (std::abs(v) >= 1e5) return svg::short_number(v);  // an exploded logit: magnitude matters
  return fmt::format("{:.{}f}", v, decimals);
}

struct ReportRun {
  RunSummary summary;
  std::vector<MetricsRecord> records;
  std::string color;
  std::optional<RunProfile> profile;  // RUN_DIR/profile.json, when the run was profiled
};

constexpr const char* kStyle = R"(
body{font-family:sans-serif;max-width:1180px;margin:24px auto;padding:0 12px;color:#222;line-height:1.45}
h1{font-size:24px;margin-bottom:4px}h2{font-size:18px;margin-top:32px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:13px;margin:8px 0}
td,th{border:1px solid #ccc;padding:4px 8px}th{background:#f3f3f3}
td.num{text-align:right;font-variant-numeric:tabular-nums}
tr.diff td{background:#fff7d6}
.grid{display:flex;flex-wrap:wrap;gap:12px}.chart{border:1px solid #eee}
.swatch{display:inline-block;width:12px;height:12px;margin-right:6px;vertical-align:-1px}
table.heat td{text-align:right;min-width:36px;font-variant-numeric:tabular-nums}
details{margin:8px 0}summary{cursor:pointer;font-weight:bold}
.note{background:#f6f8fa;border-left:4px solid #4e79a7;padding:8px 14px}
)";

constexpr const char* kExplanation = R"(<div class="note"><p><b>What the max-logit signal
means.</b> Attention turns each query&ndash;key score (the <i>logit</i>, before the softmax) into
a weight. The charts track the largest logit in each layer, per step. In standard multi-head
self-attention (MHSA) nothing bounds these logits: on long sequences some heads learn to sharpen
their attention by growing queries and keys, the logits climb by orders of magnitude, the softmax
saturates, and gradients become erratic &mdash; first loss spikes, then (often) a non-finite loss
and a diverged run, marked with a cross on the charts. LS-attention keeps most heads local (a
short window) and so its logits stay bounded and its loss curve smooth. The baselines show the
usual fixes: QK-norm normalizes queries and keys, soft-capping squashes logits with a tanh.
Compare the curves' <i>shape</i> (bounded or climbing) as much as their final values.</p>
<p>A softmax ignores a constant added to a whole row of logits, but max |logit| does not: it also
grows when a row merely shifts. The <b>max range</b> (the largest max minus min of one row's logits)
ignores such shifts and grows only when a head really sharpens; the switch above the attention
charts shows either statistic.</p></div>
)";

std::string num_cell(double v, int decimals) {
  return "<td class=\"num\">" + cell(v, decimals) + "</td>";
}

std::string summary_table(const std::vector<ReportRun>& runs) {
  std::string s = "<table><tr><th>run</th><th>n/d</th><th>steps</th><th>final train loss</th><th>val ppl</th>"
                  "<th>best val ppl (step)</th><th>max logit</th><th>max range</th><th>tokens/s (median)</th>"
                  "<th>status</th></tr>\n";
  for (const auto& r : runs) {
    const auto& m = r.summary;
    s += fmt::format("<tr><td><span class=\"swatch\" style=\"background:{}\"></span>{}</td>"
                     "<td class=\"num\">{}</td><td class=\"num\">{}</td>{}{}<td class=\"num\">{}</td>{}{}"
                     "<td class=\"num\">{}</td><td{}>{}</td></tr>\n",
                     r.color, svg::escape(m.name), n_over_d_cell(m), m.steps, num_cell(m.final_train_loss, 4),
                     num_cell(m.final_val_ppl, 2),
                     m.best_val_step < 0 ? "-" : fmt::format("{} ({})", cell(m.best_val_ppl, 2), m.best_val_step),
                     num_cell(m.max_logit, 1), num_cell(m.max_range, 1),
                     std::isnan(m.median_tokens_per_s) ? "-" : svg::short_number(m.median_tokens_per_s),
                     m.diverged ? " style=\"color:#c00;font-weight:bold\"" : "", svg::escape(m.status()));
  }
  return s + "</table>\n";
}

// Keys as rows, runs as columns; rows where the runs differ are highlighted, since those are
// the experiment's variables.
std::string config_table(const std::vector<ReportRun>& runs) {
  std::vector<std::string> keys;
  std::set<std::string> seen;
  for (const auto& r : runs)
    for (const auto& [k, v] : r.summary.config)
      if (seen.insert(k).second) keys.push_back(k);
  std::string s = "<details><summary>Configuration (rows that differ are highlighted)</summary>";
  if (keys.empty()) return s + "<p>No config.json in any run.</p></details>\n";
  s += "<table><tr><th>key</th>";
  for (const auto& r : runs) s += "<th>" + svg::escape(r.summary.name) + "</th>";
  s += "</tr>\n";
  for (const auto& k : keys) {
    std::vector<std::string> vals;
    for (const auto& r : runs) {
      auto it = std::find_if(r.summary.config.begin(), r.summary.config.end(),
                             [&](const auto& kv) { return kv.first == k; });
      vals.push_back(it == r.summary.config.end() ? "" : it->second);
    }
    const bool differ = std::adjacent_find(vals.begin(), vals.end(), std::not_equal_to<>()) != vals.end();
    s += fmt::format("<tr{}><td>{}</td>", differ ? " class=\"diff\"" : "", svg::escape(k));
    for (const auto& v : vals) s += "<td>" + svg::escape(v) + "</td>";
    s += "</tr>\n";
  }
  return s + "</table></details>\n";
}

std::string events_table(const std::vector<ReportRun>& runs) {
  constexpr size_t kMaxRows = 300;
  std::string rows;
  size_t n = 0, total = 0;
  for (const auto& r : runs)
    for (const auto& e : r.records) {
      if (e.kind != RecordKind::Event) continue;
      if (++total > kMaxRows) continue;
      ++n;
      rows += fmt::format("<tr><td>{}</td><td class=\"num\">{}</td><td>{}</td><td>{}</td></tr>\n",
                          svg::escape(r.summary.name), e.step, svg::escape(e.event),
                          svg::escape(e.message));
    }
  if (!total) return "";
  std::string s = fmt::format("<details><summary>Events ({})</summary><table><tr><th>run</th>"
                              "<th>step</th><th>event</th><th>message</th></tr>\n", total);
  s += rows + "</table>";
  if (total > n) s += fmt::format("<p>... and {} more (see metrics.jsonl)</p>", total - n);
  return s + "</details>\n";
}

// A series per run from the records of one kind, y = f(record); records where f is nullopt are
// left out (not a gap: e.g. a step that did not measure logits).
template <class F>
std::vector<svg::Series> series_of(const std::vector<ReportRun>& runs, RecordKind kind, F f) {
  std::vector<svg::Series> out;
  for (const auto& r : runs) {
    svg::Series se{r.summary.name, r.color, {}, {}};
    for (const auto& rec : r.records)
      if (rec.kind == kind)
        if (std::optional<double> y = f(rec)) se.x.push_back(static_cast<double>(rec.step)), se.y.push_back(*y);
    out.push_back(std::move(se));
  }
  return out;
}

std::string render_html(const std::vector<ReportRun>& runs, const std::string& title, const std::string& sweep_key) {
  std::string h = fmt::format("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                              "<title>{0}</title><style>{1}{2}{3}</style></head><body>\n<h1>{0}</h1>\n",
                              svg::escape(title), kStyle, kSignalStyle, kProfileStyle);
  std::vector<ReadingRun> reading_runs;  // the first paragraph: n/d, and what to look at
  for (const auto& r : runs) reading_runs.push_back({&r.summary, &r.records});
  h += reading_html(reading(reading_runs));
  h += fmt::format("<p>{} run{}: {}</p>\n", runs.size(), runs.size() == 1 ? "" : "s",
                   [&] {
                     std::string dirs;
                     for (const auto& r : runs)
                       dirs += (dirs.empty() ? "" : ", ") + svg::escape(r.summary.dir.string());
                     return dirs;
                   }());
  std::vector<RunSummary> summaries;
  std::vector<std::string> colors;
  for (const auto& r : runs) summaries.push_back(r.summary), colors.push_back(r.color);
  if (sweep_key == "lr") h += lr_section(summaries);  // the paper's figure opens a learning-rate sweep
  h += "<h2>Summary</h2>\n" + summary_table(runs) + config_table(runs) + events_table(runs);
  if (!sweep_key.empty() && sweep_key != "lr") h += sweep_section(summaries, colors, sweep_key);
  h += kExplanation;

  // Loss: the raw curve faint, a moving average on top so runs can be told apart. The first
  // 10% of steps (the steep initial drop) may run off the top so the rest is legible.
  std::vector<svg::Series> loss;
  double late_max = -INFINITY;
  size_t run_index = 0;
  for (auto& se : series_of(runs, RecordKind::Train, [](const MetricsRecord& r) { return r.loss; })) {
    svg::Series smooth = se;
    for (const auto& rec : runs[run_index++].records)
      if (rec.kind == RecordKind::Event && rec.event == "spike") smooth.marks.push_back(static_cast<double>(rec.step));
    smooth.y = svg::moving_average(se.y, std::clamp<size_t>(se.y.size() / 50, 1, 100));
    for (size_t i = smooth.y.size() / 10; i < smooth.y.size(); ++i)
      if (std::isfinite(smooth.y[i])) late_max = std::max(late_max, smooth.y[i]);
    se.opacity = 0.18, se.in_legend = false, se.mark_divergence = false, se.stroke_width = 1;
    loss.push_back(std::move(se));
    loss.push_back(std::move(smooth));
  }
  svg::ChartOptions loss_opt = svg::projected({"Training loss (faint: raw, solid: average, \u25bc: spike)", "step",
                                       "loss", svg::Scale::Linear, 560, 340});
  loss_opt.y_max = late_max * 1.15;
  h += "<h2>Loss</h2>\n<div class=\"grid\">";
  h += svg::line_chart(loss, loss_opt);
  h += svg::line_chart(
      series_of(runs, RecordKind::Val, [](const MetricsRecord& r) { return r.val_ppl; }),
      svg::projected({"Validation perplexity", "step", "perplexity", svg::Scale::Log, 560, 340}));
  auto lr_series = series_of(runs, RecordKind::Train, [](const MetricsRecord& r) { return r.lr; });
  for (auto& se : lr_series) se.mark_divergence = false;
  svg::ChartOptions lr_opt =
      svg::projected({"Learning-rate schedule", "step", "learning rate", svg::Scale::Linear, 560, 340});
  h += svg::line_chart(lr_series, lr_opt);
  h += "</div>\n";

  std::vector<SignalRun> signal_runs;
  for (const auto& r : runs) signal_runs.push_back({r.summary.name, r.color, &r.records});
  h += log_z_section(signal_runs) + signal_sections(signal_runs);
  std::vector<ProfiledRun> profiled;
  for (const auto& r : runs) profiled.push_back({r.summary.name, r.color, r.profile ? &*r.profile : nullptr});
  h += profile_section(profiled);
  return h + "</body></html>\n";
}

}  // namespace

std::string RunSummary::status() const {
  std::string s = diverged ? fmt::format("diverged at step {}", diverged_step) : "ok";
  if (spikes) s += fmt::format(", {} spike{}", spikes, spikes == 1 ? "" : "s");
  if (skipped_steps) s += fmt::format(", {} skipped", skipped_steps);
  if (nonfinite_logit_step >= 0) s += fmt::format(", max logit non-finite from step {}", nonfinite_logit_step);
  return s;
}

RunSummary summarize(const std::vector<MetricsRecord>& records) {
  RunSummary s;
  std::vector<const MetricsRecord*> train;
  std::vector<double> tps;
  const auto diverge_at = [&](int64_t step) {
    if (!s.diverged || step < s.diverged_step) s.diverged_step = step;
    s.diverged = true;
  };
  for (const auto& r : records) {
    for (const auto& layer : r.max_logit) {
      for (double v : layer)
        if (!std::isfinite(v) && (s.nonfinite_logit_step < 0 || r.step < s.nonfinite_logit_step))
          s.nonfinite_logit_step = r.step;
      const double m = max_finite(layer);
      if (!(m <= s.max_logit)) s.max_logit = std::isnan(s.max_logit) ? m : std::max(s.max_logit, m);
    }
    for (const auto& layer : r.max_range) {
      const double m = max_finite(layer);
      if (!(m <= s.max_range)) s.max_range = std::isnan(s.max_range) ? m : std::max(s.max_range, m);
    }
    switch (r.kind) {
      case RecordKind::Train:
        train.push_back(&r);
        s.steps = std::max(s.steps, r.step);
        if (std::isfinite(r.tokens_per_s) && r.tokens_per_s > 0) tps.push_back(r.tokens_per_s);
        if (std::isfinite(r.log_z_max) && !(r.log_z_max <= s.max_log_z)) s.max_log_z = r.log_z_max;
        if (std::isfinite(r.log_z_mean)) s.final_log_z = r.log_z_mean;
        if (r.skipped) ++s.skipped_steps;
        else if (!std::isfinite(r.loss)) diverge_at(r.step);
        if (any_finite(r.max_logit)) {
          s.final_max_logit = r.max_logit;
          s.final_max_logit_per_layer.clear();
          for (const auto& layer : r.max_logit) s.final_max_logit_per_layer.push_back(max_finite(layer));
        }
        break;
      case RecordKind::Val:
        s.final_val_ppl = r.val_ppl, s.final_val_loss = r.val_loss;
        if (std::isfinite(r.val_ppl) && !(r.val_ppl >= s.best_val_ppl))
          s.best_val_ppl = r.val_ppl, s.best_val_step = r.step;
        if (!std::isfinite(r.val_loss)) diverge_at(r.step);
        break;
      case RecordKind::Event:
        if (r.event == "spike") ++s.spikes;
        if (r.event == "nonfinite") diverge_at(r.step);
        break;
    }
  }
  if (!train.empty()) {
    // The mean of the last 10% smooths batch noise; a NaN in it stays NaN on purpose.
    const size_t k = std::max<size_t>(1, (train.size() + 9) / 10);
    double sum = 0;
    for (size_t i = train.size() - k; i < train.size(); ++i) sum += train[i]->loss;
    s.final_train_loss = sum / static_cast<double>(k);
    const auto late = [&](std::vector<std::vector<double>> MetricsRecord::*field) {
      double total = 0;
      for (size_t i = train.size() - k; i < train.size(); ++i) {
        const auto& m = train[i]->*field;
        if (m.empty()) return RunSummary::kNaN;
        double top = 0;
        for (const auto& row : m)
          for (double v : row) top = std::isnan(v) || std::isnan(top) ? RunSummary::kNaN : std::max(top, v);
        total += top;
      }
      return total / static_cast<double>(k);
    };
    s.late_max_logit = late(&MetricsRecord::max_logit);
    s.late_max_range = late(&MetricsRecord::max_range);
  }
  if (!tps.empty()) {
    std::sort(tps.begin(), tps.end());
    const size_t n = tps.size();
    s.median_tokens_per_s = n % 2 ? tps[n / 2] : (tps[n / 2 - 1] + tps[n / 2]) / 2;
  }
  return s;
}

std::pair<RunSummary, std::vector<MetricsRecord>> load_run(const fs::path& run_dir) {
  std::error_code ec;
  if (!fs::is_directory(run_dir, ec))
    throw IoError("summarize", fmt::format("{}: run directory not found", run_dir.string()),
                  "pass the directory a `gpt2 train` run wrote (it holds metrics.jsonl)");
  std::vector<MetricsRecord> records = read_metrics(metrics_path(run_dir));
  RunSummary s = summarize(records);
  s.dir = run_dir;
  const fs::path norm = run_dir.lexically_normal();
  s.name = (norm.has_filename() ? norm.filename() : norm.parent_path().filename()).string();
  const fs::path cfg = run_dir / "config.json";
  if (fs::exists(cfg, ec)) {
    const nlohmann::json j = io::read_json_file(cfg, "summarize");
    if (!j.is_object())
      throw IoError("summarize", fmt::format("{}: expected a JSON object", cfg.string()));
    if (auto it = j.find("name"); it != j.end() && it->is_string() && !it->get<std::string>().empty())
      s.name = it->get<std::string>();
    flatten(j, "", s.config);
  }
  return {std::move(s), std::move(records)};
}

RunSummary summarize(const fs::path& run_dir) { return load_run(run_dir).first; }

std::string compare_table(const std::vector<RunSummary>& runs) {
  const std::vector<std::string> head = {"run",      "n/d",       "steps",     "train loss", "val ppl",
                                         "best ppl", "max logit", "max range", "tokens/s",   "status"};
  std::vector<std::vector<std::string>> rows;
  for (const auto& r : runs)
    rows.push_back({r.name, n_over_d_cell(r), std::to_string(r.steps), cell(r.final_train_loss, 4),
                    cell(r.final_val_ppl, 2), cell(r.best_val_ppl, 2), cell(r.max_logit, 1), cell(r.max_range, 1),
                    std::isnan(r.median_tokens_per_s) ? "-" : svg::short_number(r.median_tokens_per_s),
                    r.status()});
  std::vector<size_t> width(head.size());
  for (size_t c = 0; c < head.size(); ++c) {
    width[c] = head[c].size();
    for (const auto& row : rows) width[c] = std::max(width[c], row[c].size());
  }
  // Text columns (run, status) left-aligned, numbers right-aligned so digits line up.
  const auto line = [&](const std::vector<std::string>& row) {
    std::string out;
    for (size_t c = 0; c < row.size(); ++c) {
      const bool text = c == 0 || c + 1 == row.size();
      if (c) out += "  ";
      out += text ? fmt::format("{:<{}}", row[c], width[c]) : fmt::format("{:>{}}", row[c], width[c]);
    }
    while (!out.empty() && out.back() == ' ') out.pop_back();
    return out + "\n";
  };
  std::string out = line(head);
  size_t total = 0;
  for (size_t w : width) total += w;
  out += std::string(total + 2 * (width.size() - 1), '-') + "\n";
  for (const auto& row : rows) out += line(row);
  return out;
}

void write_report(const std::vector<std::string>& run_dirs, const std::string& out_html,
                  const std::string& title, const std::string& sweep_key) {
  if (run_dirs.empty())
    throw ValueError("write_report", "no run directories given", "pass at least one run");
  std::vector<ReportRun> runs;
  std::map<std::string, int> name_count;
  for (const auto& dir : run_dirs) {
    ReportRun r;
    std::tie(r.summary, r.records) = load_run(dir);
    r.profile = read_profile(dir);
    r.color = svg::palette_color(runs.size());
    ++name_count[r.summary.name];
    runs.push_back(std::move(r));
  }
  // Two runs with the same label would share a legend entry; tell them apart by directory.
  for (auto& r : runs)
    if (name_count[r.summary.name] > 1)
      r.summary.name += " (" + r.summary.dir.lexically_normal().string() + ")";
  io::write_file_atomic(out_html, render_html(runs, title, sweep_key), "report");
}

}  // namespace keel::app
