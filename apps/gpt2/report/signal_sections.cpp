#include "apps/gpt2/report/signal_sections.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>

#include "apps/gpt2/report/finite_values.h"
#include "apps/gpt2/report/logit_heatmap.h"
#include "apps/gpt2/report/svg_chart.h"

namespace keel::app {

namespace {

struct Statistic {
  const char* id;     // "logit" | "range": the toggle's input id and the block's class
  const char* label;  // on the toggle and the colour key
  const char* noun;   // in headings
  const char* about;  // one sentence under the first heading
  svg::StatField field;
};

constexpr Statistic kStatistics[] = {
    {"logit", "max |logit|", "max |logit|",
     "The largest |pre-softmax logit| over the layer's heads at each training step.", &MetricsRecord::max_logit},
    {"range", "max range", "max logit range",
     "The largest range (max minus min) of one attention row's logits over the layer's heads at each step. "
     "Adding a constant to a whole row changes max |logit| but not the attention; the range ignores such "
     "a shift, so it grows only when a head really sharpens.",
     &MetricsRecord::max_range},
};

// The statistic of the last train record that has a finite value: a diverged run shows its last
// healthy step.
std::vector<std::vector<double>> final_values(const std::vector<MetricsRecord>& records, svg::StatField f) {
  for (auto it = records.rbegin(); it != records.rend(); ++it)
    if (it->kind == RecordKind::Train && any_finite((*it).*f)) return (*it).*f;
  return {};
}

// A run's per-layer series of one statistic: the max over the layer's heads at each train step.
svg::Series layer_series(const SignalRun& r, svg::StatField f, size_t l) {
  svg::Series se{r.name, r.color, {}, {}};
  for (const auto& rec : *r.records) {
    if (rec.kind != RecordKind::Train || l >= (rec.*f).size()) continue;
    // One non-finite head makes the layer's max undefined: a gap (and a divergence marker), not
    // the max of the heads that survived.
    const auto& heads = (rec.*f)[l];
    const bool broken = std::any_of(heads.begin(), heads.end(), [](double v) { return !std::isfinite(v); });
    se.x.push_back(static_cast<double>(rec.step));
    se.y.push_back(broken ? std::numeric_limits<double>::quiet_NaN() : max_finite(heads));
  }
  return se;
}

std::string sections_of(const std::vector<SignalRun>& runs, const Statistic& st) {
  const svg::StatField f = st.field;
  size_t layers = 0;
  for (const auto& r : runs)
    for (const auto& rec : *r.records) layers = std::max(layers, (rec.*f).size());
  std::string noun = st.noun;
  noun[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(noun[0])));
  std::string h = fmt::format("<h2>{} per layer</h2>\n<p>{}</p>\n", svg::escape(noun), svg::escape(st.about));
  if (!layers)
    return h + fmt::format("<p>No run logged {} (logs written before keel recorded it have none).</p>\n",
                           svg::escape(st.label));
  h += "<div class=\"grid\">";
  for (size_t l = 0; l < layers; ++l) {
    std::vector<svg::Series> series;
    for (const auto& r : runs) series.push_back(layer_series(r, f, l));
    h += svg::line_chart(series, svg::projected({fmt::format("Layer {}: {}", l, st.label), "step", st.label,
                                                 svg::Scale::Auto, 560, 300}));
  }
  h += "</div>\n";

  // The final step's table and the heatmaps over training: one colour scale for every run each,
  // so runs compare directly.
  std::vector<std::vector<std::vector<double>>> finals;
  double lo = INFINITY, hi = -INFINITY, step_lo = INFINITY, step_hi = -INFINITY;
  for (const auto& r : runs) {
    finals.push_back(final_values(*r.records, f));
    for (const auto& row : finals.back())
      for (double v : row)
        if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
    for (const auto& rec : *r.records)
      for (const auto& row : rec.*f)
        for (double v : row)
          if (std::isfinite(v) && v > 0) step_lo = std::min(step_lo, v), step_hi = std::max(step_hi, v);
  }
  h += fmt::format("<h2>Per-head {} at the final step</h2>\n<p>Rows are layers, columns heads; darker is "
                   "larger (one colour scale for all runs). A diverged run shows its last finite step.</p>\n"
                   "<div class=\"grid\">",
                   svg::escape(st.noun));
  for (size_t i = 0; i < runs.size(); ++i) {
    h += fmt::format("<div><b><span class=\"swatch\" style=\"background:{}\"></span>{}</b>", runs[i].color,
                     svg::escape(runs[i].name));
    h += finals[i].empty() ? fmt::format("<p>no {} logged</p>", svg::escape(st.label))
                           : svg::heatmap_table(finals[i], lo, hi, "layer ", "h");
    h += "</div>";
  }
  h += fmt::format("</div>\n<h2>{} per head over training</h2>\n<p>Rows are heads (grouped by layer), columns "
                   "steps; darker is larger, black is non-finite, one log colour scale for all runs. Triangles "
                   "mark logged loss spikes.</p>\n<div class=\"grid\">",
                   svg::escape(noun));
  for (const auto& r : runs) h += svg::logit_heatmap(*r.records, step_lo, step_hi, r.name, 120, f, st.label);
  return h + "</div>\n";
}

}  // namespace

const char* const kSignalStyle =
    ".signals>input{margin:12px 4px 0 12px}.signals>label{font-weight:bold;cursor:pointer}"
    ".signal-range{display:none}#signal-range:checked~.signal-range{display:block}"
    "#signal-range:checked~.signal-logit{display:none}";

std::string signal_sections(const std::vector<SignalRun>& runs) {
  std::string h = "<div class=\"signals\"><b>Attention signal:</b>";
  for (const Statistic& st : kStatistics)
    h += fmt::format("<input type=\"radio\" name=\"signal\" id=\"signal-{0}\"{1}/><label for=\"signal-{0}\">{2}"
                     "</label>",
                     st.id, &st == &kStatistics[0] ? " checked" : "", svg::escape(st.label));
  h += "\n";
  for (const Statistic& st : kStatistics)
    h += fmt::format("<div class=\"signal-{}\">\n{}</div>\n", st.id, sections_of(runs, st));
  return h + "</div>\n";
}

}  // namespace keel::app
