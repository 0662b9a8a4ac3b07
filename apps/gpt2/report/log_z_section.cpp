#include "apps/gpt2/report/log_z_section.h"

#include <cmath>

#include "apps/gpt2/report/svg_chart.h"

namespace keel::app {

namespace {

// A run's series of one log Z field over its train records; a record without it is left out.
svg::Series series_of(const SignalRun& r, double MetricsRecord::*field) {
  svg::Series se{r.name, r.color, {}, {}};
  for (const auto& rec : *r.records)
    if (rec.kind == RecordKind::Train && !std::isnan(rec.*field))
      se.x.push_back(static_cast<double>(rec.step)), se.y.push_back(rec.*field);
  return se;
}

}  // namespace

std::string log_z_section(const std::vector<SignalRun>& runs) {
  std::string h = "<h2>Output softmax: log Z</h2>\n";
  std::vector<svg::Series> mean, top;
  bool any = false;
  for (const auto& r : runs) {
    mean.push_back(series_of(r, &MetricsRecord::log_z_mean));
    top.push_back(series_of(r, &MetricsRecord::log_z_max));
    any = any || !mean.back().x.empty();
  }
  if (!any) return h + "<p>No run logged log Z (logs written before keel recorded it have none).</p>\n";
  h += "<p>log Z is the log of the output softmax's normaliser, log &Sigma; exp(logit), over the vocabulary: "
       "the loss's log-sum-exp. At initialisation it is near ln V. The softmax ignores a shift of every logit, "
       "so the logits can drift together while the loss stays put; a log Z far from 0 (the paper: very "
       "negative, late in training) is that drift, and <code>--z-loss</code> pulls it back.</p>\n"
       "<div class=\"grid\">";
  h += svg::line_chart(mean, svg::projected({"Mean log Z per step", "step", "log Z", svg::Scale::Linear, 560, 340}));
  h += svg::line_chart(top, svg::projected({"Max |log Z| per step", "step", "max |log Z|", svg::Scale::Auto, 560, 340}));
  return h + "</div>\n";
}

}  // namespace keel::app
