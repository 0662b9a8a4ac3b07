// Typed configuration: one name table for the attention variants, one default per knob, and one
// ignore index. Each test pins a place that used to spell a value of its own.
#include <doctest/doctest.h>

#include <CLI/CLI.hpp>
#include <array>
#include <cmath>
#include <cstdio>
#include <memory>
#include <set>

#include "apps/gpt2/cli/train_flags.h"
#include "apps/gpt2/run/checkpoint.h"
#include "apps/gpt2/run/placement.h"
#include "apps/gpt2/train/train_config.h"
#include "apps/gpt2/train/trainer.h"
#include "core/factory.h"
#include "core/io.h"
#include "data/loader.h"
#include "ops/cross_entropy.h"
#include "ops/shape.h"
#include "optim/adamw.h"
#include "optim/schedule.h"
#include "train_fixture.h"

using namespace keel;
using namespace keel::app;
namespace fs = std::filesystem;

namespace {
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}
// A run as made before the softcap default moved: trained 4 steps, its newest checkpoint (step 4)
// removed so a resume has work to do, and "softcap": 30.0 recorded in its config.json. It is also
// as old keel versions wrote it: overrides that were not given recorded as 0, -1 or "".
TrainConfig make_old_run(const std::string& name, const std::string& attention) {
  TrainConfig c = testing::tiny_config(name);
  c.model.attention = attention;
  c.max_steps = 4, c.ckpt_every = 2, c.keep_checkpoints = 5, c.val_every = 0;
  train(c);
  fs::remove_all(fs::path(c.run_dir) / "checkpoints" / "step_00000004");
  const fs::path p = fs::path(c.run_dir) / "config.json";
  nlohmann::json j = io::read_json_file(p, "test");
  j["train"]["softcap"] = 30.0;
  const nlohmann::json legacy = {{"n_layer", 0}, {"n_head", 0}, {"ls_local_heads", -1}, {"ls_window", 0},
                                 {"bias", -1},   {"tie_embeddings", -1}};
  j["train"].update(legacy);
  io::write_file_atomic(p, j.dump(2) + "\n", "test");
  // Its checkpoints recorded the same identity (resume checks that they agree).
  const fs::path state = fs::path(c.run_dir) / "checkpoints" / "step_00000002" / "trainer.json";
  nlohmann::json t = io::read_json_file(state, "test");
  t["identity"]["softcap"] = 30.0;
  t["identity"].update(legacy);
  io::write_file_atomic(state, t.dump(2) + "\n", "test");
  c.resume = true;
  return c;
}
}  // namespace

TEST_CASE("attention variants: one table of names, each name parsed back to its variant") {
  std::set<std::string> names;
  for (const auto& [kind, name] : nn::kAttentionKinds) {
    CHECK(nn::parse_attention_kind(name) == kind);
    CHECK(std::string(nn::attention_kind_name(kind)) == name);
    names.insert(name);
  }
  CHECK(names.size() == nn::kAttentionKinds.size());
  CHECK(nn::attention_kind_names(" | ") == "mhsa | ls | qk_norm | softcap");
  const std::string e = error_of([] { nn::parse_attention_kind("linear"); });
  CHECK(e.find("'linear'") != std::string::npos);
  CHECK(e.find(nn::attention_kind_names()) != std::string::npos);
}

TEST_CASE("attention variants: the train flags accept every name of the table and list them all") {
  for (const auto& [kind, name] : nn::kAttentionKinds) {
    TrainConfig c;
    c.data = "d", c.run_dir = "r";
    c.model.attention = name;
    CHECK_NOTHROW(c.validate());
    CHECK(model_config(c, 512).attention == kind);  // the model gets the very variant named
  }
  TrainConfig c;
  c.data = "d", c.run_dir = "r";
  c.model.attention = "linear";
  const std::string e = error_of([&] { c.validate(); });
  CHECK(e.find("--attention") != std::string::npos);
  CHECK(e.find(nn::attention_kind_names()) != std::string::npos);

  CLI::App app;
  TrainConfig flags;
  std::string config_file;
  add_train_flags(app, &flags, &config_file);
  const std::string help = app.help();
  CHECK(help.find(nn::attention_kind_names(" | ")) != std::string::npos);
  for (const std::string& p : nn::GPT2Config::preset_names()) CHECK(help.find(p) != std::string::npos);
}

TEST_CASE("one default per knob: a default TrainConfig is each preset as nn defines it, with optim's defaults") {
  for (const std::string& p : nn::GPT2Config::preset_names()) {
    TrainConfig c;
    c.preset = p;
    const nn::GPT2Config want = nn::GPT2Config::preset(p);
    CHECK_MESSAGE(model_config(c, uint32_t(want.vocab_size)) == want, p);
  }
  const TrainConfig c;
  const nn::GPT2Config model;
  CHECK(c.model.softcap == model.softcap);
  CHECK(c.model.softcap == 50.0);  // Gemma 2's cap for attention logits, which is what keel caps
  CHECK(c.model.dropout == model.dropout);
  const optim::AdamWOptions adamw;
  CHECK(c.lr == adamw.lr);
  CHECK(c.beta1 == adamw.beta1);
  CHECK(c.beta2 == adamw.beta2);
  CHECK(c.weight_decay == adamw.weight_decay);
  const optim::CosineSchedule schedule;
  CHECK(c.lr == schedule.lr);
  CHECK(c.min_lr == schedule.min_lr);
  CHECK(size_t(c.bucket_mb * (1 << 20)) == optim::kDefaultBucketBytes);
  // LS-attention on a preset without an LS shape gets the paper's: one global head, window 50.
  TrainConfig ls;
  ls.preset = "gpt2-124m";
  ls.model.attention = "ls";
  const nn::GPT2Config m = model_config(ls, 50257);
  CHECK(m.ls_local_heads == m.n_head - 1);
  CHECK(m.ls_window == nn::GPT2Config::preset("paper").ls_window);
}

TEST_CASE("ignore index: the loader's padding reaches cross_entropy as its ignore index") {
  // Hugging Face's -100. ops/ and data/ do not see each other; this test sees both.
  static_assert(data::kIgnoreTarget == kIgnoreIndex && kIgnoreIndex == -100);
  data::Batch b;
  b.batch_size = 1, b.seq_len = 4;
  b.inputs = {1, 2, 3, 0};
  b.targets = {2, 3, 4, data::kIgnoreTarget};
  b.valid_targets = 3;
  auto [ids, targets] = batch_tensors(b, Device::cpu());
  CHECK(targets.to_vector<int32_t>() == b.targets);  // passed on as it is
  Generator gen(5);
  Tensor logits = randn({1, 4, 6}, gen);
  const double all = cross_entropy(logits, targets).item();
  const double valid = cross_entropy(slice(logits, 1, 0, 3), slice(targets, 1, 0, 3)).item();
  CHECK(all == doctest::Approx(valid).epsilon(1e-6));
}

TEST_CASE("softcap default moved from 30 to 50: old runs resume, and a softcap run says what differs") {
  TrainConfig mhsa = make_old_run("old_mhsa", "mhsa");
  CHECK(mhsa.model.softcap == 50.0);
  CHECK(train(mhsa).steps == 4);  // the cap is no part of an MHSA model

  TrainConfig capped = make_old_run("old_softcap", "softcap");
  const std::string e = error_of([&] { train(capped); });
  CHECK(e.find("configuration differs") != std::string::npos);
  CHECK(e.find("softcap: 30.0 saved, 50.0 now") != std::string::npos);
  capped.model.softcap = 30.0;  // what `gpt2 train --resume --run-dir` reads from config.json
  CHECK(train(capped).steps == 4);
}

#ifdef KEEL_GPT2_BIN
TEST_CASE("softcap default: `gpt2 train --resume --run-dir` continues an old softcap run with its own cap") {
  const TrainConfig c = make_old_run("old_softcap_cli", "softcap");
  const fs::path p = fs::path(c.run_dir) / "config.json";
  const std::string cmd = std::string(KEEL_GPT2_BIN) + " train --resume --run-dir '" + c.run_dir + "' 2>&1";
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(cmd.c_str(), "r"), pclose);
  REQUIRE(pipe);
  std::string out;
  std::array<char, 4096> buf{};
  while (fgets(buf.data(), buf.size(), pipe.get())) out += buf.data();
  CHECK_MESSAGE(pclose(pipe.release()) == 0, out);
  CHECK(io::read_json_file(p, "test")["train"]["softcap"] == 30.0);
  CHECK(io::read_json_file(p, "test")["model"]["attn_softcap"] == 30.0);
}
#endif

TEST_CASE("model overrides: not given is std::nullopt, written as null, and old files' 0 / -1 / \"\" read as not given") {
  TrainConfig c;
  CHECK_FALSE(c.model.changes_architecture());
  const nlohmann::json j = c.to_json();
  for (const char* key : {"attention", "n_layer", "n_head", "n_embd", "ls_local_heads", "ls_window", "bias",
                          "tie_embeddings", "seq_len"})
    CHECK_MESSAGE(j.at(key).is_null(), key);

  c.merge_json({{"n_layer", 3}, {"ls_local_heads", 0}, {"bias", false}, {"tie_embeddings", 1}, {"seq_len", 64}},
               "given");
  CHECK(c.model.n_layer == 3);
  CHECK(c.model.ls_local_heads == 0);  // 0 local heads is a value, not "not given"
  CHECK(c.model.bias == false);
  CHECK(c.model.tie_embeddings == true);  // 1 / 0 as older files wrote booleans
  CHECK(c.seq_len == 64);
  CHECK(c.model.changes_architecture());
  nn::GPT2Config m = nn::GPT2Config::preset("tiny");
  const nn::GPT2Config preset = m;
  c.model.apply_to(m);
  CHECK(m.n_layer == 3);
  CHECK_FALSE(m.bias);
  CHECK(m.n_head == preset.n_head);  // not given: the preset's

  c.merge_json({{"n_layer", 0}, {"ls_local_heads", -1}, {"bias", -1}, {"attention", ""}, {"seq_len", 0},
                {"tie_embeddings", nullptr}},
               "old run");
  CHECK_FALSE(c.model.changes_architecture());
  CHECK_FALSE(c.seq_len);
  CHECK(c.to_json() == TrainConfig{}.to_json());

  CHECK_THROWS_AS(c.merge_json({{"bias", 2}}, "f"), ConfigError);
  CHECK_THROWS_AS(c.merge_json({{"n_layer", "3"}}, "f"), ConfigError);
  c.merge_json({{"n_layer", -2}}, "f");  // read as given, then refused by validate() naming the flag
  c.data = "d", c.run_dir = "r";
  CHECK(error_of([&] { c.validate(); }).find("--n-layer") != std::string::npos);
}

TEST_CASE("model overrides from flags: only the flags given are set") {
  CLI::App app;
  TrainConfig flags;
  std::string config_file;
  add_train_flags(app, &flags, &config_file);
  app.parse("--bias 0 --n-layer 3", false);
  CHECK(flags.model.n_layer == 3);
  CHECK(flags.model.bias == false);
  CHECK_FALSE(flags.model.n_head);
  CHECK_FALSE(flags.model.attention);
  CHECK_FALSE(flags.seq_len);
  TrainConfig bad;
  CLI::App app2;
  add_train_flags(app2, &bad, &config_file);
  CHECK_THROWS_AS(app2.parse("--bias 2", false), CLI::ParseError);
}
