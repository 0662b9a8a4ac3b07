#include "apps/gpt2/infer/attention_stats.h"

#include <fmt/format.h>

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>

#include "apps/gpt2/report/svg_chart.h"
#include "apps/gpt2/run/metrics.h"
#include "core/autograd.h"
#include "core/error.h"
#include "core/factory.h"
#include "ops/arith.h"
#include "ops/attention_band.h"
#include "ops/shape.h"

namespace keel::app {

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
}  // namespace

// p (T, T) -> the statistics of one head on one sequence
HeadStats head_stats(const std::vector<float>& p, int64_t T) {
  HeadStats s;
  std::vector<double> beyond_sum(std::size(kStatWindows), 0.0);
  std::vector<int64_t> beyond_rows(std::size(kStatWindows), 0);
  std::vector<double> row;
  for (int64_t i = 0; i < T; ++i) {
    const float* r = p.data() + i * T;
    row.assign(r, r + i + 1);  // keys 0..i; the rest of the row is the future, probability 0
    for (size_t k = 0; k < std::size(kStatWindows); ++k) {
      const int64_t w = kStatWindows[k];
      if (i < w) continue;  // every key is within w: no row to count
      double m = 0;         // the mass a local head of window w could not see
      for (int64_t j = 0; j < band_start(i, w); ++j) m += row[size_t(j)];
      beyond_sum[k] += m, ++beyond_rows[k];
    }
    double h = 0;
    for (double x : row)
      if (x > 0) h -= x * std::log(x);
    s.entropy += h;
    std::sort(row.begin(), row.end(), std::greater<>());
    double mass = 0;
    int64_t keys = 0;
    // The 1e-6 forgives f32 rounding of a row that sums to 0.9 exactly.
    while (keys < int64_t(row.size()) && mass < 0.9 - 1e-6) mass += row[size_t(keys++)];
    s.keys_90 += double(keys);
  }
  s.entropy /= double(T);
  s.keys_90 /= double(T);
  for (size_t k = 0; k < std::size(kStatWindows); ++k)
    s.share_beyond.push_back(beyond_rows[k] ? beyond_sum[k] / double(beyond_rows[k]) : kNaN);
  // Singular values of P are the square roots of the eigenvalues of P P^T (symmetric, so a fast
  // solver); rounding can make the smallest slightly negative.
  Eigen::MatrixXd P(T, T);
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = 0; j < T; ++j) P(i, j) = p[size_t(i * T + j)];
  const Eigen::VectorXd ev = Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd>(P * P.transpose(), Eigen::EigenvaluesOnly)
                                 .eigenvalues();
  double total = 0;
  for (int64_t k = 0; k < T; ++k) total += std::sqrt(std::max(ev[k], 0.0));
  double h = 0;
  for (int64_t k = 0; k < T; ++k) {
    const double q = std::sqrt(std::max(ev[k], 0.0)) / total;
    if (q > 0) h -= q * std::log(q);
  }
  s.effective_rank = std::exp(h);
  return s;
}

AttentionStats attention_stats(nn::GPT2& model, const std::vector<std::vector<int32_t>>& sequences) {
  if (sequences.empty() || sequences.front().empty())
    throw ConfigError("attention-stats", "no sequence to measure", "give a dataset or a text of at least one token");
  const auto& c = model.config();
  const auto T = static_cast<int64_t>(sequences.front().size());
  for (const auto& s : sequences)
    if (int64_t(s.size()) != T)
      throw ConfigError("attention-stats", fmt::format("sequences of {} and {} tokens", T, s.size()),
                        "cut the sample into windows of one length");
  if (T > c.block_size)
    throw ConfigError("attention-stats", fmt::format("sequences of {} tokens exceed the model's context {}", T,
                                                     c.block_size));
  AttentionStats out;
  out.sequences = int64_t(sequences.size());
  out.seq_len = T;
  out.layers.assign(size_t(c.n_layer), std::vector<HeadStats>(size_t(c.n_head)));
  NoGradGuard no_grad;
  model.eval();
  const Device dev = model.wte.weight.device();
  for (const auto& ids : sequences) {
    // As GPT2::forward, keeping each block's probabilities (nn::Attention::probabilities).
    Tensor x = model.wte.forward(from_vector(ids, {1, T}, {DType::i64, dev})) +
               model.wpe.forward(arange(T, {DType::i64, dev}));
    for (int64_t l = 0; l < c.n_layer; ++l) {
      const nn::Block& block = *model.h[size_t(l)];
      const Tensor probs = block.attn.probabilities(block.ln_1.forward(x));  // (1, H, T, T)
      const std::vector<float> p = probs.to(DType::f32).to(Device::cpu()).contiguous().to_vector<float>();
      for (int64_t h = 0; h < c.n_head; ++h) {
        const HeadStats one = head_stats(std::vector<float>(p.begin() + h * T * T, p.begin() + (h + 1) * T * T), T);
        HeadStats& acc = out.layers[size_t(l)][size_t(h)];
        if (acc.share_beyond.empty()) acc.share_beyond.assign(one.share_beyond.size(), 0.0);
        for (size_t k = 0; k < one.share_beyond.size(); ++k) acc.share_beyond[k] += one.share_beyond[k];
        acc.entropy += one.entropy, acc.keys_90 += one.keys_90, acc.effective_rank += one.effective_rank;
      }
      x = block.forward(x);
    }
  }
  const std::vector<int64_t> windows = c.attention_spec().window;
  const double n = double(sequences.size());
  for (auto& layer : out.layers)
    for (size_t h = 0; h < layer.size(); ++h) {
      HeadStats& s = layer[h];
      s.window = windows[h] >= T ? 0 : windows[h];
      for (double& v : s.share_beyond) v /= n;
      s.entropy /= n, s.keys_90 /= n, s.effective_rank /= n;
    }
  return out;
}

std::string attention_stats_json(const AttentionStats& s) {
  nlohmann::ordered_json layers = nlohmann::ordered_json::array();
  for (const auto& layer : s.layers) {
    nlohmann::ordered_json heads = nlohmann::ordered_json::array();
    for (size_t h = 0; h < layer.size(); ++h) {
      const HeadStats& x = layer[h];
      nlohmann::ordered_json beyond;
      for (size_t k = 0; k < x.share_beyond.size(); ++k)
        beyond[std::to_string(kStatWindows[k])] = json_number(x.share_beyond[k]);
      heads.push_back({{"head", h},
                       {"window", x.window},
                       {"share_beyond", beyond},
                       {"entropy", json_number(x.entropy)},
                       {"keys_90", json_number(x.keys_90)},
                       {"effective_rank", json_number(x.effective_rank)}});
    }
    layers.push_back(heads);
  }
  nlohmann::ordered_json j{{"sequences", s.sequences}, {"seq_len", s.seq_len}};
  j["windows"] = std::vector<int64_t>(std::begin(kStatWindows), std::end(kStatWindows));
  j["layers"] = layers;
  return j.dump();
}

std::string attention_stats_table(const AttentionStats& s) {
  std::string out = fmt::format("{} sequences of {} tokens; mass beyond w: share of a row's attention on keys at least "
                                "w tokens back\n",
                                s.sequences, s.seq_len);
  out += "layer  head  kind        beyond 16  beyond 50  beyond 100  entropy  keys for 90%  eff. rank\n";
  const auto num = [](double v, int width, int decimals) {
    return std::isnan(v) ? fmt::format("{:>{}}", "-", width) : fmt::format("{:>{}.{}f}", v, width, decimals);
  };
  for (size_t l = 0; l < s.layers.size(); ++l)
    for (size_t h = 0; h < s.layers[l].size(); ++h) {
      const HeadStats& x = s.layers[l][h];
      const std::string kind = x.window > 0 ? fmt::format("local {}", x.window) : "global";
      out += fmt::format("{:>5}  {:>4}  {:<10}  {}  {}  {}  {}  {}  {}\n", l, h, kind, num(x.share_beyond[0], 9, 3),
                         num(x.share_beyond[1], 9, 3), num(x.share_beyond[2], 10, 3), num(x.entropy, 7, 2),
                         num(x.keys_90, 12, 1), num(x.effective_rank, 9, 1));
    }
  return out;
}

std::string attention_stats_svg(const AttentionStats& s, const std::string& title) {
  struct Panel {
    const char* name;
    std::function<double(const HeadStats&)> get;
  };
  const Panel panels[] = {{"mass beyond 50 tokens", [](const HeadStats& x) { return x.share_beyond[1]; }},
                          {"row entropy (nats)", [](const HeadStats& x) { return x.entropy; }},
                          {"keys holding 90%", [](const HeadStats& x) { return x.keys_90; }},
                          {"effective rank", [](const HeadStats& x) { return x.effective_rank; }}};
  size_t bars = 0;
  for (const auto& layer : s.layers) bars += layer.size();
  const double pw = std::max(180.0, 22.0 * double(bars) + 40), ph = 190, top = 60;
  const double W = 4 * pw + 40, H = top + ph + 70;
  std::string out = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0:.0f}\" height=\"{1:.0f}\" viewBox=\"0 0 {0:.0f} {1:.0f}\" "
      "font-family=\"sans-serif\" font-size=\"13\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"20\" y=\"24\" font-size=\"17\" font-weight=\"bold\">{2}</text>\n<text x=\"20\" y=\"44\">"
      "{3} sequences of {4} tokens; bars: layer.head, orange local, blue global</text>\n",
      W, H, svg::escape(title), s.sequences, s.seq_len);
  for (size_t k = 0; k < std::size(panels); ++k) {
    const double x0 = 20 + double(k) * pw, bottom = top + ph;
    double hi = 0;
    for (const auto& layer : s.layers)
      for (const HeadStats& x : layer)
        if (std::isfinite(panels[k].get(x))) hi = std::max(hi, panels[k].get(x));
    if (hi <= 0) hi = 1;
    out += fmt::format("<text x=\"{:.0f}\" y=\"{:.0f}\" font-weight=\"bold\">{}</text>\n", x0, top - 2,
                       panels[k].name);
    out += fmt::format("<line x1=\"{0:.0f}\" x2=\"{1:.0f}\" y1=\"{2:.0f}\" y2=\"{2:.0f}\" stroke=\"#888\"/>\n", x0,
                       x0 + pw - 30, bottom);
    size_t i = 0;
    for (size_t l = 0; l < s.layers.size(); ++l)
      for (size_t h = 0; h < s.layers[l].size(); ++h, ++i) {
        const HeadStats& x = s.layers[l][h];
        const double v = panels[k].get(x), bh = std::isfinite(v) ? v / hi * (ph - 30) : 0, bx = x0 + 22.0 * double(i);
        out += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"16\" height=\"{:.1f}\" fill=\"{}\"><title>layer {} "
                           "head {}: {}</title></rect>\n",
                           bx, bottom - bh, bh, x.window > 0 ? "#f28e2b" : "#4e79a7", l, h, svg::short_number(v));
        out += fmt::format("<text x=\"{:.1f}\" y=\"{:.0f}\" font-size=\"10\" text-anchor=\"middle\">{}.{}</text>\n",
                           bx + 8, bottom + 13, l, h);
      }
    out += fmt::format("<text x=\"{:.0f}\" y=\"{:.0f}\" fill=\"#444\">max {}</text>\n", x0, bottom + 32,
                       svg::short_number(hi));
  }
  return out + "</svg>\n";
}

}  // namespace keel::app
