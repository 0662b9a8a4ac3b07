// Hugging Face interchange: save/load round trip (bit-exact), the Conv1D transpose checked on a
// hand-built file, unprefixed names, ignored buffers, and malformed directories.
#include <doctest/doctest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/factory.h"
#include "nn/hf.h"
#include "ops/shape.h"
#include "temp_dir.h"

using namespace keel;
using namespace keel::nn;
namespace fs = std::filesystem;

namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

std::string error_of(const fs::path& dir) {
  try {
    load_pretrained(dir);
  } catch (const Error& e) {
    return std::string(e.kind()) + ": " + e.what();
  }
  return "";
}

Tensor some_ids() { return from_vector<int64_t>({1, 5, 9, 2, 7, 3, 3, 0}, {2, 4}); }

}  // namespace

TEST_CASE("save_pretrained / load_pretrained reproduce the model bit-exactly") {
  for (bool tied : {true, false})
    for (AttentionKind kind : {AttentionKind::mhsa, AttentionKind::qk_norm}) {
      GPT2Config c = GPT2Config::preset("tiny");
      c.tie_embeddings = tied, c.attention = kind, c.bias = tied;
      GPT2 m(c, 21);
      test::TempDir dir("hf_rt");
      save_pretrained(m, dir.path());
      CHECK(fs::exists(dir.path() / "config.json"));
      SafetensorsFile f = load_safetensors(dir.path() / "model.safetensors");
      CHECK(f.metadata.at("format") == "pt");
      CHECK(f.find("transformer.h.0.attn.c_attn.weight").shape() == Shape{c.n_embd, 3 * c.n_embd});  // Conv1D
      CHECK(f.find("transformer.h.1.mlp.c_fc.weight").shape() == Shape{c.n_embd, 4 * c.n_embd});
      CHECK(f.find("lm_head.weight").defined() == !tied);

      std::unique_ptr<GPT2> r = load_pretrained(dir.path());
      CHECK(r->config() == c);
      NamedTensors a = m.named_parameters(), b = r->named_parameters();
      REQUIRE(a.size() == b.size());
      for (size_t i = 0; i < a.size(); ++i) {
        CHECK(a[i].first == b[i].first);
        CHECK(a[i].second.to_vector<float>() == b[i].second.to_vector<float>());
      }
      if (tied) CHECK(r->lm_head->weight.impl() == r->wte.weight.impl());
      CHECK(m.forward(some_ids()).logits.to_vector<float>() == r->forward(some_ids()).logits.to_vector<float>());
    }
}

TEST_CASE("a hand-built HF file: Conv1D (in, out) becomes Linear (out, in), no prefix, buffers ignored") {
  GPT2Config c = GPT2Config::preset("tiny");
  c.n_layer = 1;
  GPT2 ref(c, 5);
  test::TempDir dir("hf_hand");
  c.save(dir.path() / "config.json");
  // A GPT2Model-style export: no "transformer." prefix, causal-mask buffers, a known c_attn.
  NamedTensors file;
  std::vector<float> known(c.n_embd * 3 * c.n_embd);
  for (size_t i = 0; i < known.size(); ++i) known[i] = static_cast<float>(i) * 0.001f;
  for (const auto& [name, t] : ref.named_parameters()) {
    std::string short_name = name.substr(std::string("transformer.").size());
    Tensor v = is_conv1d_weight(name) ? t.detach().as_strided({t.size(1), t.size(0)}, {1, t.size(1)}, 0) : t;
    if (name == "transformer.h.0.attn.c_attn.weight") v = from_vector<float>(known, {c.n_embd, 3 * c.n_embd});
    file.emplace_back(short_name, v);
  }
  file.emplace_back("h.0.attn.bias", ones({1, 1, c.block_size, c.block_size}));
  file.emplace_back("h.0.attn.masked_bias", scalar(-1e4));
  save_safetensors(dir.path() / "model.safetensors", file);

  std::unique_ptr<GPT2> m = load_pretrained(dir.path());
  std::vector<float> w = m->h[0]->attn.c_attn.weight.to_vector<float>();  // (3C, C)
  const int64_t C = c.n_embd;
  bool transposed = true;
  for (int64_t o = 0; o < 3 * C; ++o)
    for (int64_t i = 0; i < C; ++i) transposed &= w[o * C + i] == known[i * 3 * C + o];
  CHECK(transposed);
  CHECK(m->h[0]->mlp.c_proj.weight.to_vector<float>() == ref.h[0]->mlp.c_proj.weight.to_vector<float>());
  CHECK(m->wpe.weight.to_vector<float>() == ref.wpe.weight.to_vector<float>());
}

TEST_CASE("bf16 weights load into the f32 model") {
  GPT2Config c = GPT2Config::preset("tiny");
  GPT2 m(c, 2);
  test::TempDir dir("hf_bf16");
  m.to(DType::bf16);
  save_pretrained(m, dir.path());
  CHECK(load_safetensors(dir.path() / "model.safetensors").tensors[0].second.dtype() == DType::bf16);
  std::unique_ptr<GPT2> r = load_pretrained(dir.path());
  CHECK(r->wte.weight.dtype() == DType::f32);
  CHECK(r->wte.weight.to_vector<float>() == m.wte.weight.to_vector<float>());
}

TEST_CASE("malformed HF directories fail naming the file and the tensor") {
  GPT2Config c = GPT2Config::preset("tiny");
  c.tie_embeddings = false;
  GPT2 m(c, 3);
  test::TempDir dir("hf_bad");
  CHECK(contains(error_of(dir.path() / "nope"), "not a directory"));
  CHECK(contains(error_of(dir.path()), "config.json: no such file"));
  c.save(dir.path() / "config.json");
  CHECK(contains(error_of(dir.path()), "model.safetensors: no such file"));
  { std::ofstream(dir.path() / "pytorch_model.bin") << "x"; }
  CHECK(contains(error_of(dir.path()), "safe_serialization"));

  NamedTensors full = to_hf_tensors(m);
  auto write_without = [&](const std::string& drop) {
    NamedTensors t;
    for (auto& [n, v] : full)
      if (n != drop) t.emplace_back(n, v);
    save_safetensors(dir.path() / "model.safetensors", t);
  };
  write_without("transformer.h.1.ln_2.bias");
  std::string e = error_of(dir.path());
  CHECK(contains(e, "IoError"));
  CHECK(contains(e, "model.safetensors"));
  CHECK(contains(e, "missing tensor 'transformer.h.1.ln_2.bias'"));
  write_without("lm_head.weight");
  CHECK(contains(error_of(dir.path()), "tie_word_embeddings = false"));

  NamedTensors wrong = full;
  for (auto& [n, v] : wrong)
    if (n == "transformer.h.0.attn.c_attn.weight") v = transpose(v, 0, 1).contiguous();  // (out, in): not Conv1D
  save_safetensors(dir.path() / "model.safetensors", wrong);
  e = error_of(dir.path());
  CHECK(contains(e, "transformer.h.0.attn.c_attn.weight"));
  CHECK(contains(e, "Conv1D"));

  NamedTensors extra = full;
  extra.emplace_back("transformer.h.7.ln_1.weight", ones({c.n_embd}));
  save_safetensors(dir.path() / "model.safetensors", extra);
  CHECK(contains(error_of(dir.path()), "unexpected tensor 'transformer.h.7.ln_1.weight'"));

  save_safetensors(dir.path() / "model.safetensors", full);
  CHECK(error_of(dir.path()).empty());
  { std::ofstream(dir.path() / "config.json") << R"({"model_type": "bert", "n_layer": 2})"; }
  e = error_of(dir.path());
  CHECK(contains(e, "ConfigError"));
  CHECK(contains(e, "config.json"));
  CHECK(contains(e, "bert"));
}
