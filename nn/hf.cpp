#include "nn/hf.h"

#include <map>

#include "core/autograd.h"
#include "core/copy.h"
#include "core/io.h"
#include "ops/shape.h"

namespace keel::nn {
namespace fs = std::filesystem;

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// "transformer.h.0.ln_1.weight" and "h.0.ln_1.weight" are the same tensor.
std::string canonical(const std::string& name) {
  static const std::string prefix = "transformer.";
  if (name.rfind(prefix, 0) == 0 || name.rfind("lm_head.", 0) == 0) return name;
  return prefix + name;
}

// Causal-mask buffers some exports carry: not parameters, keel builds its mask in the kernel.
bool is_ignored_buffer(const std::string& name) {
  return ends_with(name, ".attn.bias") || ends_with(name, ".attn.masked_bias");
}

}  // namespace

bool is_conv1d_weight(const std::string& name) {
  return ends_with(name, ".attn.c_attn.weight") || ends_with(name, ".attn.c_proj.weight") ||
         ends_with(name, ".mlp.c_fc.weight") || ends_with(name, ".mlp.c_proj.weight");
}

NamedTensors to_hf_tensors(const GPT2& model) {
  NoGradGuard no_grad;
  NamedTensors out = model.state();  // tied: wte only, as HF writes it
  for (auto& [name, t] : out)
    if (is_conv1d_weight(name)) t = transpose(t, 0, 1).contiguous();
  return out;
}

void load_hf_tensors(GPT2& model, const NamedTensors& tensors, const std::string& source) {
  static const char* kOp = "load_pretrained";
  std::map<std::string, Tensor> given;
  for (const auto& [raw, t] : tensors) {
    if (is_ignored_buffer(raw)) continue;
    std::string name = canonical(raw);
    if (!given.emplace(name, t).second)
      throw IoError(kOp, source + ": tensor '" + name + "' appears twice (with and without the transformer. prefix)");
  }
  const bool tied = model.config().tie_embeddings;
  if (tied) given.erase("lm_head.weight");  // HF files may repeat it; the tied model reads wte

  NamedTensors state;
  for (const auto& [name, p] : model.named_parameters()) {
    auto it = given.find(name);
    if (it == given.end()) {
      std::string hint = "the file and config.json disagree (layers, variant or bias?)";
      if (name == "lm_head.weight") hint = "config.json says tie_word_embeddings = false, but the file has no lm_head";
      throw IoError(kOp, source + ": missing tensor '" + name + "'", hint);
    }
    Tensor t = it->second;
    const bool conv = is_conv1d_weight(name);
    if (conv && t.dim() == 2) t = transpose(t, 0, 1);  // Conv1D (in, out) -> Linear (out, in)
    if (t.shape() != p.shape()) {
      Shape want = p.shape();
      if (conv) std::swap(want[0], want[1]);
      throw IoError(kOp,
                    source + ": tensor '" + it->first + "' has shape " + shape_str(it->second.shape()) + ", expected " +
                        shape_str(want) + (conv ? " (Conv1D layout: in, out)" : ""),
                    "the file and config.json disagree");
    }
    if (!is_floating(t.dtype()))
      throw IoError(kOp, source + ": tensor '" + name + "' has dtype " + dtype_name(t.dtype()) + ", expected floating");
    state.emplace_back(name, t);
    given.erase(it);
  }
  if (!given.empty())
    throw IoError(kOp, source + ": unexpected tensor '" + given.begin()->first + "' (" + std::to_string(given.size()) +
                           " unexpected in all)",
                  "the file holds parameters this config does not have (variant, bias or layer count?)");
  model.load_state(state);
}

std::unique_ptr<GPT2> load_pretrained(const fs::path& dir) {
  static const char* kOp = "load_pretrained";
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw IoError(kOp, dir.string() + ": not a directory", "pass a Hugging Face GPT-2 model directory");
  const fs::path config_path = dir / "config.json", weights = dir / "model.safetensors";
  if (!fs::exists(config_path, ec))
    throw IoError(kOp, config_path.string() + ": no such file",
                  "a Hugging Face model directory holds config.json and model.safetensors");
  if (!fs::exists(weights, ec)) {
    std::string hint = "a Hugging Face model directory holds config.json and model.safetensors";
    if (fs::exists(dir / "pytorch_model.bin", ec))
      hint = "only pytorch_model.bin is there: re-save it with save_pretrained(..., safe_serialization=True)";
    throw IoError(kOp, weights.string() + ": no such file", hint);
  }
  auto model = std::make_unique<GPT2>(GPT2Config::load(config_path));
  load_hf_tensors(*model, load_safetensors(weights).tensors, weights.string());
  model->eval();  // as transformers' from_pretrained: HF configs carry dropout 0.1; train() to fine-tune
  return model;
}

void save_pretrained(const GPT2& model, const fs::path& dir) {
  io::create_directories(dir, "save_pretrained");
  save_safetensors(dir / "model.safetensors", to_hf_tensors(model), {{"format", "pt"}});
  model.config().save(dir / "config.json");
}

}  // namespace keel::nn
