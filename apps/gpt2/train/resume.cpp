#include "apps/gpt2/train/resume.h"

#include <fmt/format.h>

#include "core/error.h"
#include "core/io.h"

namespace fs = std::filesystem;

namespace keel::app {

SavedRun read_saved_run(const fs::path& run_dir) {
  SavedRun saved;
  saved.config_path = run_dir / "config.json";
  const nlohmann::json j = io::read_json_file(saved.config_path, "train");
  if (!j.is_object() || !j.contains("train"))
    throw ConfigError("train", saved.config_path.string() + ": no \"train\" section", "is this a run of `gpt2 train`?");
  saved.cfg.merge_json(j["train"], saved.config_path);
  // The recorded run is checked as a fresh run's flags are (one rule, TrainConfig::validate):
  // its numbers feed the global batch and the loader's position, where a hostile value would
  // overflow.
  try {
    saved.cfg.validate();
  } catch (const ConfigError& e) {
    throw ConfigError("train", saved.config_path.string() + ": \"train\": " + e.message(),
                      "the run's config.json was edited or damaged; restore it, or start a new run");
  }
  if (auto d = j.find("distributed"); d != j.end() && d->is_object() && d->contains("world"))
    saved.world = static_cast<int>(
        io::get_int((*d)["world"], 1, 1 << 20, saved.config_path.string() + ": distributed.world"));
  return saved;
}

nlohmann::json resume_identity(const TrainConfig& c) {
  nlohmann::json j = identity_of(c);
  j.erase("batch_size"), j.erase("grad_accum");
  return j;
}

void check_same_run(const SavedRun& saved, const TrainConfig& cfg) {
  if (resume_identity(saved.cfg) == resume_identity(cfg)) return;
  throw ConfigError("train", "--resume: the configuration differs from the one in " + saved.config_path.string() +
                                 " (" + differing_fields(resume_identity(saved.cfg), resume_identity(cfg)) + ")",
                    "resume with the same model, data, optimiser, dtype and seed flags (or none: "
                    "`gpt2 train --resume --run-dir DIR --data DIR` with --config " + saved.config_path.string() + ")");
}

data::LoaderState checked_loader_state(const Checkpoint& c, const SavedRun& saved, const RunFacts& run) {
  const fs::path tj = c.dir / "trainer.json";
  const std::string config = saved.config_path.string();
  const std::string foreign = "the checkpoint does not belong to this run, or trainer.json or config.json was "
                              "edited; delete the checkpoint to resume from the one before";
  auto differs = [&](const std::string& field, auto have, const std::string& run_field, auto want) {
    return IoError("train", fmt::format("{}: {} is {}, but {} has {} {}", tj.string(), field, have, config,
                                        run_field, want),
                   foreign);
  };
  data::LoaderState s;
  try {
    s = data::LoaderState::from_json(c.trainer.at("loader").dump());
  } catch (const Error& e) {
    throw IoError("train", tj.string() + ": 'loader': " + e.message(),
                  "the checkpoint is corrupt; delete it to resume from the one before");
  }
  const TrainConfig& sc = saved.cfg;
  if (s.seed != sc.seed) throw differs("loader.seed", s.seed, "train.seed", sc.seed);
  if (s.seq_len != run.seq_len)
    throw differs("loader.seq_len", s.seq_len, sc.seq_len ? "train.seq_len" : "model.block_size", run.seq_len);
  if (s.split_tokens != run.train_tokens)
    throw ConfigError("train", fmt::format("{}: loader.split_tokens is {}, but the training split of --data {} has {} "
                                           "tokens", tj.string(), s.split_tokens, run.data, run.train_tokens),
                      "resume with the dataset the run was trained on");
  // The sequences read so far must be `step` global batches; checked by division, as the
  // product of hostile values could overflow.
  const uint64_t step = c.trainer.at("step").get<uint64_t>();
  const uint64_t global = uint64_t(sc.batch_size * sc.grad_accum) * uint64_t(saved.world);
  const uint64_t per_micro_batch = uint64_t(s.world_size) * uint64_t(s.batch_size);
  const bool whole_steps = step == 0 ? s.step == 0
                                     : s.step % step == 0 && global % per_micro_batch == 0 &&
                                           s.step / step == global / per_micro_batch;
  if (!whole_steps) {
    if (s.batch_size != sc.batch_size) throw differs("loader.batch_size", s.batch_size, "train.batch_size", sc.batch_size);
    if (s.world_size != saved.world) throw differs("loader.world_size", s.world_size, "distributed.world", saved.world);
    throw IoError("train",
                  fmt::format("{}: loader.step is {}, but step {} x train.grad_accum {} in {} is {} micro-batches",
                              tj.string(), s.step, step, sc.grad_accum, config, step * uint64_t(sc.grad_accum)),
                  foreign);
  }
  const uint64_t dropout_seed = c.trainer.at("dropout_rng").at("seed").get<uint64_t>();
  if (dropout_seed != run.dropout_seed)
    throw IoError("train", fmt::format("{}: dropout_rng.seed is {}, but the run's train.seed {} in {} gives {}",
                                       tj.string(), dropout_seed, sc.seed, config, run.dropout_seed),
                  foreign);
  if (auto id = c.trainer.find("identity"); id != c.trainer.end()) {
    TrainConfig recorded;
    try {
      recorded.merge_json(*id, tj.string() + ": 'identity'");
    } catch (const ConfigError& e) {
      throw IoError("train", e.message(), "the checkpoint is corrupt; delete it to resume from the one before");
    }
    if (resume_identity(recorded) != resume_identity(sc))
      throw IoError("train", fmt::format("{}: identity differs from {} ({})", tj.string(), config,
                                         differing_fields(resume_identity(recorded), resume_identity(sc),
                                                          "in trainer.json", "in config.json")),
                    foreign);
  }
  return s;
}

}  // namespace keel::app
