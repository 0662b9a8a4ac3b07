#include "apps/gpt2/train/train_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "apps/gpt2/train/train_fields.h"
#include "core/error.h"
#include "core/io.h"

namespace keel::app {

namespace {
// How keel versions before std::optional overrides wrote "not given" in config.json and
// trainer.json; such a value still reads as not given, so their runs resume.
bool is_legacy_unset(const std::string& key, const nlohmann::json& v) {
  static const nlohmann::json kLegacy = {{"attention", ""}, {"n_layer", 0},       {"n_head", 0},
                                         {"n_embd", 0},     {"ls_local_heads", -1}, {"ls_window", 0},
                                         {"bias", -1},      {"tie_embeddings", -1}, {"seq_len", 0}};
  return kLegacy.contains(key) && kLegacy[key] == v;
}

// One JSON value as a field of type T: a type check, integers range-checked (no wrap of -1 to
// 2^64 - 1, no float-to-integer cast of 1e30), booleans also as 1 / 0.
template <typename T>
T read_value(const nlohmann::json& v, const std::string& source, const std::string& key) {
  auto wrong_type = [&] {
    return ConfigError("config", fmt::format("{}: field '{}' has the wrong type ({})", source, key, io::quote_json(v)));
  };
  if constexpr (std::is_same_v<T, bool>) {
    if (v.is_boolean()) return v.get<bool>();
    if (v == 0 || v == 1) return v == 1;
    throw wrong_type();
  } else if constexpr (std::is_integral_v<T>) {
    try {
      return static_cast<T>(io::get_int(v, std::is_signed_v<T> ? INT64_MIN : 0, INT64_MAX,
                                        fmt::format("{}: field '{}'", source, key)));
    } catch (const ConfigError& e) {
      throw ConfigError("config", e.message());
    }
  } else {
    if (std::is_same_v<T, std::string> ? !v.is_string() : !v.is_number()) throw wrong_type();
    return v.get<T>();
  }
}

}  // namespace

void ModelOverrides::apply_to(nn::GPT2Config& m) const {
  if (attention) m.attention = nn::parse_attention_kind(*attention);
  if (n_layer) m.n_layer = *n_layer;
  if (n_head) m.n_head = *n_head;
  if (n_embd) m.n_embd = *n_embd;
  if (ls_local_heads) m.ls_local_heads = *ls_local_heads;
  if (ls_window) m.ls_window = *ls_window;
  if (bias) m.bias = *bias;
  if (tie_embeddings) m.tie_embeddings = *tie_embeddings;
  m.softcap = softcap;
  m.dropout = dropout;
}

bool ModelOverrides::changes_architecture() const {
  return attention || n_layer || n_head || n_embd || ls_local_heads || ls_window || bias || tie_embeddings;
}

nlohmann::json TrainConfig::to_json() const {
  nlohmann::json j;
  TrainConfig copy = *this;
  for_each_field(copy, [&](const char* key, auto& value, const std::string&) {
    if constexpr (is_optional<std::decay_t<decltype(value)>>::value)
      j[key] = value ? nlohmann::json(*value) : nlohmann::json(nullptr);
    else
      j[key] = value;
  });
  return j;
}

void TrainConfig::merge_json(const nlohmann::json& j, const std::string& source) {
  if (!j.is_object()) throw ConfigError("config", source + ": expected a JSON object");
  std::set<std::string> known;
  for_each_field(*this, [&](const char* key, auto& value, const std::string&) {
    known.insert(key);
    if (!j.contains(key)) return;
    using T = std::decay_t<decltype(value)>;
    const nlohmann::json& v = j.at(key);
    if constexpr (is_optional<T>::value) {
      if (v.is_null() || is_legacy_unset(key, v))
        value.reset();
      else
        value = read_value<typename T::value_type>(v, source, key);
    } else {
      value = read_value<T>(v, source, key);
    }
  });
  for (const auto& [key, _] : j.items())
    if (!known.count(key) && key != "resume")
      throw ConfigError("config", fmt::format("{}: unknown field '{}'", source, key),
                        "see `gpt2 train --help` for the fields");
}

void TrainConfig::validate() const {
  auto need = [](bool ok, const std::string& field, const std::string& what, const std::string& hint = {}) {
    if (!ok) throw ConfigError("train", fmt::format("--{}: {}", field, what), hint);
  };
  const auto presets = nn::GPT2Config::preset_names();
  need(std::find(presets.begin(), presets.end(), preset) != presets.end(), "preset",
       "unknown preset '" + preset + "'", "use one of " + preset_names(", "));
  bool known_attention = !model.attention;
  for (const auto& [kind, name] : nn::kAttentionKinds) known_attention = known_attention || model.attention == name;
  need(known_attention, "attention", "unknown variant '" + model.attention.value_or("") + "'",
       "use one of " + nn::attention_kind_names());
  // Upper bounds far above any real run: larger values are typos (or hostile) and would only
  // overflow sizes, allocate for minutes or never finish.
  constexpr int64_t kMaxSize = 1 << 20, kMaxSteps = int64_t{1} << 40;
  auto in = [](const std::optional<int64_t>& v, int64_t lo, int64_t hi) { return !v || (*v >= lo && *v <= hi); };
  need(in(model.n_layer, 1, 4096), "n-layer", "must be in [1, 4096]");
  need(in(model.n_head, 1, 4096), "n-head", "must be in [1, 4096]");
  need(in(model.n_embd, 1, 65536), "n-embd", "must be in [1, 65536]");
  need(in(model.ls_local_heads, 0, 4096), "ls-local-heads", "must be in [0, 4096]");
  need(in(model.ls_window, 1, kMaxSize), "ls-window", "must be in [1, 2^20]");
  need(init_from.empty() || !model.changes_architecture(), "init-from",
       "the model's shape and attention come from --init-from, so --n-layer, --n-head, --n-embd, "
       "--attention, --ls-local-heads, --ls-window, --bias and --tie-embeddings cannot change it",
       "drop those flags, or train from scratch without --init-from");
  // Each at most 2^20, so B x T x accum x world (world <= 2^20 too) stays far inside int64.
  need(batch_size >= 1 && batch_size <= kMaxSize, "batch-size", "must be in [1, 2^20]");
  need(grad_accum >= 1 && grad_accum <= kMaxSize, "grad-accum", "must be in [1, 2^20]");
  need(in(seq_len, 1, kMaxSize), "seq-len", "must be in [1, 2^20]");
  need(max_steps >= 1 && max_steps <= kMaxSteps, "max-steps", "must be in [1, 2^40]");
  need(warmup_steps >= 0 && warmup_steps <= kMaxSteps, "warmup-steps", "must be in [0, 2^40]");
  need(seed <= kMaxSeed, "seed", fmt::format("must be in {}", kSeedRange));
  need(std::isfinite(lr) && lr >= 0, "lr", "must be a non-negative number");
  need(std::isfinite(min_lr) && min_lr >= 0 && min_lr <= lr, "min-lr", "must be in [0, lr]");
  need(weight_decay >= 0, "weight-decay", "cannot be negative");
  need(beta1 >= 0 && beta1 < 1 && beta2 >= 0 && beta2 < 1, "beta1", "betas must be in [0, 1)");
  need(grad_clip >= 0, "grad-clip", "cannot be negative (0 turns clipping off)");
  need(std::isfinite(z_loss) && z_loss >= 0, "z-loss", "must be a non-negative number (0 turns it off)");
  need(model.dropout >= 0 && model.dropout < 1, "dropout", "must be in [0, 1)");
  need(model.softcap > 0, "softcap", "the cap must be positive");
  need(dtype == "f32" || dtype == "bf16" || dtype == "f16", "dtype", "unknown dtype '" + dtype + "'",
       "use f32, bf16 or f16");
  need(on_nonfinite == "stop" || on_nonfinite == "skip", "on-nonfinite", "use stop or skip");
  need(log_every >= 1, "log-every", "must be at least 1");
  need(val_every >= 0 && val_batches >= 0 && ckpt_every >= 0, "val-every", "cannot be negative");
  need(log_every <= kMaxSteps && val_every <= kMaxSteps && val_batches <= kMaxSteps && ckpt_every <= kMaxSteps &&
           keep_checkpoints <= 1000000,
       "val-every", "--log-every, --val-every, --val-batches and --ckpt-every are at most 2^40");
  need(keep_checkpoints >= 1, "keep-checkpoints", "must be at least 1");
  need(spike_factor > 1, "spike-factor", "must be above 1");
  need(spike_signal == "max_logit" || spike_signal == "max_range", "spike-signal",
       "unknown signal '" + spike_signal + "'", "use max_logit or max_range");
  need(dist_backend == "auto" || dist_backend == "local" || dist_backend == "mpi" || dist_backend == "nccl",
       "dist-backend", "unknown backend '" + dist_backend + "'", "use auto, local, mpi or nccl");
  need(bucket_mb > 0, "bucket-mb", "must be positive");
  need(profile >= 0 && profile <= kMaxSteps, "profile", "must be in 0..2^40");
  need(profile_warmup >= 0 && profile_warmup <= kMaxSteps, "profile-warmup", "must be in 0..2^40");
  need(profile_gpu == "H100" || profile_gpu == "H200", "profile-gpu", "unknown GPU '" + profile_gpu + "'",
       "use H100 or H200");
  need(cuda_graph == 0 || cuda_graph == 1, "cuda-graph", "must be 0 or 1");
  need(deterministic == 0 || deterministic == 1, "deterministic", "must be 0 or 1");
  need(attention_kernel.empty() || attention_kernel == "mma" || attention_kernel == "sm90", "attention-kernel",
       "unknown kernel '" + attention_kernel + "'", "use mma or sm90");
  need(nproc >= 0, "nproc", "cannot be negative");
  need(zero == 0 || zero == 1, "zero", fmt::format("ZeRO stage {} is not available", zero),
       "use 1 to shard the optimizer state over the ranks, or 0 for plain data parallelism");
  need(reduce_dtype == "f32" || reduce_dtype == "bf16", "reduce-dtype", "unknown dtype '" + reduce_dtype + "'",
       "use f32 or bf16");
  need(!run_dir.empty(), "run-dir", "a run directory is required", "e.g. --run-dir runs/mhsa");
  need(!data.empty(), "data", "a dataset directory is required", "make one with `gpt2 prepare`");
}

nlohmann::json identity_of(const TrainConfig& cfg) {
  nlohmann::json j = cfg.to_json();
  // What may change between an interrupted run and its resumption without changing the run.
  for (const char* key : {"run_dir", "name", "log_every", "val_every", "val_batches", "ckpt_every",
                          "keep_checkpoints", "on_nonfinite", "spike_factor", "spike_signal", "device", "data",
                          "profile", "profile_warmup", "profile_gpu", "cuda_graph", "deterministic",
                          "attention_kernel", "dist_backend", "bucket_mb", "nproc", "zero", "reduce_dtype"})
    j.erase(key);
  // A variant's own knobs change nothing in the others' models: an MHSA run that recorded the
  // softcap default of its day (30 before it became nn's 50) resumes under today's default.
  nn::AttentionKind kind;
  try {
    kind = cfg.model.attention ? nn::parse_attention_kind(*cfg.model.attention)
                               : nn::GPT2Config::preset(cfg.preset).attention;
  } catch (const ConfigError&) {
    return j;  // an unknown preset or variant (a hand-edited config.json): every field counts
  }
  if (kind != nn::AttentionKind::softcap) j.erase("softcap");
  if (kind != nn::AttentionKind::ls) j.erase("ls_local_heads"), j.erase("ls_window");
  return j;
}

nlohmann::json launch_identity_of(const TrainConfig& cfg) {
  nlohmann::json j = identity_of(cfg);
  j["zero"] = cfg.zero;
  j["reduce_dtype"] = cfg.reduce_dtype;
  j["bucket_mb"] = cfg.bucket_mb;
  j["deterministic"] = cfg.deterministic;
  j["attention_kernel"] = cfg.attention_kernel;
  return j;
}

std::string differing_fields(const nlohmann::json& saved, const nlohmann::json& now, const std::string& saved_label,
                             const std::string& now_label) {
  std::set<std::string> keys;
  for (const auto& [k, _] : saved.items()) keys.insert(k);
  for (const auto& [k, _] : now.items()) keys.insert(k);
  std::string out;
  auto show = [](const nlohmann::json& j, const std::string& k) { return j.contains(k) ? j[k].dump() : "absent"; };
  for (const std::string& k : keys)
    if (show(saved, k) != show(now, k))
      out += fmt::format("{}{}: {} {}, {} {}", out.empty() ? "" : "; ", k, show(saved, k), saved_label, show(now, k),
                         now_label);
  return out;
}

nn::GPT2Config model_config(const TrainConfig& cfg, uint32_t vocab_size) {
  nn::GPT2Config m = nn::GPT2Config::preset(cfg.preset);
  m.vocab_size = vocab_size;
  if (cfg.seq_len) m.block_size = *cfg.seq_len;  // learned positions exactly as long as the run's sequences
  cfg.model.apply_to(m);
  m.fill_ls_shape();  // a preset without an LS shape (gpt2-124m) gets the paper's
  m.validate();
  return m;
}

}  // namespace keel::app
