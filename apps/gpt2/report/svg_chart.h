// Inline SVG line charts for the HTML run report: no JavaScript, no external fonts or styles
// (and no xmlns: HTML5 does not need it, and a report must not contain any URL),
// so a report is one file that opens anywhere (a laptop, a CI artifact, an email attachment).
#pragma once

#include <cstddef>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

namespace keel::app::svg {

enum class Scale { Linear, Log, Auto };  // Auto: log when the data spans more than 100x

struct Series {
  std::string label;
  std::string color;
  std::vector<double> x, y;  // a non-finite y is a gap in the line
  double opacity = 1.0;
  double stroke_width = 1.8;
  bool in_legend = true;
  // Draw a marker where y turns non-finite after finite points: where the run diverged.
  bool mark_divergence = true;
  // x values (steps) to flag with a triangle on the line: e.g. where the trainer logged a loss spike.
  std::vector<double> marks = {};
  std::string mark_what = "loss spike at step";  // a mark's tooltip: LABEL: MARK_WHAT X
};

struct ChartOptions {
  std::string title, x_label, y_label;
  Scale y_scale = Scale::Auto;
  int width = 560, height = 330;
  // When finite and inside the data's range: the top of the y axis, lines above it clipped.
  // Lets a loss chart show the end of training instead of the first steps' steep drop.
  double y_max = std::numeric_limits<double>::quiet_NaN();
  bool integer_x = true;  // x is a step count: no ticks between whole numbers
  bool log_x = false;     // x on a log scale (x > 0), e.g. a sweep over sequence lengths that double
  std::vector<double> x_ticks = {};  // when not empty: the x ticks (e.g. a sweep's values), else chosen
  double font_size = 11;  // labels and ticks; the title is 2px larger (14+ reads on a projector)
};

// The report's chart size: 14px text, so charts read when projected in a classroom, and a little
// larger (two still fit side by side in the page's 1180px).
ChartOptions projected(ChartOptions o);

// An <svg> element: axes with ticks and labels, a legend, one polyline per run of finite
// points. Long series are decimated to a min/max envelope so spikes stay visible.
std::string line_chart(const std::vector<Series>& series, const ChartOptions& options);

// An HTML <table> heatmap: one row per row of `values` (labelled row_label + index), one column
// per column (col_label + index), each cell showing its value on a colour ramp from lo to hi
// (log-spaced when hi / lo > 100). Non-finite cells are grey.
std::string heatmap_table(const std::vector<std::vector<double>>& values, double lo, double hi,
                          const std::string& row_label, const std::string& col_label);

// Centred moving average over `window` points, skipping non-finite values inside the window;
// a non-finite point stays non-finite so gaps and divergence survive the smoothing.
std::vector<double> moving_average(const std::vector<double>& y, size_t window);

// The i-th of a set of distinguishable colours (Tableau 10), cycling.
std::string palette_color(size_t i);

// Escapes &, <, >, " and ' for HTML / SVG text and attributes.
std::string escape(std::string_view text);

// A short human number: 3 significant digits, with k / M / G for large magnitudes.
std::string short_number(double v);

}  // namespace keel::app::svg
