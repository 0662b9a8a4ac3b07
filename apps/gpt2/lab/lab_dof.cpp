#include "apps/gpt2/lab/lab_dof.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "apps/gpt2/report/svg_chart.h"
#include "core/autograd.h"
#include "core/error.h"
#include "core/factory.h"
#include "core/random.h"
#include "ops/arith.h"
#include "ops/attention.h"
#include "ops/matmul.h"
#include "ops/reduce.h"
#include "ops/shape.h"
#include "ops/softmax.h"
#include "optim/adamw.h"

namespace keel::app {

namespace {

// Far below any logit a fit reaches, yet finite, so 0 * mask stays 0 in the loss.
constexpr double kMasked = -1e9;

// Whether query i sees key j in a head of this window (0 = full causal): the model's rule.
bool allowed(int64_t i, int64_t j, int64_t window) { return AttentionSpec{0, {window}, 0}.sees(0, i, j); }

// The target (n, n): row i puts `floor` evenly on keys 0..i and the rest evenly on its band, the
// keys a head of window p sees, max(0, i-p+1)..i.
Tensor band_target(int64_t n, int64_t p, double floor) {
  const AttentionSpec band{0, {p}, 0};
  std::vector<float> t(static_cast<size_t>(n * n), 0.0f);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t width = band.keys_seen(0, i);
    for (int64_t j = 0; j <= i; ++j) {
      const double v = floor / double(i + 1) + (band.sees(0, i, j) ? (1 - floor) / double(width) : 0.0);
      t[static_cast<size_t>(i * n + j)] = static_cast<float>(v);
    }
  }
  return from_vector(t, {n, n});
}

// The additive mask (n, n): 0 where the head may look, kMasked elsewhere.
Tensor head_mask(int64_t n, int64_t window) {
  std::vector<float> m(static_cast<size_t>(n * n));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) m[static_cast<size_t>(i * n + j)] = allowed(i, j, window) ? 0.0f : float(kMasked);
  return from_vector(m, {n, n});
}

void check_positive(const char* field, int64_t v) {
  if (v < 1) throw ConfigError("lab dof", fmt::format("{} must be at least 1, got {}", field, v));
}

}  // namespace

void DofLabConfig::validate() const {
  if (n.empty() || d.empty()) throw ConfigError("lab dof", "the grid is empty", "give at least one --n and one --d");
  for (int64_t v : n) check_positive("--n", v);
  for (int64_t v : d) check_positive("--d", v);
  check_positive("--window", window);
  if (input_dim < 0) throw ConfigError("lab dof", fmt::format("--input-dim must be 0 (= n) or more, got {}", input_dim));
  check_positive("--steps", steps);
  if (!(floor >= 0 && floor < 1))
    throw ConfigError("lab dof", fmt::format("--floor must be in [0, 1), got {}", floor));
  if (!(lr > 0) || !std::isfinite(lr)) throw ConfigError("lab dof", fmt::format("--lr must be positive, got {}", lr));
}

// X (n, m) fixed; Wq, Wk (m, d) learned; logits S = X Wq (X Wk)^T / sqrt(d) (n, n).
DofFit fit_head(const DofLabConfig& cfg, int64_t n, int64_t d, bool local) {
  const int64_t m = cfg.input_dim > 0 ? cfg.input_dim : n;
  // One stream per (n, d): the global and the local head start from the same weights.
  Generator gen(cfg.seed * 1000003 + static_cast<uint64_t>(n) * 1009 + static_cast<uint64_t>(d));
  const Tensor x = randn({n, m}, gen);
  // N(0, 1/m) weights make q and k entries unit variance, so the first logits are about N(0, 1).
  Tensor wq = randn({m, d}, gen, {}, 0.0, 1.0 / std::sqrt(double(m)));
  Tensor wk = randn({m, d}, gen, {}, 0.0, 1.0 / std::sqrt(double(m)));
  wq.set_requires_grad(true);
  wk.set_requires_grad(true);
  // The local head cannot see past its window, so its target is the band alone.
  const Tensor target = band_target(n, cfg.window, local ? 0.0 : cfg.floor);
  const Tensor mask = head_mask(n, local ? cfg.window : 0);
  const double scale = 1.0 / std::sqrt(double(d));

  optim::AdamW opt({{"wq", wq}, {"wk", wk}}, {.lr = cfg.lr, .beta1 = 0.9, .beta2 = 0.99, .weight_decay = 0.0});
  auto logits = [&] { return matmul(matmul(x, wq), transpose(matmul(x, wk), 0, 1)) * scale; };
  for (int64_t step = 0; step < cfg.steps; ++step) {
    opt.zero_grad();
    // Mean over queries of the cross-entropy -sum_j t_ij log p_ij (= KL(target || p) + a constant).
    Tensor loss = -sum(target * log_softmax(logits() + mask)) / double(n);
    loss.backward();
    opt.step();
  }

  NoGradGuard no_grad;
  const Tensor s = logits();
  const std::vector<float> sv = s.contiguous().to_vector<float>();
  const std::vector<float> pv = softmax(s + mask).contiguous().to_vector<float>();
  const std::vector<float> tv = target.to_vector<float>();
  DofFit fit{n, d, local, 0, 0, 0};
  for (int64_t i = 0; i < n; ++i) {
    double lo = INFINITY, hi = -INFINITY;
    for (int64_t j = 0; j <= i; ++j) {
      const size_t k = static_cast<size_t>(i * n + j);
      if (!allowed(i, j, local ? cfg.window : 0)) continue;
      fit.max_logit = std::max(fit.max_logit, std::abs(double(sv[k])));
      lo = std::min(lo, double(sv[k])), hi = std::max(hi, double(sv[k]));
      fit.tv += 0.5 * std::abs(double(pv[k]) - double(tv[k]));
      if (tv[k] > 0) fit.kl += double(tv[k]) * std::log(double(tv[k]) / std::max(double(pv[k]), 1e-30));
    }
    fit.logit_range = std::max(fit.logit_range, hi - lo);
  }
  fit.kl /= double(n);
  fit.tv /= double(n);
  return fit;
}

std::vector<DofFit> run_dof_lab(const DofLabConfig& cfg, void (*progress)(const DofFit&)) {
  cfg.validate();
  std::vector<DofFit> fits;
  for (int64_t d : cfg.d)
    for (int64_t n : cfg.n)
      for (bool local : {false, true}) {
        fits.push_back(fit_head(cfg, n, d, local));
        if (progress) progress(fits.back());
      }
  return fits;
}

namespace {
// The fits keyed by (d, n) -> {global, local}.
std::map<std::pair<int64_t, int64_t>, std::pair<DofFit, DofFit>> pair_up(const std::vector<DofFit>& fits) {
  std::map<std::pair<int64_t, int64_t>, std::pair<DofFit, DofFit>> out;
  for (const DofFit& f : fits) (f.local ? out[{f.d, f.n}].second : out[{f.d, f.n}].first) = f;
  return out;
}
}  // namespace

std::string dof_table(const std::vector<DofFit>& fits) {
  std::string s = fmt::format("{:>5} {:>4} {:>6} | {:>9} {:>6} {:>8} {:>6} | {:>8} {:>6} {:>8} {:>6}\n", "n", "d",
                              "n/d", "global KL", "TV", "max|lgt|", "range", "local KL", "TV", "max|lgt|", "range");
  for (const auto& [key, gl] : pair_up(fits)) {
    const auto& [g, l] = gl;
    s += fmt::format("{:>5} {:>4} {:>6.1f} | {:>9.4f} {:>6.3f} {:>8.2f} {:>6.2f} | {:>8.4f} {:>6.3f} {:>8.2f} {:>6.2f}\n",
                     key.second, key.first, double(key.second) / double(key.first), g.kl, g.tv, g.max_logit,
                     g.logit_range, l.kl, l.tv, l.max_logit, l.logit_range);
  }
  return s;
}

std::string dof_report_html(const DofLabConfig& cfg, const std::vector<DofFit>& fits) {
  std::vector<svg::Series> err, rng, lgt;
  size_t color = 0;
  std::vector<int64_t> ds;
  for (const DofFit& f : fits)
    if (std::find(ds.begin(), ds.end(), f.d) == ds.end()) ds.push_back(f.d);
  for (int64_t d : ds) {
    for (bool local : {false, true}) {
      svg::Series e{fmt::format("{} head, d = {}", local ? "local" : "global", d), svg::palette_color(color), {}, {}};
      e.stroke_width = local ? 2.0 : 3.0;
      svg::Series g = e, r = e;
      for (const DofFit& f : fits)
        if (f.d == d && f.local == local) {
          const double x = double(f.n) / double(f.d);
          // Floors keep an exact fit (0) on the log axis.
          e.x.push_back(x), e.y.push_back(std::max(f.kl, 1e-5));
          r.x.push_back(x), r.y.push_back(std::max(f.logit_range, 1e-3));
          g.x.push_back(x), g.y.push_back(std::max(f.max_logit, 1e-3));
        }
      err.push_back(std::move(e));
      rng.push_back(std::move(r));
      lgt.push_back(std::move(g));
      ++color;
    }
  }
  svg::ChartOptions eo{"Fit error: KL(target || head), nats per query", "n / d", "KL", svg::Scale::Log, 640, 420};
  svg::ChartOptions ro{"Logit range a query uses (max - min)", "n / d", "logit range", svg::Scale::Log, 640, 420};
  svg::ChartOptions lo{"Largest |logit| of the fitted head", "n / d", "max |logit|", svg::Scale::Log, 640, 420};
  for (auto* o : {&eo, &ro, &lo}) o->integer_x = false, o->font_size = 14;
  std::string h = fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>keel lab: degrees of freedom"
      "</title><style>body{{font-family:sans-serif;max-width:1340px;margin:24px auto;padding:0 12px;"
      "color:#222;font-size:17px;line-height:1.45}}.grid{{display:flex;flex-wrap:wrap;gap:16px}}"
      "pre{{font-size:14px;background:#f6f8fa;padding:8px}}</style></head><body>\n"
      "<h1>One attention head against a dense local target</h1>\n"
      "<p>Each query should spread its attention evenly over its last p = {} positions. A <b>global</b> "
      "head computes softmax(QK<sup>T</sup>/&radic;d) over every earlier key; QK<sup>T</sup> has rank "
      "at most d, so once n is much larger than d it can only approximate the band by making its logits "
      "large. A <b>local</b> head of window p only sees the band and fits it exactly with small logits. "
      "The global target keeps a share {} of each query's weight spread over all earlier positions, so "
      "with enough rank it is reachable with small logits. Inputs are fixed random vectors of width {}; "
      "Wq and Wk are fitted with Adam for {} steps (lr {}, seed {}). The logit range (largest minus "
      "smallest logit of a query) is how sharp the head must be; max |logit| also counts a per-query "
      "shift the softmax ignores, so it is noisier.</p>\n<div class=\"grid\">",
      cfg.window, cfg.floor, cfg.input_dim > 0 ? std::to_string(cfg.input_dim) : std::string("n"), cfg.steps, cfg.lr,
      cfg.seed);
  h += svg::line_chart(err, eo) + svg::line_chart(rng, ro) + svg::line_chart(lgt, lo) + "</div>\n";
  h += "<pre>" + svg::escape(dof_table(fits)) + "</pre>\n</body></html>\n";
  return h;
}

}  // namespace keel::app
