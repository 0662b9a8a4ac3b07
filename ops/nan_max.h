// The one merge of the attention statistics (max_logit, max_range; ops/attention.h) over keys,
// heads, batch entries, steps and ranks: a max in which NaN wins and +inf beats every finite
// value. std::max(a, NaN) returns a, so a plain max would turn a diverged head into a
// healthy-looking number. Both statistics are >= 0, so 0 is the merge's identity.
#pragma once

#include <cmath>

namespace keel {

inline double nan_max(double a, double b) { return (std::isnan(a) || a >= b) ? a : b; }

}  // namespace keel
