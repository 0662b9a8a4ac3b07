#include "nn/config.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/io.h"

namespace keel::nn {

using json = nlohmann::ordered_json;

const char* attention_kind_name(AttentionKind k) {
  for (const auto& [kind, name] : kAttentionKinds)
    if (kind == k) return name;
  return "?";  // only for a value cast from an integer outside the enum
}

AttentionKind parse_attention_kind(const std::string& s) {
  for (const auto& [kind, name] : kAttentionKinds)
    if (s == name) return kind;
  throw ConfigError("GPT2Config", "unknown attention variant '" + s + "'", "use one of " + attention_kind_names());
}

std::string attention_kind_names(const std::string& separator) {
  std::string out;
  for (const auto& [kind, name] : kAttentionKinds) out += (out.empty() ? "" : separator) + name;
  return out;
}

void GPT2Config::fill_ls_shape() {
  if (attention != AttentionKind::ls) return;
  if (ls_local_heads == 0) ls_local_heads = std::max<int64_t>(1, n_head - 1);
  if (ls_window == 0) ls_window = kPaperLsWindow;
}

int64_t GPT2Config::head_dim() const { return n_head > 0 ? n_embd / n_head : 0; }

AttentionSpec GPT2Config::attention_spec() const {
  AttentionSpec s = attention == AttentionKind::ls ? AttentionSpec::ls(n_head, ls_local_heads, ls_window)
                                                    : AttentionSpec::mhsa(n_head);
  if (attention == AttentionKind::softcap) s.softcap = softcap;
  return s;
}

void GPT2Config::validate() const {
  auto fail = [](const std::string& msg, const std::string& hint = {}) { throw ConfigError("GPT2Config", msg, hint); };
  auto positive = [&](const char* name, int64_t v) {
    if (v < 1) fail(std::string(name) + " must be at least 1, got " + std::to_string(v));
  };
  positive("n_layer", n_layer);
  positive("n_head", n_head);
  positive("n_embd", n_embd);
  positive("block_size", block_size);
  positive("vocab_size", vocab_size);
  if (n_embd % n_head != 0)
    fail("n_head = " + std::to_string(n_head) + " does not divide n_embd = " + std::to_string(n_embd),
         "the width must be n_head * head_dim");
  if (!(dropout >= 0 && dropout < 1)) fail("dropout must be in [0, 1), got " + std::to_string(dropout));
  if (!(layer_norm_epsilon > 0 && std::isfinite(layer_norm_epsilon)))
    fail("layer_norm_epsilon must be positive, got " + std::to_string(layer_norm_epsilon));
  if (!(init_std >= 0 && std::isfinite(init_std))) fail("init_std must be >= 0, got " + std::to_string(init_std));
  if (attention == AttentionKind::ls) {
    if (ls_local_heads < 1)
      fail("LS-attention needs at least one local head, ls_local_heads = " + std::to_string(ls_local_heads),
           "set ls_local_heads (the paper uses 5 of 6), or use attention mhsa");
    if (ls_local_heads > n_head)
      fail("ls_local_heads = " + std::to_string(ls_local_heads) + " is more than n_head = " + std::to_string(n_head));
    if (ls_window < 1) fail("ls_window must be at least 1 (the token itself), got " + std::to_string(ls_window));
    if (ls_window >= block_size)
      fail("ls_window = " + std::to_string(ls_window) + " is not below the context length " +
               std::to_string(block_size) + ", so the local heads would be global",
           "use a window smaller than block_size (the paper: 50 of 2048)");
  }
  if (attention == AttentionKind::softcap && !(softcap > 0 && std::isfinite(softcap)))
    fail("attention softcap must be a positive finite cap, got " + std::to_string(softcap));
}

std::string GPT2Config::summary() const {
  std::string s = std::to_string(n_layer) + " layers, " + std::to_string(n_head) + " heads x " +
                  std::to_string(head_dim()) + ", width " + std::to_string(n_embd) + ", T " +
                  std::to_string(block_size) + ", vocab " + std::to_string(vocab_size) + (bias ? ", bias" : ", no bias") +
                  (tie_embeddings ? ", tied" : ", untied") + ", " + attention_kind_name(attention);
  if (attention == AttentionKind::ls)
    s += " (" + std::to_string(ls_local_heads) + " local heads, w=" + std::to_string(ls_window) + ")";
  if (attention == AttentionKind::softcap) s += " (cap " + std::to_string(softcap) + ")";
  return s;
}

GPT2Config GPT2Config::preset(const std::string& name) {
  GPT2Config c;
  if (name == "gpt2-124m" || name == "gpt2") return c;  // the defaults are GPT-2 small
  if (name == "paper") {
    c.n_layer = 6, c.n_head = 6, c.n_embd = 192, c.block_size = 2048, c.vocab_size = 10000;
    c.bias = false, c.tie_embeddings = false;
    c.attention = AttentionKind::ls, c.ls_local_heads = 5, c.ls_window = kPaperLsWindow;
    return c;
  }
  if (name == "tiny") {
    c.n_layer = 2, c.n_head = 4, c.n_embd = 64, c.block_size = 64, c.vocab_size = 512;
    c.ls_local_heads = 2, c.ls_window = 8;  // ready for attention = ls
    return c;
  }
  throw ConfigError("GPT2Config::preset", "unknown preset '" + name + "'", "use paper, gpt2-124m or tiny");
}

std::vector<std::string> GPT2Config::preset_names() { return {"paper", "gpt2-124m", "tiny"}; }

std::string GPT2Config::to_json() const {
  json j;
  j["model_type"] = "gpt2";
  j["architectures"] = {"GPT2LMHeadModel"};
  j["n_layer"] = n_layer;
  j["n_head"] = n_head;
  j["n_embd"] = n_embd;
  j["n_positions"] = block_size;
  j["n_ctx"] = block_size;
  j["vocab_size"] = vocab_size;
  j["n_inner"] = nullptr;
  j["activation_function"] = "gelu_new";
  j["layer_norm_epsilon"] = layer_norm_epsilon;
  j["initializer_range"] = init_std;
  j["resid_pdrop"] = dropout;
  j["embd_pdrop"] = dropout;
  j["attn_pdrop"] = 0.0;  // keel has no dropout on attention probabilities
  j["tie_word_embeddings"] = tie_embeddings;
  j["bias"] = bias;
  j["attention"] = attention_kind_name(attention);
  j["ls_local_heads"] = ls_local_heads;
  j["ls_window"] = ls_window;
  j["qk_norm"] = attention == AttentionKind::qk_norm;
  j["attn_softcap"] = softcap;
  return j.dump(2) + "\n";
}

namespace {

// No config size is anywhere near this; larger values are typos or hostile, and refusing them
// early keeps every product of two sizes far from int64 overflow.
constexpr int64_t kMaxInt = int64_t{1} << 31;

struct Reader {
  const json& j;
  const std::string& source;

  [[noreturn]] void fail(const std::string& msg, const std::string& hint = {}) const {
    throw ConfigError("GPT2Config::from_json", source + ": " + msg, hint);
  }
  template <typename T> T get(const char* key, T fallback) const {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return fallback;
    if constexpr (std::is_same_v<T, bool>) {
      if (!it->is_boolean()) fail(std::string("'") + key + "' must be true or false, got " + io::quote_json(*it));
    } else if constexpr (std::is_integral_v<T>) {
      // Range-checked: 2^32 + 320 must not wrap to 320, nor 1e30 be cast to an integer.
      try {
        return io::get_int(*it, 0, kMaxInt, std::string("'") + key + "'");
      } catch (const ConfigError& e) {
        fail(e.message());
      }
    } else if constexpr (std::is_floating_point_v<T>) {
      if (!it->is_number()) fail(std::string("'") + key + "' must be a number, got " + io::quote_json(*it));
    } else {
      if (!it->is_string()) fail(std::string("'") + key + "' must be a string, got " + io::quote_json(*it));
    }
    return it->get<T>();
  }
};

}  // namespace

GPT2Config GPT2Config::from_json(const std::string& text, const std::string& source) {
  json j;
  try {
    j = io::parse_json<json>(text, source, "GPT2Config::from_json");
  } catch (const IoError& e) {
    throw ConfigError("GPT2Config::from_json", e.message(), e.hint());
  }
  if (!j.is_object()) throw ConfigError("GPT2Config::from_json", source + ": expected a JSON object");
  Reader r{j, source};
  const std::string type = r.get<std::string>("model_type", "");
  if (type != "gpt2")
    r.fail(type.empty() ? "no model_type, so this is not a GPT-2 config" : "model_type is '" + type + "', not 'gpt2'",
           "keel reads Hugging Face GPT-2 configs (\"model_type\": \"gpt2\")");
  const std::string act = r.get<std::string>("activation_function", "gelu_new");
  if (act != "gelu_new" && act != "gelu_pytorch_tanh")
    r.fail("activation_function '" + act + "' is not supported", "keel's GPT-2 uses the tanh GELU (gelu_new)");
  if (r.get<bool>("scale_attn_by_inverse_layer_idx", false))
    r.fail("scale_attn_by_inverse_layer_idx is not supported");
  if (!r.get<bool>("scale_attn_weights", true)) r.fail("scale_attn_weights = false is not supported");

  GPT2Config c;  // GPT-2 small's values for every key left out, as HF's GPT2Config does
  c.n_layer = r.get<int64_t>("n_layer", c.n_layer);
  c.n_head = r.get<int64_t>("n_head", c.n_head);
  c.n_embd = r.get<int64_t>("n_embd", c.n_embd);
  c.block_size = r.get<int64_t>("n_positions", r.get<int64_t>("n_ctx", c.block_size));
  c.vocab_size = r.get<int64_t>("vocab_size", c.vocab_size);
  const int64_t n_inner = r.get<int64_t>("n_inner", 4 * c.n_embd);
  if (n_inner != 4 * c.n_embd)
    r.fail("n_inner = " + std::to_string(n_inner) + " is not supported", "keel's MLP is 4 * n_embd wide");
  c.layer_norm_epsilon = r.get<double>("layer_norm_epsilon", c.layer_norm_epsilon);
  c.init_std = r.get<double>("initializer_range", c.init_std);
  c.dropout = r.get<double>("resid_pdrop", r.get<double>("embd_pdrop", 0.0));
  c.tie_embeddings = r.get<bool>("tie_word_embeddings", true);
  c.bias = r.get<bool>("bias", true);
  c.ls_local_heads = r.get<int64_t>("ls_local_heads", 0);
  c.ls_window = r.get<int64_t>("ls_window", 0);
  const bool qk = r.get<bool>("qk_norm", false);
  c.softcap = r.get<double>("attn_softcap", 0.0);
  if (j.contains("attention")) {
    c.attention = parse_attention_kind(r.get<std::string>("attention", "mhsa"));
    if (qk != (c.attention == AttentionKind::qk_norm))
      r.fail(std::string("'qk_norm' is ") + (qk ? "true" : "false") + " but 'attention' is '" +
             attention_kind_name(c.attention) + "'");
  } else {  // written by hand or by another tool: infer the variant from the keys that are set
    int set = (qk ? 1 : 0) + (c.softcap > 0 ? 1 : 0) + (c.ls_local_heads > 0 ? 1 : 0);
    if (set > 1) r.fail("qk_norm, attn_softcap and ls_local_heads each select a variant; set only one");
    c.attention = qk ? AttentionKind::qk_norm
                : c.softcap > 0 ? AttentionKind::softcap
                : c.ls_local_heads > 0 ? AttentionKind::ls
                : AttentionKind::mhsa;
  }
  if (c.softcap == 0) c.softcap = GPT2Config{}.softcap;  // unused unless the variant is softcap
  try {
    c.validate();
  } catch (const ConfigError& e) {
    throw ConfigError("GPT2Config::from_json", source + ": " + e.message(), e.hint());
  }
  return c;
}

GPT2Config GPT2Config::load(const std::filesystem::path& path) {
  return from_json(io::read_file(path, "GPT2Config::load", io::kMaxJsonBytes), path.string());
}

void GPT2Config::save(const std::filesystem::path& path) const { io::write_file_atomic(path, to_json(), "GPT2Config::save"); }

}  // namespace keel::nn
