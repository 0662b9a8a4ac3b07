// GPT2Config: presets, validation errors, JSON round trip, a plain Hugging Face config.
#include <doctest/doctest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "nn/config.h"
#include "temp_dir.h"

using namespace keel;
using namespace keel::nn;

namespace {

std::string message_of(const GPT2Config& c) {
  try {
    c.validate();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// transformers' config.json for "gpt2", as downloaded (trimmed of task_specific_params).
const char* kHfGpt2 = R"({
  "activation_function": "gelu_new",
  "architectures": ["GPT2LMHeadModel"],
  "attn_pdrop": 0.1,
  "bos_token_id": 50256,
  "embd_pdrop": 0.1,
  "eos_token_id": 50256,
  "initializer_range": 0.02,
  "layer_norm_epsilon": 1e-05,
  "model_type": "gpt2",
  "n_ctx": 1024,
  "n_embd": 768,
  "n_head": 12,
  "n_layer": 12,
  "n_positions": 1024,
  "resid_pdrop": 0.1,
  "summary_activation": null,
  "summary_first_dropout": 0.1,
  "summary_proj_to_labels": true,
  "summary_type": "cls_index",
  "summary_use_proj": true,
  "vocab_size": 50257
})";

}  // namespace

TEST_CASE("presets") {
  GPT2Config p = GPT2Config::preset("paper");
  CHECK(p.n_layer == 6);
  CHECK(p.n_head == 6);
  CHECK(p.head_dim() == 32);
  CHECK(p.n_embd == 192);
  CHECK(p.block_size == 2048);
  CHECK(p.vocab_size == 10000);
  CHECK_FALSE(p.bias);
  CHECK_FALSE(p.tie_embeddings);
  CHECK(p.attention == AttentionKind::ls);
  CHECK(p.ls_local_heads == 5);
  CHECK(p.ls_window == 50);
  GPT2Config g = GPT2Config::preset("gpt2-124m");
  CHECK(g.n_layer == 12);
  CHECK(g.n_embd == 768);
  CHECK(g.block_size == 1024);
  CHECK(g.vocab_size == 50257);
  CHECK(g.bias);
  CHECK(g.tie_embeddings);
  CHECK(g.attention == AttentionKind::mhsa);
  for (const std::string& n : GPT2Config::preset_names()) CHECK_NOTHROW(GPT2Config::preset(n).validate());
  CHECK_THROWS_AS(GPT2Config::preset("gpt5"), ConfigError);
}

TEST_CASE("validate() names what is contradictory") {
  GPT2Config base = GPT2Config::preset("tiny");
  GPT2Config c = base;
  c.n_head = 3;
  CHECK(contains(message_of(c), "does not divide n_embd"));
  c = base, c.n_layer = 0;
  CHECK(contains(message_of(c), "n_layer"));
  c = base, c.vocab_size = -1;
  CHECK(contains(message_of(c), "vocab_size"));
  c = base, c.dropout = 1.0;
  CHECK(contains(message_of(c), "dropout"));
  c = base, c.attention = AttentionKind::ls, c.ls_local_heads = 5;
  CHECK(contains(message_of(c), "more than n_head"));
  c = base, c.attention = AttentionKind::ls, c.ls_local_heads = 0;
  CHECK(contains(message_of(c), "at least one local head"));
  c = base, c.attention = AttentionKind::ls, c.ls_window = 0;
  CHECK(contains(message_of(c), "ls_window must be at least 1"));
  c = base, c.attention = AttentionKind::ls, c.ls_window = c.block_size;
  CHECK(contains(message_of(c), "would be global"));
  c = base, c.attention = AttentionKind::softcap, c.softcap = 0;
  CHECK(contains(message_of(c), "softcap"));
  c = base, c.attention = AttentionKind::ls, c.ls_local_heads = 4;  // all heads local is allowed
  CHECK(message_of(c).empty());
  c = base, c.ls_window = 0;  // LS fields are ignored by MHSA
  CHECK(message_of(c).empty());
  CHECK_THROWS_AS(parse_attention_kind("flash"), ConfigError);
}

TEST_CASE("JSON round trip keeps every field, file round trip too") {
  for (AttentionKind kind : {AttentionKind::mhsa, AttentionKind::ls, AttentionKind::qk_norm, AttentionKind::softcap}) {
    GPT2Config c = GPT2Config::preset("paper");
    c.attention = kind;
    c.softcap = 30;
    c.dropout = 0.125;
    c.layer_norm_epsilon = 1e-6;
    c.vocab_size = 12345;
    CHECK(GPT2Config::from_json(c.to_json()) == c);
  }
  GPT2Config c = GPT2Config::preset("tiny");
  auto j = nlohmann::json::parse(c.to_json());
  CHECK(j["model_type"] == "gpt2");
  CHECK(j["n_positions"] == 64);
  CHECK(j["activation_function"] == "gelu_new");
  CHECK(j["tie_word_embeddings"] == true);
  CHECK(j["qk_norm"] == false);
  test::TempDir dir("config");
  c.save(dir.path() / "config.json");
  CHECK(GPT2Config::load(dir.path() / "config.json") == c);
  CHECK_THROWS_AS(GPT2Config::load(dir.path() / "missing.json"), IoError);
}

TEST_CASE("a plain Hugging Face GPT-2 config reads as bias, tied, MHSA") {
  GPT2Config c = GPT2Config::from_json(kHfGpt2);
  CHECK(c.n_layer == 12);
  CHECK(c.n_head == 12);
  CHECK(c.n_embd == 768);
  CHECK(c.block_size == 1024);
  CHECK(c.vocab_size == 50257);
  CHECK(c.bias);
  CHECK(c.tie_embeddings);
  CHECK(c.attention == AttentionKind::mhsa);
  CHECK(c.dropout == 0.1);
  CHECK(c.layer_norm_epsilon == 1e-5);
}

TEST_CASE("keel keys without 'attention' select the variant, contradictions are refused") {
  auto with = [](const std::string& extra) {
    return std::string(R"({"model_type": "gpt2", "n_layer": 2, "n_head": 4, "n_embd": 64, "n_positions": 64, )") +
           extra + "}";
  };
  CHECK(GPT2Config::from_json(with(R"("qk_norm": true)")).attention == AttentionKind::qk_norm);
  CHECK(GPT2Config::from_json(with(R"("attn_softcap": 20.0)")).softcap == 20.0);
  GPT2Config ls = GPT2Config::from_json(with(R"("ls_local_heads": 3, "ls_window": 16, "bias": false)"));
  CHECK(ls.attention == AttentionKind::ls);
  CHECK(ls.attention_spec().window == std::vector<int64_t>{16, 16, 16, 0});
  CHECK_FALSE(ls.bias);
  CHECK_THROWS_AS(GPT2Config::from_json(with(R"("qk_norm": true, "ls_local_heads": 3, "ls_window": 4)")), ConfigError);
  CHECK_THROWS_AS(GPT2Config::from_json(with(R"("attention": "mhsa", "qk_norm": true)")), ConfigError);
  CHECK_THROWS_AS(GPT2Config::from_json(with(R"("attention": "ring")")), ConfigError);
}

TEST_CASE("bad config JSON: not GPT-2, malformed, wrong types, unsupported features") {
  CHECK_THROWS_AS(GPT2Config::from_json("{not json", "x.json"), ConfigError);
  try {
    GPT2Config::from_json(R"({"model_type": "llama"})", "dir/config.json");
    FAIL("no throw");
  } catch (const ConfigError& e) {
    CHECK(contains(e.what(), "dir/config.json"));
    CHECK(contains(e.what(), "llama"));
  }
  CHECK_THROWS_AS(GPT2Config::from_json(R"({"n_layer": 2})"), ConfigError);  // no model_type
  CHECK_THROWS_AS(GPT2Config::from_json("[1, 2]"), ConfigError);
  CHECK_THROWS_AS(GPT2Config::from_json(R"({"model_type": "gpt2", "n_layer": "six"})"), ConfigError);
  CHECK_THROWS_AS(GPT2Config::from_json(R"({"model_type": "gpt2", "activation_function": "relu"})"), ConfigError);
  CHECK_THROWS_AS(GPT2Config::from_json(R"({"model_type": "gpt2", "n_inner": 1000})"), ConfigError);
  CHECK_THROWS_AS(GPT2Config::from_json(R"({"model_type": "gpt2", "n_head": 7})"), ConfigError);
  CHECK_THROWS_AS(GPT2Config::from_json(R"({"model_type": "gpt2", "scale_attn_by_inverse_layer_idx": true})"),
                  ConfigError);
}

TEST_CASE("config.json: deep nesting, wrapping integers and floats where integers belong are refused") {
  const std::string deep = "{\"model_type\": \"gpt2\", \"x\": " + std::string(200000, '[') + std::string(200000, ']') + "}";
  try {
    GPT2Config::from_json(deep, "run/config.json");
    FAIL("no throw");
  } catch (const ConfigError& e) {
    CHECK(contains(e.what(), "run/config.json"));
    CHECK(contains(e.what(), "nested deeper"));
  }
  // 2^32 + 320 must not become 320, nor 2^64 - 1 become -1, nor 1e30 be cast.
  CHECK_THROWS_AS(GPT2Config::from_json(R"({"model_type": "gpt2", "vocab_size": 4294967616})"), ConfigError);
  CHECK_THROWS_AS(GPT2Config::from_json(R"({"model_type": "gpt2", "n_layer": 18446744073709551615})"), ConfigError);
  CHECK_THROWS_AS(GPT2Config::from_json(R"({"model_type": "gpt2", "n_layer": 1e30})"), ConfigError);
  CHECK_THROWS_AS(GPT2Config::from_json(R"({"model_type": "gpt2", "n_layer": [[[[2]]]]})"), ConfigError);
}
