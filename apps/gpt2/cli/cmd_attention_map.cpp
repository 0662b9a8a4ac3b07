// `gpt2 attention-map RUN --text ... --layer L --head H [--out FILE.svg]`: a picture of one
// head's attention probabilities over a passage (see apps/gpt2/infer/attention_map.h).
#include <fmt/format.h>

#include <CLI/CLI.hpp>

#include "apps/gpt2/cli/commands.h"
#include "apps/gpt2/infer/attention_map.h"
#include "apps/gpt2/infer/run_model.h"
#include "apps/gpt2/run/placement.h"
#include "apps/gpt2/train/trainer.h"
#include "core/io.h"
#include "data/tokenizer/tokenizer.h"

namespace keel::app {

namespace {
struct MapArgs {
  std::string run_dir, text, vocab, out, device = "cpu";
  int64_t layer = 0, head = 0;
};

void run_attention_map(const MapArgs& a) {
  auto model = load_run_model(a.run_dir);
  const auto& c = model->config();
  if (a.head < 0 || a.head >= c.n_head)
    throw ConfigError("attention-map",
                      fmt::format("--head {} is out of range: the model has heads 0..{}", a.head, c.n_head - 1));
  data::Tokenizer tok = data::Tokenizer::from_dir(vocab_dir_for(a.vocab, a.run_dir));
  std::vector<int32_t> ids = tok.encode(a.text);
  if (static_cast<int64_t>(ids.size()) > c.block_size) ids.resize(static_cast<size_t>(c.block_size));
  model->to(resolve_device(a.device));
  Tensor p = attention_probabilities(*model, ids, a.layer);  // (H, T, T)
  const auto T = static_cast<int64_t>(ids.size());
  std::vector<float> all = p.to_vector<float>();
  std::vector<float> head(all.begin() + a.head * T * T, all.begin() + (a.head + 1) * T * T);
  std::vector<std::string> labels;
  for (int32_t id : ids) labels.push_back(tok.decode({id}));
  const AttentionSpec spec = c.attention_spec();
  const std::string kind =
      spec.is_local(a.head) ? fmt::format("local head, window {}", spec.window[a.head]) : "global head";
  const std::string out = a.out.empty() ? fmt::format("attention_L{}_H{}.svg", a.layer, a.head) : a.out;
  io::write_file_atomic(out,
                        attention_map_svg(head, labels,
                                          fmt::format("layer {}, head {} ({}), {} tokens", a.layer, a.head, kind, T)),
                        "attention-map");
  fmt::print("gpt2 attention-map: {} tokens, layer {} head {} ({}) written to {}\n", T, a.layer, a.head, kind, out);
}
}  // namespace

void add_attention_map_command(CLI::App& app) {
  auto a = std::make_shared<MapArgs>();
  CLI::App* cmd = app.add_subcommand("attention-map", "Draw one head's attention probabilities over a passage (SVG)");
  cmd->add_option("run_dir", a->run_dir, "a run directory written by `gpt2 train`")->required();
  cmd->add_option("--text", a->text, "the passage (cropped to the model's context)")->required();
  cmd->add_option("--layer", a->layer, "layer, from 0")->capture_default_str();
  cmd->add_option("--head", a->head, "head, from 0 (LS-attention: local heads first)")->capture_default_str();
  cmd->add_option("--out", a->out, "SVG file (default attention_L<layer>_H<head>.svg)");
  cmd->add_option("--vocab", a->vocab, "vocabulary directory (default: the run's)");
  cmd->add_option("--device", a->device, "auto | cpu | cuda | cuda:N")->capture_default_str();
  cmd->callback([a] { run_attention_map(*a); });
}

}  // namespace keel::app
