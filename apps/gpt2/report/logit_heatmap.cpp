#include "apps/gpt2/report/logit_heatmap.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "apps/gpt2/report/svg_chart.h"

namespace keel::app::svg {

namespace {

// v in [lo, hi] on a log scale -> a colour from pale yellow (small) through orange to dark red.
std::string ramp(double v, double lo, double hi) {
  if (!std::isfinite(v)) return "#000";
  double t = hi > lo && lo > 0 ? (std::log(std::max(v, lo)) - std::log(lo)) / (std::log(hi) - std::log(lo)) : 0.5;
  t = std::clamp(t, 0.0, 1.0);
  // Three stops: (255,247,188) -> (254,153,41) -> (140,20,10).
  const double a[3][3] = {{255, 247, 188}, {254, 153, 41}, {140, 20, 10}};
  const int k = t < 0.5 ? 0 : 1;
  const double u = t < 0.5 ? t * 2 : t * 2 - 1;
  int rgb[3];
  for (int c = 0; c < 3; ++c) rgb[c] = static_cast<int>(std::lround(a[k][c] + u * (a[k + 1][c] - a[k][c])));
  return fmt::format("rgb({},{},{})", rgb[0], rgb[1], rgb[2]);
}

// What the heatmap shows of one run: the train records that carry the statistic, the steps of the
// loss spikes, and the rows: L layers of H heads.
struct HeatmapData {
  std::vector<const MetricsRecord*> train;
  std::vector<int64_t> spikes;
  size_t L = 0, H = 0;
};

HeatmapData collect(const std::vector<MetricsRecord>& records, StatField field) {
  HeatmapData d;
  for (const auto& r : records) {
    if (r.kind == RecordKind::Train && !(r.*field).empty()) {
      d.train.push_back(&r);
      d.L = std::max(d.L, (r.*field).size());
      for (const auto& row : r.*field) d.H = std::max(d.H, row.size());
    }
    if (r.kind == RecordKind::Event && r.event == "spike") d.spikes.push_back(r.step);
  }
  return d;
}

// cell[l * H + h][c]: the largest value of layer l's head h over the records in step bin c (of
// cols), -inf where no record fell in the bin. Bin c covers steps
// [first + c*span/cols, first + (c+1)*span/cols).
std::vector<std::vector<double>> bin_max(const HeatmapData& d, StatField field, size_t cols, int64_t first,
                                         double span) {
  std::vector<std::vector<double>> cell(d.L * d.H, std::vector<double>(cols, -INFINITY));
  for (const MetricsRecord* r : d.train) {
    const auto c = std::min(cols - 1, static_cast<size_t>(double(r->step - first) / span * double(cols)));
    const auto& stat = r->*field;
    for (size_t l = 0; l < stat.size(); ++l)
      for (size_t h = 0; h < stat[l].size(); ++h) {
        double& v = cell[l * d.H + h][c];
        const double x = stat[l][h];
        if (!std::isfinite(x)) v = NAN;  // a non-finite head marks its bin for good
        else if (!std::isnan(v)) v = std::max(v, x);
      }
  }
  return cell;
}

// The colour key at x = kx beside a plot from top to bottom: 20 swatches from hi (top) down to
// lo, both ends labelled, and `key` above it.
std::string colour_key(double lo, double hi, double kx, double top, double bottom, const std::string& key) {
  const double kh = std::max(bottom - top, 80.0);
  std::string s;
  for (int i = 0; i < 20; ++i) {
    const double t = 1 - (i + 0.5) / 20;
    const double v = lo > 0 && hi > lo ? std::exp(std::log(lo) + t * (std::log(hi) - std::log(lo))) : lo;
    s += fmt::format("<rect x=\"{}\" y=\"{:.1f}\" width=\"18\" height=\"{:.2f}\" fill=\"{}\"/>", kx, top + kh * i / 20, kh / 20 + 0.3, ramp(v, lo, hi));
  }
  s += fmt::format("\n<text x=\"{}\" y=\"{}\">{}</text><text x=\"{}\" y=\"{:.1f}\">{}</text>"
                   "<text x=\"{}\" y=\"{:.1f}\" font-size=\"12\">{}</text>\n",
                   kx + 22, top + 12, short_number(hi), kx + 22, top + kh, short_number(lo), kx - 4, top - 8,
                   escape(key));
  return s;
}

}  // namespace

std::string logit_heatmap(const std::vector<MetricsRecord>& records, double lo, double hi, const std::string& title,
                          size_t columns, StatField field, const std::string& key) {
  const HeatmapData data = collect(records, field);
  const auto& [train, spikes, L, H] = data;
  const double W = 760, left = 92, right = W - 110, top = 56, row_h = std::clamp(260.0 / double(std::max<size_t>(L * H, 1)), 7.0, 22.0);
  const double bottom = top + row_h * double(L * H), Htot = bottom + 62;
  std::string s = fmt::format(
      "<svg class=\"chart\" width=\"{0}\" height=\"{1:.0f}\" viewBox=\"0 0 {0} {1:.0f}\" font-family=\"sans-serif\" "
      "font-size=\"14\">\n<rect width=\"{0}\" height=\"{1:.0f}\" fill=\"#fff\"/>\n<text x=\"{2}\" y=\"22\" "
      "text-anchor=\"middle\" font-size=\"17\" font-weight=\"bold\">{3}</text>\n",
      W, Htot, W / 2, escape(title));
  if (train.empty()) return s + fmt::format("<text x=\"{}\" y=\"{}\" fill=\"#888\">no attention logits logged</text>\n</svg>\n", left, top + 20);

  const int64_t first = train.front()->step, last = train.back()->step;
  const size_t cols = std::min(columns, train.size());
  const double span = double(last - first + 1), cw = (right - left) / double(cols);
  const std::vector<std::vector<double>> cell = bin_max(data, field, cols, first, span);
  for (size_t row = 0; row < L * H; ++row) {
    for (size_t c = 0; c < cols; ++c) {
      const double v = cell[row][c];
      if (v == -INFINITY) continue;  // no record fell in this bin
      s += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.2f}\" height=\"{:.1f}\" fill=\"{}\"/>", left + cw * double(c),
                       top + row_h * double(row), cw + 0.3, row_h, ramp(v, lo, hi));
    }
    s += "\n";
  }
  // Layer labels and separators.
  for (size_t l = 0; l < L; ++l) {
    const double y0 = top + row_h * double(l * H);
    s += fmt::format("<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">layer {}</text>", left - 8,
                     y0 + row_h * double(H) / 2 + 5, l);
    if (l) s += fmt::format("<line x1=\"{}\" x2=\"{}\" y1=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#fff\" stroke-width=\"2\"/>", left, right, y0, y0);
    s += "\n";
  }
  s += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{:.1f}\" fill=\"none\" stroke=\"#888\"/>\n", left, top,
                   right - left, bottom - top);
  // Step axis: first, middle, last.
  for (double f : {0.0, 0.5, 1.0})
    s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\" fill=\"#444\">{}</text>", left + f * (right - left),
                     bottom + 18, first + static_cast<int64_t>(std::lround(f * double(last - first))));
  s += fmt::format("\n<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">step (rows: heads 0..{} of each layer)</text>\n",
                   (left + right) / 2, bottom + 44, H - 1);
  // Loss spikes: a marker above the column of each.
  for (int64_t st : spikes) {
    const double x = left + double(st - first) / span * (right - left);
    s += fmt::format("<path d=\"M{:.1f},{:.1f} l-6,-10 h12 z\" fill=\"#1f5fbf\"><title>loss spike at step {}</title></path>", x, top - 2, st);
  }
  if (!spikes.empty())
    s += fmt::format("<text x=\"{}\" y=\"{}\" fill=\"#1f5fbf\" font-size=\"13\">&#9660; loss spike</text>\n", left, top - 16);
  s += colour_key(lo, hi, right + 16, top, bottom, key);
  return s + "</svg>\n";
}

}  // namespace keel::app::svg
