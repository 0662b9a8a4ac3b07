// The teaching tools of docs/instability.md: the degrees-of-freedom lab shows its effect at
// small sizes, and attention maps draw real probabilities.
#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <regex>

#include "markup.h"

#include "apps/gpt2/infer/attention_map.h"
#include "apps/gpt2/lab/lab_dof.h"
#include "core/error.h"

using namespace keel;
using namespace keel::app;

namespace {

using keel::test::well_formed;

}  // namespace

TEST_CASE("dof lab: a global head fails the dense local target once n >> d, a local head fits it") {
  DofLabConfig cfg;
  cfg.n = {16, 128};
  cfg.d = {4};
  cfg.steps = 150;
  const std::vector<DofFit> fits = run_dof_lab(cfg);
  REQUIRE(fits.size() == 4);  // (n 16: global, local), (n 128: global, local)
  const DofFit &g_short = fits[0], &l_short = fits[1], &g_long = fits[2], &l_long = fits[3];
  INFO(dof_table(fits));
  CHECK_FALSE(g_short.local);
  CHECK(l_short.local);
  // The local head needs no rank for the band: a near-exact fit with near-zero logits at any n.
  for (const DofFit* l : {&l_short, &l_long}) {
    CHECK(l->kl < 1e-3);
    CHECK(l->logit_range < 0.5);
    CHECK(l->max_logit < 2.0);
  }
  // The global head at n/d = 32 fits much worse than at n/d = 4 (measured: about 10x) ...
  CHECK(g_long.kl > 3 * g_short.kl);
  CHECK(g_long.kl > 0.03);
  // ... and needs a far wider logit range for what it does fit (measured: about 15 vs 4.5).
  CHECK(g_long.logit_range > 1.5 * g_short.logit_range);
  CHECK(g_long.logit_range > 20 * l_long.logit_range);
  CHECK(g_long.max_logit > 3 * l_long.max_logit);
  // Deterministic from the seed.
  const DofFit again = fit_head(cfg, 128, 4, false);
  CHECK(again.kl == g_long.kl);
  CHECK(again.max_logit == g_long.max_logit);
}

TEST_CASE("dof lab: the report page and table render, a bad grid is a ConfigError") {
  DofLabConfig cfg;
  cfg.n = {8, 16};
  cfg.d = {2, 4};
  cfg.steps = 5;
  const auto fits = run_dof_lab(cfg);
  const std::string html = dof_report_html(cfg, fits);
  CHECK(html.rfind("<!DOCTYPE html>", 0) == 0);
  CHECK(well_formed(html.substr(html.find("<html"))));
  CHECK(html.find("global head, d = 2") != std::string::npos);
  CHECK(html.find("local head, d = 4") != std::string::npos);
  CHECK(dof_table(fits).find("global KL") != std::string::npos);
  cfg.d = {0};
  CHECK_THROWS_AS(run_dof_lab(cfg), ConfigError);
  cfg.d = {4};
  cfg.floor = 1;
  CHECK_THROWS_AS(run_dof_lab(cfg), ConfigError);
  cfg.floor = 0;
  cfg.n = {};
  CHECK_THROWS_AS(run_dof_lab(cfg), ConfigError);
}

TEST_CASE("attention maps: rows are probabilities, local heads stay in their band, the SVG reads back") {
  nn::GPT2Config c = nn::GPT2Config::preset("tiny");  // 2 layers, 4 heads
  c.attention = nn::AttentionKind::ls;
  c.ls_local_heads = 2;
  c.ls_window = 3;
  nn::GPT2 model(c, 5);
  const std::vector<int32_t> ids = {5, 17, 3, 99, 42, 7, 7, 250, 1, 64};
  const auto T = static_cast<int64_t>(ids.size());
  const Tensor p = attention_probabilities(model, ids, 1);
  REQUIRE(p.shape() == Shape{c.n_head, T, T});
  const std::vector<float> v = p.to_vector<float>();
  for (int64_t h = 0; h < c.n_head; ++h)
    for (int64_t i = 0; i < T; ++i) {
      double row = 0;
      for (int64_t j = 0; j < T; ++j) {
        const double x = v[size_t((h * T + i) * T + j)];
        const bool visible = j <= i && (h >= c.ls_local_heads || i - j < c.ls_window);
        if (!visible) CHECK(x == 0.0);
        else CHECK(x > 0.0);
        row += x;
      }
      CHECK(row == doctest::Approx(1.0).epsilon(1e-5));
    }
  CHECK_THROWS_AS(attention_probabilities(model, ids, 2), ConfigError);
  CHECK_THROWS_AS(attention_probabilities(model, {}, 0), ConfigError);

  // The picture of head 0: one cell per (query, key), whose hover text carries the probability.
  std::vector<float> head(v.begin(), v.begin() + T * T);
  std::vector<std::string> labels;
  for (int32_t id : ids) labels.push_back("<t" + std::to_string(id) + "&>");  // must be escaped
  const std::string svg = attention_map_svg(head, labels, "layer 1, head 0");
  CHECK(svg.rfind("<svg", 0) == 0);
  CHECK(well_formed(svg));
  CHECK(svg.find("<t5&>") == std::string::npos);
  std::map<int, double> rows;
  static const std::regex cell(R"(query (\d+) -&gt; key (\d+): ([0-9.]+))");
  int cells = 0;
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), cell); it != std::sregex_iterator(); ++it, ++cells)
    rows[std::stoi((*it)[1])] += std::stod((*it)[3]);
  CHECK(cells == T * T);
  REQUIRE(rows.size() == size_t(T));
  for (const auto& [i, sum] : rows) CHECK(sum == doctest::Approx(1.0).epsilon(1e-4));
  CHECK_THROWS_AS(attention_map_svg({0.5f}, labels, "x"), ShapeError);
}
