#include "apps/gpt2/report/reading.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>
#include <utility>

#include "apps/gpt2/report/finite_values.h"
#include "apps/gpt2/report/svg_chart.h"

namespace keel::app {

std::optional<std::string> config_value(const RunSummary& run, const std::string& key) {
  for (const auto& [k, v] : run.config)
    if (k == key) return v;
  return std::nullopt;
}

std::optional<double> config_number(const RunSummary& run, const std::string& key) {
  const auto v = config_value(run, key);
  if (!v) return std::nullopt;
  char* end = nullptr;
  const double x = std::strtod(v->c_str(), &end);
  if (end == v->c_str() || *end != '\0' || !std::isfinite(x)) return std::nullopt;
  return x;
}

namespace {

struct Shape {
  double n, d;  // sequence length, head width
};

std::optional<Shape> shape_of(const RunSummary& run) {
  std::optional<double> T = config_number(run, "train.seq_len");
  if (!T || *T == 0) T = config_number(run, "model.n_positions");  // the model's context
  const auto C = config_number(run, "model.n_embd"), H = config_number(run, "model.n_head");
  if (!T || !C || !H || *T <= 0 || *C <= 0 || *H <= 0) return std::nullopt;
  return Shape{*T, *C / *H};
}

// 64 -> "64", 10.666 -> "10.7".
std::string number(double x) {
  return x == std::round(x) && std::abs(x) < 1e15 ? fmt::format("{:.0f}", x) : fmt::format("{:.1f}", x);
}

// A logged statistic: one decimal, "-" when missing, short for an exploded value.
std::string value(double v) {
  if (std::isnan(v)) return "-";
  return std::abs(v) >= 1e5 ? svg::short_number(v) : fmt::format("{:.1f}", v);
}

std::string attention_of(const ReadingRun& r) { return config_value(*r.summary, "model.attention").value_or(""); }

// An MHSA run and the LS-attention run at the same n/d and training recipe.
struct Pair {
  const ReadingRun* mhsa;
  const ReadingRun* ls;
  double nd;
};

// Whether two runs share the training recipe a sweep varies besides the sequence length: the
// learning rate and the z-loss (a learning-rate lab's MHSA at lr 1e-2 is not set against its LS
// at 1e-3, nor an MHSA with z-loss against LS without).
bool same_recipe(const ReadingRun& a, const ReadingRun& b) {
  for (const char* key : {"train.lr", "train.z_loss"})
    if (config_value(*a.summary, key) != config_value(*b.summary, key)) return false;
  return true;
}

// One pair per MHSA run that has an LS-attention run at its n/d and recipe (the first such), by n/d.
std::vector<Pair> pairs_of(const std::vector<ReadingRun>& runs) {
  std::vector<Pair> out;
  for (const ReadingRun& m : runs) {
    const auto nd = n_over_d(*m.summary);
    if (attention_of(m) != "mhsa" || !nd) continue;
    for (const ReadingRun& l : runs) {
      const auto l_nd = n_over_d(*l.summary);
      if (attention_of(l) == "ls" && l_nd && std::abs(*l_nd - *nd) <= 1e-9 * *nd && same_recipe(m, l)) {
        out.push_back({&m, &l, *nd});
        break;
      }
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const Pair& a, const Pair& b) { return a.nd < b.nd; });
  return out;
}

// MHSA's max range over LS-attention's (the table's column); NaN when either is missing.
double range_ratio(const Pair& p) {
  const double m = p.mhsa->summary->max_range, l = p.ls->summary->max_range;
  return std::isfinite(m) && std::isfinite(l) && l > 0 ? m / l : RunSummary::kNaN;
}

// Where the per-layer range curves of a pair part: the layer, the logged step from which MHSA's
// stays at least kSeparated times LS-attention's to the end, and both values at the last step.
struct Separation {
  size_t layer;
  int64_t from, last;
  double mhsa, ls;
};

// Layer l's max range (over heads) at each train step that logged a finite one.
std::map<int64_t, double> layer_ranges(const std::vector<MetricsRecord>& records, size_t l) {
  std::map<int64_t, double> out;
  for (const MetricsRecord& r : records)
    if (r.kind == RecordKind::Train && l < r.max_range.size())
      if (const double v = max_finite(r.max_range[l]); std::isfinite(v)) out[r.step] = v;
  return out;
}

// Of the layers whose curves have parted by the last step both runs logged, the one with the
// largest final ratio.
std::optional<Separation> separation(const Pair& p) {
  if (!p.mhsa->records || !p.ls->records) return std::nullopt;
  std::optional<Separation> best;
  for (size_t l = 0;; ++l) {
    std::map<int64_t, double> m = layer_ranges(*p.mhsa->records, l), s = layer_ranges(*p.ls->records, l);
    if (m.empty() || s.empty()) break;
    std::vector<std::pair<int64_t, double>> ratio;  // MHSA over LS at the steps both logged
    for (const auto& [step, v] : m)
      if (const auto it = s.find(step); it != s.end() && it->second > 0) ratio.emplace_back(step, v / it->second);
    if (ratio.empty() || ratio.back().second < kSeparated) continue;
    size_t i = ratio.size();
    while (i > 0 && ratio[i - 1].second >= kSeparated) --i;
    const int64_t last = ratio.back().first;
    const Separation sep{l, ratio[i].first, last, m[last], s[last]};
    if (!best || sep.mhsa / sep.ls > best->mhsa / best->ls) best = sep;
  }
  return best;
}

// "n/d = 64 in every run: sequence length n = 512 over head width d = 8", or the span of a sweep.
std::string shape_sentence(const std::vector<ReadingRun>& runs, double* largest) {
  std::set<std::pair<double, double>> shapes;
  std::set<double> ratios;
  size_t known = 0;
  for (const ReadingRun& r : runs)
    if (const auto s = shape_of(*r.summary)) shapes.emplace(s->n, s->d), ratios.insert(s->n / s->d), ++known;
  if (shapes.empty()) return "";
  *largest = *ratios.rbegin();
  const char* paper = "the paper's model: 2048 / 32 = 64";
  if (shapes.size() == 1) {
    const auto [n, d] = *shapes.begin();
    return fmt::format("n/d = {} in {}: sequence length n = {} over head width d = {} ({}).", number(n / d),
                       runs.size() == 1 ? "this run" : known == runs.size() ? "every run" : "the runs that record it",
                       number(n), number(d), paper);
  }
  return fmt::format("n/d, the sequence length over the head width, goes from {} to {} across the runs (the table's "
                     "n/d column; {}).",
                     number(*ratios.begin()), number(*ratios.rbegin()), paper);
}

const char* const kWhereToSee =
    "To see the effect: `bash .ci/demo --lab` (on a CPU, MHSA against LS-attention as n/d goes from 8 to 64) and "
    "`bash .ci/demo --figure1` (on a GPU, the paper's Figure 1).";

std::string small_context(double nd, const Pair* p) {
  std::string s = fmt::format(
      "The paper's effect, MHSA's attention logits growing while LS-attention's stay small, needs n >> d: a global "
      "head has d degrees of freedom per query and a sharp short-range pattern needs about n of them. At n/d = {} "
      "little sharpening is needed, so MHSA and LS-attention are expected to look alike here",
      number(nd));
  if (p) s += fmt::format(" (max logit range: MHSA {}, LS-attention {})", value(p->mhsa->summary->max_range),
                          value(p->ls->summary->max_range));
  return s + ". " + kWhereToSee;
}

std::string not_yet(const Pair& p) {
  return fmt::format(
      "At n/d = {} the paper's effect can show, but here MHSA's max logit range ({}) is not {:g} times "
      "LS-attention's ({}): the logits grow as heads learn sharp short-range patterns, which takes training steps "
      "(these runs: {}) and data made of such patterns (docs/instability.md, section 2). {}",
      number(p.nd), value(p.mhsa->summary->max_range), kSeparated, value(p.ls->summary->max_range),
      p.mhsa->summary->steps,
      kWhereToSee);
}

std::string effect(const Pair& p, const std::vector<Pair>& pairs) {
  const RunSummary &m = *p.mhsa->summary, &l = *p.ls->summary;
  std::string s = fmt::format(
      "What to look at: at n/d = {}, the regime of the paper's claim (n >> d), MHSA's max logit range (the largest "
      "max minus min of one attention row's logits) reached {} against LS-attention's {}, {:.1f} times as high",
      number(p.nd), value(m.max_range), value(l.max_range), range_ratio(p));
  if (std::isfinite(m.late_max_range) && std::isfinite(l.late_max_range))
    s += fmt::format("; where training left it (the last 10% of steps), {} against {}", value(m.late_max_range),
                     value(l.late_max_range));
  s += ".";
  if (const auto sep = separation(p))
    s += fmt::format(" In the per-layer charts of the report (attention signal: max range), the two curves part in "
                     "layer {}: from step {} on MHSA's stays at least {:g} times as high, and at step {} it is {} "
                     "against {}.",
                     sep->layer, sep->from, kSeparated, sep->last, value(sep->mhsa), value(sep->ls));
  if (std::isfinite(m.final_val_ppl) && std::isfinite(l.final_val_ppl))
    s += fmt::format(" Validation perplexity: MHSA {:.2f}, LS-attention {:.2f}.", m.final_val_ppl, l.final_val_ppl);
  if (pairs.size() > 1 && pairs.front().nd < p.nd && std::isfinite(range_ratio(pairs.front())))
    s += fmt::format(" Across the runs, MHSA's max range over LS-attention's goes from {:.1f} times at n/d = {} to "
                     "{:.1f} at n/d = {}.",
                     range_ratio(pairs.front()), number(pairs.front().nd), range_ratio(p), number(p.nd));
  return s;
}

}  // namespace

std::optional<double> n_over_d(const RunSummary& run) {
  const auto s = shape_of(run);
  if (!s) return std::nullopt;
  return s->n / s->d;
}

std::string n_over_d_cell(const RunSummary& run) {
  const auto nd = n_over_d(run);
  return nd ? number(*nd) : "-";
}

std::vector<std::string> reading(const std::vector<ReadingRun>& runs) {
  double largest = 0;
  const std::string shapes = shape_sentence(runs, &largest);
  if (shapes.empty()) return {};
  const std::vector<Pair> pairs = pairs_of(runs);
  std::string more;
  if (pairs.empty()) {
    if (largest < kLongContext) more = small_context(largest, nullptr);
  } else {
    // The pair at the largest n/d (the first of them): where the effect is strongest.
    const double nd = pairs.back().nd;
    const Pair& top = *std::find_if(pairs.begin(), pairs.end(), [&](const Pair& p) { return p.nd == nd; });
    more = nd < kLongContext                   ? small_context(nd, &top)
           : range_ratio(top) >= kSeparated ? effect(top, pairs)
                                            : not_yet(top);
  }
  return {more.empty() ? shapes : fmt::format("{} {}", shapes, more)};
}

std::string reading_text(const std::vector<std::string>& paragraphs, size_t width) {
  std::string out;
  for (const std::string& p : paragraphs) {
    if (!out.empty()) out += "\n";
    std::istringstream words(p);
    std::string line;
    for (std::string w; words >> w;) {
      if (!line.empty() && line.size() + 1 + w.size() > width) out += line + "\n", line.clear();
      line += (line.empty() ? "" : " ") + w;
    }
    if (!line.empty()) out += line + "\n";
  }
  return out;
}

std::string reading_html(const std::vector<std::string>& paragraphs) {
  if (paragraphs.empty()) return "";
  std::string h = "<div class=\"note reading\">";
  for (const std::string& p : paragraphs) {
    std::string e = svg::escape(p), out;
    bool code = false;
    for (char c : e) {
      if (c == '`') out += (code = !code) ? "<code>" : "</code>";
      else out += c;
    }
    for (size_t at = out.find(" &gt;&gt; "); at != std::string::npos; at = out.find(" &gt;&gt; ", at))
      out.replace(at, 10, " &#8811; ");
    h += "<p>" + out + "</p>";
  }
  return h + "</div>\n";
}

}  // namespace keel::app
