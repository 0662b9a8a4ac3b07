#include "apps/gpt2/infer/attention_map.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "apps/gpt2/report/svg_chart.h"
#include "core/autograd.h"
#include "core/error.h"
#include "core/factory.h"
#include "ops/arith.h"
#include "ops/shape.h"

namespace keel::app {

// ids (T) -> (H, T, T): the blocks before `layer` run as in GPT2::forward, then layer's ln_1 and
// its attention's own projections give the probabilities.
Tensor attention_probabilities(nn::GPT2& model, const std::vector<int32_t>& ids, int64_t layer) {
  const auto& c = model.config();
  if (layer < 0 || layer >= c.n_layer)
    throw ConfigError("attention-map", fmt::format("--layer {} is out of range: the model has layers 0..{}", layer,
                                                   c.n_layer - 1));
  if (ids.empty()) throw ConfigError("attention-map", "the passage is empty", "give some --text");
  const auto T = static_cast<int64_t>(ids.size());
  if (T > c.block_size)
    throw ShapeError("attention-map",
                     fmt::format("the passage is {} tokens, the model's context {}", T, c.block_size),
                     "use a shorter --text");
  NoGradGuard no_grad;
  model.eval();
  const Device dev = model.wte.weight.device();
  Tensor x = model.wte.forward(from_vector(ids, {1, T}, {DType::i64, dev})) +
             model.wpe.forward(arange(T, {DType::i64, dev}));  // (1, T, C)
  for (int64_t l = 0; l < layer; ++l) x = model.h[static_cast<size_t>(l)]->forward(x);
  const nn::Block& block = *model.h[static_cast<size_t>(layer)];
  Tensor p = block.attn.probabilities(block.ln_1.forward(x));  // (1, H, T, T)
  return reshape(p, {c.n_head, T, T}).to(DType::f32).to(Device::cpu()).contiguous();
}

std::string attention_map_svg(const std::vector<float>& probs, const std::vector<std::string>& labels,
                              const std::string& title) {
  const size_t T = labels.size();
  if (probs.size() != T * T)
    throw ShapeError("attention_map_svg", fmt::format("{} probabilities for {} tokens", probs.size(), T));
  // Cells shrink for long passages so the picture stays about a screen wide.
  const double cell = std::clamp(760.0 / double(std::max<size_t>(T, 1)), 4.0, 28.0);
  const bool show_labels = cell >= 9;
  const double margin = show_labels ? 120 : 50, top = 50 + margin;
  const double side = cell * double(T);
  const double width = margin + side + 130, height = top + side + 50;
  std::string s = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{:.0f}\" height=\"{:.0f}\" "
      "viewBox=\"0 0 {:.0f} {:.0f}\" font-family=\"sans-serif\">\n<rect width=\"100%\" height=\"100%\" "
      "fill=\"white\"/>\n<text x=\"{:.0f}\" y=\"30\" font-size=\"20\" font-weight=\"bold\">{}</text>\n",
      width, height, width, height, margin, svg::escape(title));
  const double font = std::min(cell * 0.8, 14.0);
  for (size_t i = 0; i < T; ++i) {
    if (show_labels) {
      const std::string label = svg::escape(labels[i]);
      const double mid = double(i) * cell + cell * 0.7;
      s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"{:.1f}\" text-anchor=\"end\">{}</text>\n",
                       margin - 6, top + mid, font, label);
      s += fmt::format("<text transform=\"translate({:.1f},{:.1f}) rotate(-60)\" font-size=\"{:.1f}\">{}</text>\n",
                       margin + mid, top - 6, font, label);
    }
    for (size_t j = 0; j < T; ++j) {
      const double p = probs[i * T + j];
      // A square-root ramp, so the weak weights of a spread-out head stay visible.
      const int shade = 255 - static_cast<int>(std::lround(255 * std::sqrt(std::clamp(p, 0.0, 1.0))));
      s += fmt::format(
          "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"rgb({},{},255)\">"
          "<title>query {} -&gt; key {}: {:.6f}</title></rect>\n",
          margin + double(j) * cell, top + double(i) * cell, cell, cell, shade, shade, i, j, p);
    }
  }
  s += fmt::format("<rect x=\"{:.0f}\" y=\"{:.0f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"none\" "
                   "stroke=\"#888\"/>\n", margin, top, side, side);
  s += fmt::format("<text x=\"{:.0f}\" y=\"{:.0f}\" font-size=\"16\">key (earlier token) &#8594;</text>\n",
                   margin, top + side + 30);
  s += fmt::format("<text transform=\"translate({:.0f},{:.0f}) rotate(-90)\" font-size=\"16\" "
                   "text-anchor=\"end\">&#8592; query (token attending)</text>\n", 18.0, top);
  // The colour key: 0, 0.25, 1 (the ramp is a square root).
  for (int k = 0; k <= 4; ++k) {
    const double p = k / 4.0;
    const int shade = 255 - static_cast<int>(std::lround(255 * std::sqrt(p)));
    s += fmt::format("<rect x=\"{:.0f}\" y=\"{:.0f}\" width=\"24\" height=\"24\" fill=\"rgb({},{},255)\" "
                     "stroke=\"#888\"/><text x=\"{:.0f}\" y=\"{:.0f}\" font-size=\"15\">{:.2f}</text>\n",
                     margin + side + 20, top + 30.0 * k, shade, shade, margin + side + 50, top + 30.0 * k + 18, p);
  }
  return s + "</svg>\n";
}

}  // namespace keel::app
