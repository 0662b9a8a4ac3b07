#include "apps/gpt2/report/svg_chart.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>

namespace keel::app::svg {

namespace {

constexpr size_t kMaxPoints = 1200;  // beyond this a series is drawn as a min/max envelope
constexpr double kCharWidth = 6.6;   // rough width of an 11px sans-serif glyph, for layout

struct Point { double x, y; };

// Ticks on a 1-2-5 grid covering [lo, hi] with about `target` intervals.
std::vector<double> nice_ticks(double lo, double hi, int target, double* step_out) {
  const double raw = (hi - lo) / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double norm = raw / mag;
  const double step = (norm < 1.5 ? 1 : norm < 3.5 ? 2 : norm < 7.5 ? 5 : 10) * mag;
  std::vector<double> ticks;
  for (double t = std::ceil(lo / step - 1e-9) * step; t <= hi + step * 1e-9; t += step)
    ticks.push_back(std::abs(t) < step * 1e-9 ? 0.0 : t);
  *step_out = step;
  return ticks;
}

std::string tick_label(double v, double step) {
  if (std::abs(v) >= 10000 || (step >= 1000 && v != 0)) return short_number(v);
  const int decimals = std::max(0, static_cast<int>(-std::floor(std::log10(step) + 1e-9)));
  return fmt::format("{:.{}f}", v, decimals);
}

// Keeps the first and last point and, per bucket, the minimum and maximum (in x order), so
// a 100k-step run draws quickly but a one-step spike still shows. Non-finite points in a
// bucket become one non-finite point, keeping the gap.
std::vector<Point> decimate(const std::vector<Point>& pts) {
  if (pts.size() <= kMaxPoints) return pts;
  const size_t buckets = kMaxPoints / 2;
  std::vector<Point> out;
  for (size_t b = 0; b < buckets; ++b) {
    const size_t a = pts.size() * b / buckets, e = pts.size() * (b + 1) / buckets;
    size_t lo = e, hi = e;
    bool gap = false;
    for (size_t i = a; i < e; ++i) {
      if (!std::isfinite(pts[i].y)) {
        gap = true;
        continue;
      }
      if (lo == e || pts[i].y < pts[lo].y) lo = i;
      if (hi == e || pts[i].y > pts[hi].y) hi = i;
    }
    if (lo != e) {
      out.push_back(pts[std::min(lo, hi)]);
      if (lo != hi) out.push_back(pts[std::max(lo, hi)]);
    }
    if (gap) out.push_back({pts[e - 1].x, std::numeric_limits<double>::quiet_NaN()});
  }
  return out;
}

// The plot area of a line chart and its axes: each one's domain and ticks, and the maps from data
// to pixels. A log y axis runs from 10^y0 to 10^y1.
struct Plot {
  double left = 0, right = 0, top = 0, bottom = 0;
  bool log = false;
  double y0 = 0, y1 = 1, ystep = 1;
  std::vector<double> yticks;
  bool log_x = false;
  double xmin = 0, xmax = 1, xstep = 1, lx0 = 0, lx1 = 1;
  std::vector<double> xticks;
  double px(double x) const {
    const double t = log_x ? (std::log(x) - lx0) / (lx1 - lx0) : (x - xmin) / (xmax - xmin);
    return left + t * (right - left);
  }
  double py(double y) const {
    const double t = log ? (std::log10(y) - y0) / (y1 - y0) : (y - y0) / (y1 - y0);
    return bottom - t * (bottom - top);
  }
};

// The <svg> element's opening, a white background and the title.
std::string chart_title(const ChartOptions& opt, double em) {
  const double W = opt.width, H = opt.height;
  std::string s = fmt::format("<svg class=\"chart\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
                              "font-family=\"sans-serif\" font-size=\"{2}\">\n", opt.width, opt.height, opt.font_size);
  auto out = std::back_inserter(s);
  fmt::format_to(out, "<rect width=\"{}\" height=\"{}\" fill=\"#fff\"/>\n", W, H);
  fmt::format_to(out, "<text x=\"{}\" y=\"{:.0f}\" text-anchor=\"middle\" font-size=\"{}\" "
                 "font-weight=\"bold\">{}</text>\n", W / 2, 17 * em, opt.font_size + 2, escape(opt.title));
  return s;
}

// Legend rows under the title, wrapped to the chart width; returns the last row's baseline.
double legend(std::string& s, const std::vector<Series>& series, double left, double right, double em) {
  double lx = left, ly = 34 * em;
  for (const auto& se : series) {
    if (!se.in_legend) continue;
    const double w = 26 + kCharWidth * em * static_cast<double>(se.label.size()) + 14;
    if (lx + w > right && lx > left) lx = left, ly += 16 * em;
    fmt::format_to(std::back_inserter(s),
                   "<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"{3}\" "
                   "stroke-width=\"3\"/><text x=\"{4}\" y=\"{5}\">{6}</text>\n",
                   lx, ly - 4, lx + 20, se.color, lx + 25, ly, escape(se.label));
    lx += w;
  }
  return ly;
}

// Data ranges over finite points (positive ones only, for a log axis: pmin).
struct Extent { double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY, pmin = INFINITY; };

Extent extent(const std::vector<Series>& series) {
  Extent e;
  for (const auto& se : series)
    for (size_t i = 0; i < se.x.size() && i < se.y.size(); ++i) {
      if (!std::isfinite(se.x[i])) continue;
      // x spans non-finite points too: how long a run went on after diverging is visible.
      e.xmin = std::min(e.xmin, se.x[i]), e.xmax = std::max(e.xmax, se.x[i]);
      if (!std::isfinite(se.y[i])) continue;
      e.ymin = std::min(e.ymin, se.y[i]), e.ymax = std::max(e.ymax, se.y[i]);
      if (se.y[i] > 0) e.pmin = std::min(e.pmin, se.y[i]);
    }
  return e;
}

// The y axis's scale, domain and ticks, for data with finite points.
void fit_y_axis(Plot& p, const ChartOptions& opt, const Extent& e) {
  double ymin = e.ymin, ymax = e.ymax;
  if (std::isfinite(opt.y_max) && opt.y_max < ymax && opt.y_max > ymin) ymax = opt.y_max;
  p.log = opt.y_scale == Scale::Log ? std::isfinite(e.pmin)
          : opt.y_scale == Scale::Auto ? ymin > 0 && ymax / ymin > 100
                                       : false;
  if (p.log) {
    p.y0 = std::floor(std::log10(e.pmin)), p.y1 = std::ceil(std::log10(ymax));
    if (p.y1 <= p.y0) p.y1 = p.y0 + 1;
    for (double d = p.y0; d <= p.y1; ++d) {
      p.yticks.push_back(std::pow(10.0, d));
      if (p.y1 - p.y0 <= 2 && d < p.y1)
        for (double m : {2.0, 5.0}) p.yticks.push_back(m * std::pow(10.0, d));
    }
  } else {
    if (ymax - ymin < 1e-12 * std::max(1.0, std::abs(ymax))) ymin -= 1, ymax += 1;
    nice_ticks(ymin, ymax, 5, &p.ystep);
    // Extend to whole ticks so the top and bottom of the plot are labelled.
    p.y0 = std::floor(ymin / p.ystep + 1e-9) * p.ystep;
    p.y1 = std::ceil(ymax / p.ystep - 1e-9) * p.ystep;
    p.yticks = nice_ticks(p.y0, p.y1, static_cast<int>(std::lround((p.y1 - p.y0) / p.ystep)), &p.ystep);
  }
}

// The x axis's scale, domain and ticks (the given ones, or chosen for the plot's width).
void fit_x_axis(Plot& p, const ChartOptions& opt, const Extent& e) {
  double xmin = e.xmin, xmax = e.xmax;
  p.log_x = opt.log_x && xmin > 0;
  if (xmax <= xmin) p.log_x ? (xmin /= 2, xmax *= 2) : (xmin -= 1, xmax += 1);
  if (!p.log_x && xmin > 0 && xmin <= 0.05 * (xmax - xmin)) xmin = 0;  // steps from 1: start the axis at 0
  p.xticks = opt.x_ticks;
  if (p.xticks.empty()) {
    p.xticks = nice_ticks(xmin, xmax, std::max(2, static_cast<int>((p.right - p.left) / 90)), &p.xstep);
    if (opt.integer_x && p.xstep < 1)
      p.xticks = nice_ticks(xmin, xmax, std::max(1, static_cast<int>(xmax - xmin)), &p.xstep);
  }
  // A log axis gets 4% of margin at each end, so the first and last points are not on the frame.
  p.lx0 = p.log_x ? std::log(xmin) - 0.04 * std::log(xmax / xmin) : 0;
  p.lx1 = p.log_x ? std::log(xmax) + 0.04 * std::log(xmax / xmin) : 1;
  p.xmin = xmin, p.xmax = xmax;
}

// Grid lines, tick labels and the two axis labels.
void draw_axes(std::string& s, const Plot& p, const ChartOptions& opt, double em) {
  auto out = std::back_inserter(s);
  for (double t : p.yticks) {
    const double y = p.py(t);
    fmt::format_to(out,
                   "<line x1=\"{0}\" y1=\"{1:.1f}\" x2=\"{2}\" y2=\"{1:.1f}\" stroke=\"#e4e4e4\"/>"
                   "<text x=\"{3}\" y=\"{4:.1f}\" text-anchor=\"end\" fill=\"#444\">{5}</text>\n",
                   p.left, y, p.right, p.left - 5, y + 4, p.log ? short_number(t) : tick_label(t, p.ystep));
  }
  for (double t : p.xticks) {
    const double x = p.px(t);
    fmt::format_to(out,
                   "<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\" stroke=\"#e4e4e4\"/>"
                   "<line x1=\"{0:.1f}\" y1=\"{2}\" x2=\"{0:.1f}\" y2=\"{3}\" stroke=\"#888\"/>"
                   "<text x=\"{0:.1f}\" y=\"{4}\" text-anchor=\"middle\" fill=\"#444\">{5}</text>\n",
                   x, p.top, p.bottom, p.bottom + 4, p.bottom + 16 * em,
                   opt.x_ticks.empty() ? tick_label(t, p.xstep) : short_number(t));
  }
  fmt::format_to(out, "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n",
                 (p.left + p.right) / 2, double(opt.height) - 10, escape(opt.x_label));
  fmt::format_to(out, "<text transform=\"translate({:.0f} {}) rotate(-90)\" text-anchor=\"middle\">{}{}</text>\n",
                 14 * em, (p.top + p.bottom) / 2, escape(opt.y_label), p.log ? " (log scale)" : "");
}

// One series as a <path>, decimated, lifting the pen over non-finite points (and, on a log
// axis, non-positive ones).
void draw_line(std::string& s, const Series& se, const Plot& p) {
  std::vector<Point> pts;
  const size_t n = std::min(se.x.size(), se.y.size());
  for (size_t i = 0; i < n; ++i) {
    const bool drawable = std::isfinite(se.y[i]) && (!p.log || se.y[i] > 0);
    pts.push_back({se.x[i], drawable ? se.y[i] : std::numeric_limits<double>::quiet_NaN()});
  }
  std::string path;
  bool pen_down = false;
  for (const auto& q : decimate(pts)) {
    if (!std::isfinite(q.y)) {
      pen_down = false;
      continue;
    }
    fmt::format_to(std::back_inserter(path), "{}{:.1f},{:.1f}", pen_down ? " L" : " M", p.px(q.x), p.py(q.y));
    pen_down = true;
  }
  if (!path.empty())
    fmt::format_to(std::back_inserter(s), "<path d=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"{}\" "
                   "stroke-opacity=\"{}\" stroke-linejoin=\"round\"><title>{}</title></path>\n",
                   path.substr(1), se.color, se.stroke_width, se.opacity, escape(se.label));
}

// Marks: a triangle above the finite point nearest each marked x.
void draw_marks(std::string& markers, const Series& se, const Plot& p) {
  const size_t n = std::min(se.x.size(), se.y.size());
  for (double mx : se.marks) {
    size_t best = n;
    for (size_t i = 0; i < n; ++i)
      if (std::isfinite(se.y[i]) && (!p.log || se.y[i] > 0) &&
          (best == n || std::abs(se.x[i] - mx) < std::abs(se.x[best] - mx)))
        best = i;
    if (best == n) continue;
    fmt::format_to(std::back_inserter(markers),
                   "<path d=\"M{:.1f},{:.1f} l-5,-9 h10 z\" fill=\"{}\" stroke=\"#fff\"><title>{}: {} {}"
                   "</title></path>\n", p.px(se.x[best]), std::max(p.py(se.y[best]) - 3, p.top + 9), se.color,
                   escape(se.label), escape(se.mark_what), mx);
  }
}

// Divergence: the first non-finite y after a finite one; the line ends in a cross.
void draw_divergence(std::string& markers, const Series& se, const Plot& p) {
  const size_t n = std::min(se.x.size(), se.y.size());
  for (size_t i = 1, last = n; i < n; ++i) {
    if (std::isfinite(se.y[i])) {
      last = i;
      continue;
    }
    if (std::isfinite(se.y[i - 1])) last = i - 1;
    if (last == n) continue;
    const double cx = p.px(se.x[last]);
    const double cy = std::clamp(p.log && se.y[last] <= 0 ? p.bottom : p.py(se.y[last]), p.top + 20, p.bottom);
    const bool near_left = cx < p.left + 70;  // keep the label off the y axis
    fmt::format_to(std::back_inserter(markers),
                   "<g stroke=\"{0}\" stroke-width=\"2.5\"><title>{1}: non-finite at step {2}"
                   "</title><path d=\"M{3:.1f},{4:.1f} l10,10 m0,-10 l-10,10\"/></g>"
                   "<text x=\"{5:.1f}\" y=\"{6:.1f}\" fill=\"{0}\" font-weight=\"bold\" "
                   "text-anchor=\"{7}\">diverged</text>\n",
                   se.color, escape(se.label), se.x[i], cx - 5, cy - 5, near_left ? cx + 8 : cx - 8, cy - 8,
                   near_left ? "start" : "end");
    break;
  }
}

}  // namespace

ChartOptions projected(ChartOptions o) {
  o.font_size = 14;
  o.width += 20;
  o.height += 30;
  return o;
}

std::string palette_color(size_t i) {
  static const char* colors[] = {"#4e79a7", "#e15759", "#59a14f", "#f28e2b", "#b07aa1",
                                 "#76b7b2", "#edc948", "#ff9da7", "#9c755f", "#bab0ac"};
  return colors[i % std::size(colors)];
}

std::string escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string short_number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  const double a = std::abs(v);
  const auto trim = [](double x, const char* suffix) { return fmt::format("{:.3g}{}", x, suffix); };
  if (a >= 1e9) return trim(v / 1e9, "G");
  if (a >= 1e6) return trim(v / 1e6, "M");
  if (a >= 1e4) return trim(v / 1e3, "k");
  return fmt::format("{:.4g}", v);
}

std::string heatmap_table(const std::vector<std::vector<double>>& values, double lo, double hi,
                          const std::string& row_label, const std::string& col_label) {
  size_t cols = 0;
  for (const auto& row : values) cols = std::max(cols, row.size());
  const bool log = lo > 0 && hi / lo > 100;
  const auto position = [&](double v) {
    if (!(hi > lo)) return 1.0;
    const double t = log ? std::log(std::max(v, lo) / lo) / std::log(hi / lo) : (v - lo) / (hi - lo);
    return std::clamp(t, 0.0, 1.0);
  };
  // White -> orange -> dark brown: readable in print and for the common colour blindnesses.
  const auto ramp = [](double t) {
    static const double stops[3][3] = {{255, 245, 235}, {253, 141, 60}, {127, 39, 4}};
    const int i = t < 0.5 ? 0 : 1;
    const double u = t < 0.5 ? t * 2 : (t - 0.5) * 2;
    int c[3];
    for (int k = 0; k < 3; ++k)
      c[k] = static_cast<int>(std::lround(stops[i][k] + (stops[i + 1][k] - stops[i][k]) * u));
    return fmt::format("#{:02x}{:02x}{:02x}", c[0], c[1], c[2]);
  };
  std::string s = "<table class=\"heat\"><tr><th></th>";
  auto out = std::back_inserter(s);
  for (size_t c = 0; c < cols; ++c) fmt::format_to(out, "<th>{}{}</th>", escape(col_label), c);
  s += "</tr>\n";
  for (size_t r = 0; r < values.size(); ++r) {
    fmt::format_to(out, "<tr><th>{}{}</th>", escape(row_label), r);
    for (size_t c = 0; c < cols; ++c) {
      const double v = c < values[r].size() ? values[r][c] : std::numeric_limits<double>::quiet_NaN();
      if (!std::isfinite(v)) {
        fmt::format_to(out, "<td style=\"background:#ddd;color:#666\">{}</td>", short_number(v));
        continue;
      }
      const double t = position(v);
      fmt::format_to(out, "<td style=\"background:{};color:{}\">{}</td>", ramp(t),
                     t > 0.6 ? "#fff" : "#222",
                     std::abs(v) >= 1e4 ? short_number(v) : fmt::format("{:.1f}", v));
    }
    s += "</tr>\n";
  }
  return s + "</table>\n";
}

std::vector<double> moving_average(const std::vector<double>& y, size_t window) {
  if (window <= 1) return y;
  std::vector<double> out(y.size());
  for (size_t i = 0; i < y.size(); ++i) {
    out[i] = y[i];  // a non-finite point stays as it is
    if (!std::isfinite(y[i])) continue;
    double sum = 0;
    size_t n = 0;
    const size_t half = window / 2;
    for (size_t j = i > half ? i - half : 0; j <= std::min(y.size() - 1, i + half); ++j)
      if (std::isfinite(y[j])) sum += y[j], ++n;
    out[i] = sum / static_cast<double>(n);
  }
  return out;
}

std::string line_chart(const std::vector<Series>& series, const ChartOptions& options) {
  const double em = options.font_size / 11;  // layout below was drawn for 11px text
  Plot p;
  p.left = 64 * em, p.right = options.width - 18.0;
  // Each legend row past the first makes the chart taller, so that a sweep of many runs keeps its plot.
  std::string rows;
  const double legend_end = legend(rows, series, p.left, p.right, em);
  ChartOptions opt = options;
  opt.height += static_cast<int>(std::ceil(std::max(0.0, legend_end - 34 * em)));
  std::string s = chart_title(opt, em) + rows;
  p.top = legend_end + 14 * em, p.bottom = opt.height - 44 * em;
  const Extent e = extent(series);
  fmt::format_to(std::back_inserter(s), "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" "
                 "stroke=\"#888\"/>\n", p.left, p.top, p.right - p.left, p.bottom - p.top);
  if (!(e.ymin <= e.ymax))
    return s + fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" fill=\"#888\">no data</text>\n</svg>\n",
                           (p.left + p.right) / 2, (p.top + p.bottom) / 2);
  fit_y_axis(p, opt, e);
  fit_x_axis(p, opt, e);
  draw_axes(s, p, opt, em);
  // A nested <svg> is the plot's viewport: it clips lines above y_max without clipPath ids,
  // which would have to be unique across every chart of the page.
  fmt::format_to(std::back_inserter(s), "<svg x=\"{0}\" y=\"{1}\" width=\"{2}\" height=\"{3}\" "
                 "viewBox=\"{0} {1} {2} {3}\">\n", p.left, p.top, p.right - p.left, p.bottom - p.top);
  std::string markers;
  for (const auto& se : series) {
    draw_line(s, se, p);
    draw_marks(markers, se, p);
    if (se.mark_divergence) draw_divergence(markers, se, p);
  }
  s += "</svg>\n" + markers + "</svg>\n";
  return s;
}

}  // namespace keel::app::svg
