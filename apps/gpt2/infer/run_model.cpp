#include "apps/gpt2/infer/run_model.h"

#include <nlohmann/json.hpp>

#include "apps/gpt2/run/checkpoint.h"
#include "core/io.h"
#include "data/assets.h"
#include "nn/hf.h"

namespace fs = std::filesystem;

namespace keel::app {

namespace {
nlohmann::json read_run_config(const fs::path& run_dir) {
  fs::path p = run_dir / "config.json";
  if (!fs::exists(p))
    throw IoError("run", p.string() + " does not exist", "pass a run directory written by `gpt2 train`");
  nlohmann::json j = io::read_json_file(p, "run");
  if (!j.is_object() || !j.contains("model") || !j.contains("train") || !j["train"].is_object())
    throw IoError("run", p.string() + ": no 'model'/'train' section", "pass a run directory written by `gpt2 train`");
  return j;
}
}  // namespace

std::unique_ptr<nn::GPT2> load_run_model(const fs::path& run_dir) {
  nlohmann::json cfg = read_run_config(run_dir);
  auto latest = latest_checkpoint(run_dir);
  if (!latest)
    throw IoError("run", run_dir.string() + " has no checkpoint yet", "train it first (gpt2 train)");
  auto model = std::make_unique<nn::GPT2>(nn::GPT2Config::from_json(cfg["model"].dump(), (run_dir / "config.json").string()));
  try {
    model->load_state(load_checkpoint(*latest).model);
  } catch (const IoError&) {
    throw;
  } catch (const Error& e) {  // name the file: the tensor's name alone does not say which
    throw IoError("run", (*latest / "model.safetensors").string() + ": " + e.message(), e.hint());
  }
  return model;
}

fs::path run_data_dir(const fs::path& run_dir) {
  const nlohmann::json cfg = read_run_config(run_dir);
  const auto it = cfg["train"].find("data");
  if (it == cfg["train"].end() || !it->is_string())
    throw IoError("run", (run_dir / "config.json").string() + ": train.data is not a directory name");
  return it->get<std::string>();
}

std::unique_ptr<nn::GPT2> load_model(const std::string& run_dir, const std::string& init_from, const char* op) {
  if (run_dir.empty() == init_from.empty())
    throw ConfigError(op, "give exactly one model: a RUN_DIR or --init-from DIR");
  return run_dir.empty() ? nn::load_pretrained(init_from) : load_run_model(run_dir);
}

fs::path vocab_dir_for(const std::string& vocab, const std::string& run_dir) {
  if (!vocab.empty()) return vocab;
  if (!run_dir.empty()) {
    const fs::path data = run_data_dir(run_dir);
    // llm.c and nanoGPT datasets carry no vocabulary: their tokens are GPT-2's.
    if (fs::is_directory(data) && !fs::exists(data / "meta.json")) return data::default_vocab_dir();
    return data / "vocab";
  }
  return data::default_vocab_dir();
}

}  // namespace keel::app
