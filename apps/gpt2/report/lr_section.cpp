#include "apps/gpt2/report/lr_section.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>

#include "apps/gpt2/report/svg_chart.h"
#include "apps/gpt2/report/sweep_section.h"

namespace keel::app {

namespace {

// Keys of a flattened config.json that do not make a run another run of the figure: the
// learning rate (the x axis), names, places and what only logging, checkpoints or the hardware see.
bool bookkeeping(const std::string& key) {
  static const std::set<std::string> kTrain = {
      "lr", "name", "run_dir", "resume", "log_every", "val_every", "val_batches", "ckpt_every", "keep_checkpoints",
      "on_nonfinite", "spike_factor", "spike_signal", "device", "data", "profile", "profile_warmup", "profile_gpu",
      "cuda_graph", "deterministic", "dist_backend", "bucket_mb", "nproc", "zero", "reduce_dtype"};
  if (key == "name" || key.rfind("distributed.", 0) == 0) return true;
  return key.rfind("train.", 0) == 0 && kTrain.count(key.substr(6));
}

std::string line_key(const RunSummary& run) {
  std::string k;
  for (const auto& [key, value] : run.config)
    if (!bookkeeping(key)) k += key + "=" + value + "\n";
  return k;
}

// "mhsa lr=0.01 n-embd=32" -> "mhsa n-embd=32"
std::string without_lr(const std::string& name) {
  std::istringstream in(name);
  std::string out;
  for (std::string word; in >> word;)
    if (word.rfind("lr=", 0) != 0) out += (out.empty() ? "" : " ") + word;
  return out.empty() ? name : out;
}

double vocab_of(const RunSummary& run) {
  for (const auto& [key, value] : run.config)
    if (key == "model.vocab_size") return std::strtod(value.c_str(), nullptr);
  return RunSummary::kNaN;
}

// The line's derived numbers: L0, the capped losses' best and their mean distance from it.
void score(LrLine& line) {
  line.initial_loss = std::log(vocab_of(*line.runs.front()));
  std::vector<double> capped;
  for (size_t i = 0; i < line.runs.size(); ++i) {
    const RunSummary& r = *line.runs[i];
    if (lr_diverged(r)) ++line.diverged;
    const double loss = lr_diverged(r) ? line.initial_loss : r.final_val_loss;
    capped.push_back(std::isnan(line.initial_loss) ? loss : std::min(loss, line.initial_loss));
    if (!lr_diverged(r) && !(r.final_val_loss >= line.best_loss))
      line.best_loss = r.final_val_loss, line.best_lr = line.lrs[i];
  }
  const double best = *std::min_element(capped.begin(), capped.end());
  if (capped.size() < 2 || std::isnan(best)) return;
  double sum = 0;
  for (double c : capped) sum += c - best;
  line.sensitivity = sum / double(capped.size());
}

std::string cell(double v, int decimals) {
  return std::isnan(v) ? "-" : std::abs(v) >= 1e5 ? svg::short_number(v) : fmt::format("{:.{}f}", v, decimals);
}

// One chart against the learning rate: y(run) for each line's runs, diverged ones marked.
template <class Y>
std::string lr_chart(const std::vector<LrLine>& lines, const std::string& title, const std::string& y_label,
                     svg::Scale scale, Y y, double y_max = RunSummary::kNaN) {
  std::vector<svg::Series> series;
  std::set<double> xs;
  for (const LrLine& line : lines) {
    svg::Series se{line.label, line.color, line.lrs, {}};
    se.stroke_width = 2.5;
    se.mark_divergence = false;
    se.mark_what = "diverged at lr";
    for (size_t i = 0; i < line.runs.size(); ++i) {
      se.y.push_back(y(line, *line.runs[i]));
      if (lr_diverged(*line.runs[i])) se.marks.push_back(line.lrs[i]);
      xs.insert(line.lrs[i]);
    }
    series.push_back(std::move(se));
  }
  svg::ChartOptions o = svg::projected({title, "peak learning rate (log scale)", y_label, scale, 560, 340});
  o.integer_x = false;
  o.log_x = true;
  o.x_ticks.assign(xs.begin(), xs.end());
  o.y_max = y_max;
  return svg::line_chart(series, o);
}

constexpr const char* kAbout = R"(<p>One point per run, one line per attention variant and model size
(the runs that differ only in the learning rate). Left: the final validation loss, the paper's
Figure 1; a triangle marks a run that diverged (a non-finite loss, or no final validation loss),
drawn at the loss at initialisation, ln V, which is what it counts as below. Beside it, the largest
attention logit and the largest |log Z| of the output softmax that the run logged (its peak over
training: a diverged run shows where it was heading). <b>LR sensitivity</b> (Wortsman et al. 2023,
arXiv 2309.14322): the mean over the swept learning rates of min(loss, ln V) minus the line's best
loss. Near 0, the learning rate hardly matters within the range; large, a wrong guess costs a lot.</p>
)";

constexpr const char* kQuestions = R"(<div class="note" style="max-width:540px"><p><b>Questions for the class.</b></p><ol>
<li>Why does QK-norm flatten the curve at high learning rates? What does it bound that MHSA does not,
and which chart beside the loss shows it?</li>
<li>LS-attention keeps most heads local. What would its local heads do to the curve: do they need
large logits, and what about its global head?</li>
<li>The z-loss adds z (log Z)<sup>2</sup> to the loss. What does it trade: what does it buy at high
learning rates, and what can it cost at the best one? Compare the max |log Z| chart with and without it.</li>
<li>The paper finds that LR sensitivity grows with model size without QK-norm. Does it here? What
would you sweep next to check?</li></ol></div>
)";

std::string line_table(const std::vector<LrLine>& lines) {
  std::string h = "<table><tr><th>variant and size</th><th>runs</th><th>diverged</th><th>best lr</th>"
                  "<th>best final val loss</th><th>ln V</th><th>LR sensitivity</th></tr>\n";
  for (const LrLine& l : lines)
    h += fmt::format("<tr><td><span class=\"swatch\" style=\"background:{}\"></span>{}</td><td class=\"num\">{}"
                     "</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>"
                     "<td class=\"num\">{}</td><td class=\"num\"><b>{}</b></td></tr>\n",
                     l.color, svg::escape(l.label), l.runs.size(), l.diverged,
                     std::isnan(l.best_lr) ? "-" : svg::short_number(l.best_lr), cell(l.best_loss, 3),
                     cell(l.initial_loss, 3), cell(l.sensitivity, 3));
  return h + "</table>\n";
}

std::string run_table(const std::vector<LrLine>& lines) {
  std::string h = "<details><summary>Every run of the sweep</summary><table><tr><th>variant and size</th>"
                  "<th>lr</th><th>final val loss</th><th>max |logit|</th><th>max |log Z|</th>"
                  "<th>log Z (end)</th><th>status</th></tr>\n";
  for (const LrLine& l : lines)
    for (size_t i = 0; i < l.runs.size(); ++i) {
      const RunSummary& r = *l.runs[i];
      h += fmt::format("<tr><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>"
                       "<td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td></tr>\n",
                       svg::escape(l.label), svg::short_number(l.lrs[i]), cell(r.final_val_loss, 3),
                       cell(r.max_logit, 1), cell(r.max_log_z, 2), cell(r.final_log_z, 2),
                       svg::escape(lr_diverged(r) && !r.diverged ? "no final validation loss" : r.status()));
    }
  return h + "</table></details>\n";
}

}  // namespace

bool lr_diverged(const RunSummary& run) { return run.diverged || !std::isfinite(run.final_val_loss); }

std::vector<LrLine> lr_lines(const std::vector<RunSummary>& runs) {
  std::vector<LrLine> lines;
  std::map<std::string, size_t> index;
  for (const RunSummary& r : runs) {
    const auto lr = sweep_x(r, "lr");
    if (!lr) continue;
    auto [it, fresh] = index.emplace(line_key(r), lines.size());
    if (fresh) {
      LrLine line;
      line.label = without_lr(r.name), line.color = svg::palette_color(lines.size());
      lines.push_back(line);
    }
    lines[it->second].runs.push_back(&r);
    lines[it->second].lrs.push_back(*lr);
  }
  for (LrLine& line : lines) {
    std::vector<size_t> order(line.runs.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return line.lrs[a] < line.lrs[b]; });
    LrLine sorted = line;
    for (size_t i = 0; i < order.size(); ++i) sorted.runs[i] = line.runs[order[i]], sorted.lrs[i] = line.lrs[order[i]];
    line = sorted;
    score(line);
  }
  return lines;
}

std::string lr_section(const std::vector<RunSummary>& runs) {
  const std::vector<LrLine> lines = lr_lines(runs);
  std::string h = "<h2>Learning-rate sensitivity</h2>\n";
  if (lines.empty()) return h + "<p>No run records its learning rate.</p>\n";
  double top = -INFINITY;  // the loss axis ends just above ln V: a diverged run sits at its top
  for (const LrLine& l : lines) top = std::max(top, l.initial_loss);
  h += kAbout;
  h += "<div class=\"grid\">";
  h += lr_chart(lines, "Final validation loss (\u25bc: diverged, at ln V)", "validation loss", svg::Scale::Linear,
                [](const LrLine& l, const RunSummary& r) { return lr_diverged(r) ? l.initial_loss : r.final_val_loss; },
                std::isfinite(top) ? top * 1.02 : RunSummary::kNaN);
  h += lr_chart(lines, "Max attention logit (peak)", "max |logit|", svg::Scale::Auto,
                [](const LrLine&, const RunSummary& r) { return r.max_logit; });
  h += lr_chart(lines, "Max |log Z| of the output softmax (peak)", "max |log Z|", svg::Scale::Auto,
                [](const LrLine&, const RunSummary& r) { return r.max_log_z; });
  h += kQuestions;
  h += "</div>\n";
  return h + line_table(lines) + run_table(lines);
}

}  // namespace keel::app
