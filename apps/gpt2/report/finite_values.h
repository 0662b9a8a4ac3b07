// The report's reading of logged statistics in which NaN or inf marks a diverged head: the
// largest finite value, and whether there is one. Shared by the summary table (report.cpp) and
// the signal charts (signal_sections.cpp).
#pragma once

#include <cmath>
#include <limits>
#include <vector>

namespace keel::app {

// The largest finite value of v; NaN when v has none.
inline double max_finite(const std::vector<double>& v) {
  double m = std::numeric_limits<double>::quiet_NaN();
  for (double x : v)
    if (std::isfinite(x) && !(x <= m)) m = x;
  return m;
}

// (L) rows of (H) values -> whether any is finite.
inline bool any_finite(const std::vector<std::vector<double>>& m) {
  for (const auto& row : m)
    for (double x : row)
      if (std::isfinite(x)) return true;
  return false;
}

}  // namespace keel::app
