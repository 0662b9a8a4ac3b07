// How a comparison reads itself (reading.h): each run's n/d, and the paragraph that the table and
// the report open with, on synthetic runs whose numbers the tests predict.
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "app_test_util.h"
#include "apps/gpt2/report/reading.h"
#include "apps/gpt2/report/report.h"
#include "synthetic_runs.h"

using namespace keel::app;
using keel::test::make_run;
using keel::test::read_text;
using keel::test::TempDir;
using keel::test::write_text;

namespace {

bool has(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

RunSummary shaped(const std::string& attention, const std::string& seq_len, double max_range) {
  RunSummary s;
  s.name = attention;
  s.config = {{"model.attention", attention}, {"model.n_embd", "32"}, {"model.n_head", "4"},
              {"model.n_positions", "1024"}, {"train.seq_len", seq_len}};
  s.max_range = max_range;
  s.steps = 200;
  return s;
}

// A run directory as `gpt2 train` leaves it: T = seq_len, 4 heads of width 8.
void shaped_run(const std::filesystem::path& dir, const std::string& attention, int seq_len, double growth) {
  make_run(dir, {.name = attention, .steps = 200, .layers = 2, .heads = 4, .logit_growth = growth});
  write_text(dir / "config.json", "{\"name\":\"" + attention + "\",\"model\":{\"n_layer\":2,\"n_head\":4,"
                                      "\"n_embd\":32,\"attention\":\"" + attention +
                                      "\"},\"train\":{\"seq_len\":" + std::to_string(seq_len) + "}}");
}

}  // namespace

TEST_CASE("n_over_d is the sequence length over the head width, the model's context when seq_len is 0") {
  CHECK(n_over_d(shaped("mhsa", "512", 1)) == 64.0);  // 512 / (32 / 4)
  CHECK(n_over_d(shaped("mhsa", "0", 1)) == 128.0);   // n_positions 1024
  CHECK(n_over_d_cell(shaped("mhsa", "512", 1)) == "64");
  CHECK(n_over_d_cell(shaped("mhsa", "100", 1)) == "12.5");
  RunSummary bare;
  CHECK_FALSE(n_over_d(bare).has_value());
  CHECK(n_over_d_cell(bare) == "-");
  CHECK(reading({{&bare}}).empty());  // nothing to say without a shape
}

TEST_CASE("at a small n/d the reading says the effect needs n >> d and where to see it") {
  const RunSummary m = shaped("mhsa", "64", 7.2), l = shaped("ls", "64", 6.1);  // n/d = 8
  const auto p = reading({{&m}, {&l}});
  REQUIRE(p.size() == 1);
  CHECK(has(p[0], "n/d = 8 in every run: sequence length n = 64 over head width d = 8"));
  CHECK(has(p[0], "needs n >> d"));
  CHECK(has(p[0], "(max logit range: MHSA 7.2, LS-attention 6.1)"));
  CHECK(has(p[0], "`bash .ci/demo --lab`"));
  CHECK(has(p[0], "`bash .ci/demo --figure1`"));
  const std::string html = reading_html(p);
  CHECK(has(html, "<code>bash .ci/demo --lab</code>"));
  CHECK(has(html, "n &#8811; d"));
  CHECK_FALSE(has(html, "`"));
}

TEST_CASE("at a large n/d without a separation the reading says what the effect takes") {
  const RunSummary m = shaped("mhsa", "512", 20), l = shaped("ls", "512", 15);
  const auto p = reading({{&m}, {&l}});
  REQUIRE(p.size() == 1);
  CHECK(has(p[0], "At n/d = 64 the paper's effect can show, but here MHSA's max logit range (20.0) is not 2"));
  CHECK(has(p[0], "--lab"));
}

TEST_CASE("in a learning-rate sweep MHSA is set against LS-attention at its own learning rate and z-loss") {
  // n/d = 64 throughout; LS at lr 1e-3 comes first, so pairing by n/d alone would set MHSA at
  // 1e-2 (range 90) against it (5) and report an 18-fold effect that is half the learning rate's.
  RunSummary ls_low = shaped("ls", "512", 5), mhsa_high = shaped("mhsa", "512", 90), ls_high = shaped("ls", "512", 30),
             mhsa_z = shaped("mhsa", "512", 40);
  ls_low.config.push_back({"train.lr", "0.001"});
  for (RunSummary* r : {&mhsa_high, &ls_high, &mhsa_z}) r->config.push_back({"train.lr", "0.01"});
  mhsa_z.config.push_back({"train.z_loss", "0.0001"});  // no LS run has this z-loss: no pair
  const auto p = reading({{&mhsa_z}, {&ls_low}, {&mhsa_high}, {&ls_high}});
  REQUIRE(p.size() == 1);
  CHECK(has(p[0], "reached 90.0 against LS-attention's 30.0, 3.0 times as high"));
}

TEST_CASE("where the effect shows, the reading says which curves part, where, and by how much") {
  TempDir dir("reading-effect");
  shaped_run(dir / "mhsa", "mhsa", 512, 0.01);  // layer l's logits grow like exp(0.01 (l + 1) step)
  shaped_run(dir / "ls", "ls", 512, 0);
  const auto [ms, mr] = load_run(dir / "mhsa");
  const auto [ls, lr] = load_run(dir / "ls");
  const auto p = reading({{&ms, &mr}, {&ls, &lr}});
  REQUIRE(p.size() == 1);
  CHECK(has(p[0], "n/d = 64 in every run"));
  // Layer 1, head 3: 0.8 * 4.5 * e^4 against 0.8 * 4.5.
  CHECK(has(p[0], "What to look at: at n/d = 64"));
  CHECK(has(p[0], "reached 196.6 against LS-attention's 3.6, 54.6 times as high"));
  // Layer 1's ratio e^(0.02 step) passes 2 at step 35; layer 0's final ratio (e^2) is smaller.
  CHECK(has(p[0], "the two curves part in layer 1: from step 35 on MHSA's stays at least 2 times as high, and at "
                  "step 200 it is 196.6 against 3.6"));
  CHECK_FALSE(has(p[0], "needs n >> d"));

  // The terminal table and the report carry the same: n/d per run, the reading first.
  CHECK(has(compare_table({ms, ls}), " n/d "));
  const auto out = dir / "report.html";
  write_report({(dir / "mhsa").string(), (dir / "ls").string()}, out.string(), "t");
  const std::string html = read_text(out);
  CHECK(has(html, "<th>n/d</th>"));
  CHECK(has(html, "<div class=\"note reading\"><p>n/d = 64 in every run"));
  CHECK(html.find("note reading") < html.find("<table>"));
}

TEST_CASE("reading_text wraps each paragraph at the width, a blank line between paragraphs") {
  const std::string t = reading_text({"aaa bbb ccc", "ddd"}, 7);
  CHECK(t == "aaa bbb\nccc\n\nddd\n");
}
