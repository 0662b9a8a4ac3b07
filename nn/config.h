// GPT2Config: every size and switch of the GPT-2 model, its named presets, validation, and its
// JSON form (Hugging Face GPT-2 config.json, plus keel-only keys for what HF has no word for).
//
// JSON keys (HF): model_type "gpt2", architectures, n_layer, n_head, n_embd, n_positions (= n_ctx),
// vocab_size, layer_norm_epsilon, activation_function "gelu_new", resid_pdrop / embd_pdrop /
// attn_pdrop, initializer_range, n_inner (null). keel-only: bias, tie_word_embeddings (HF knows it
// too), attention (a name of kAttentionKinds below), ls_local_heads, ls_window, qk_norm,
// attn_softcap. A plain HF GPT-2 config (no keel keys) reads as bias, tied, MHSA.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "ops/attention.h"

namespace keel::nn {

// The attention variants. kAttentionKinds is the one table of their names: config.json, the
// CLI's flags, their help and error messages, reports and the model all go through it, so a new
// variant is one enum value and one row here.
enum class AttentionKind { mhsa, ls, qk_norm, softcap };
struct AttentionKindName {
  AttentionKind kind;
  const char* name;
};
inline constexpr std::array<AttentionKindName, 4> kAttentionKinds{{
    {AttentionKind::mhsa, "mhsa"},        // standard multi-head self-attention
    {AttentionKind::ls, "ls"},            // LS-attention: local heads (window) + global heads
    {AttentionKind::qk_norm, "qk_norm"},  // MHSA with LayerNorm on each head's q and k
    {AttentionKind::softcap, "softcap"},  // MHSA with logits -> c * tanh(logits / c)
}};
const char* attention_kind_name(AttentionKind k);
AttentionKind parse_attention_kind(const std::string& s);  // ConfigError naming the variants
// Every name joined for help and hints: attention_kind_names(" | ") = "mhsa | ls | qk_norm | softcap".
std::string attention_kind_names(const std::string& separator = ", ");

// The paper's LS-attention window: a local head sees its last 50 keys (of 2048), itself included.
inline constexpr int64_t kPaperLsWindow = 50;

struct GPT2Config {
  int64_t n_layer = 12;
  int64_t n_head = 12;
  int64_t n_embd = 768;        // width C; head_dim D = n_embd / n_head
  int64_t block_size = 1024;   // context length (HF n_positions)
  int64_t vocab_size = 50257;
  bool bias = true;            // biases in every Linear and LayerNorm
  bool tie_embeddings = true;  // lm_head.weight is transformer.wte.weight
  double dropout = 0.0;        // embedding, attention-output and MLP-output dropout (not on probabilities)
  double layer_norm_epsilon = 1e-5;
  double init_std = 0.02;      // GPT-2's initializer_range

  // The attention variant. The ls_* and softcap fields are kept whatever the variant (so a preset
  // can switch variants without losing them) and only read by their own variant.
  AttentionKind attention = AttentionKind::mhsa;
  int64_t ls_local_heads = 0;  // LS: heads [0, ls_local_heads) are local, the rest global
  int64_t ls_window = 0;       // LS: a local head sees its last ls_window keys, itself included
  double softcap = 50.0;       // softcap: logits -> c * tanh(logits / c) (Gemma 2's attention value)

  // LS-attention asked for without its shape (ls_local_heads or ls_window 0) gets the paper's:
  // every head but one local, window kPaperLsWindow. Other variants are left as they are.
  void fill_ls_shape();

  int64_t head_dim() const;  // n_embd / n_head (validate() checks it divides)
  // The attention every layer runs, from the variant's fields: per-head windows (local heads
  // first), the soft cap, the default scale. The one place a config becomes windows.
  AttentionSpec attention_spec() const;
  // ConfigError with a clear message for any config that cannot work.
  void validate() const;
  // "12 layers, 12 heads x 64, width 768, T 1024, vocab 50257, bias, tied, mhsa"
  std::string summary() const;

  // Presets: "paper" (arXiv 2505.15548: 6 x 6 heads of 32, width 192, no bias, untied,
  // T 2048, vocab 10000, LS 5 local heads w=50 + 1 global), "gpt2-124m", and "tiny" (tests and
  // CPU demos: 2 layers, 4 heads, width 64, T 64, vocab 512). ConfigError for other names.
  static GPT2Config preset(const std::string& name);
  static std::vector<std::string> preset_names();

  // HF-style config.json text (pretty-printed) and back. from_json fills unspecified keys with
  // GPT-2's defaults, validates, and throws ConfigError naming `source` (a file name) on bad input.
  std::string to_json() const;
  static GPT2Config from_json(const std::string& text, const std::string& source = "config.json");
  static GPT2Config load(const std::filesystem::path& path);  // IoError when unreadable
  void save(const std::filesystem::path& path) const;        // atomic write

  bool operator==(const GPT2Config&) const = default;
};

}  // namespace keel::nn
