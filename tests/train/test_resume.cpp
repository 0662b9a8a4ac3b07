// What `gpt2 train --resume` guarantees (docs/training.md, "Resuming"): a resume changes nothing
// until it has succeeded, resuming a finished run is a no-op that succeeds, the run's recorded
// configuration is validated as a fresh run's flags are, and a filesystem failure in
// checkpointing is a keel error naming the path.
#include <doctest/doctest.h>

#include <fstream>
#include <map>

#include "apps/gpt2/run/checkpoint.h"
#include "apps/gpt2/train/trainer.h"
#include "core/io.h"
#include "train_fixture.h"

using namespace keel;
using namespace keel::app;
namespace fs = std::filesystem;

namespace {
// Every file under `dir`, by relative path, with its bytes: two snapshots are equal when the
// run's files are byte-identical (and no file came or went).
std::map<std::string, std::string> snapshot(const fs::path& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) files[fs::relative(e.path(), dir).string()] = io::read_file(e.path(), "test");
  return files;
}

template <typename E, typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  FAIL("no error");
  return {};
}

// A finished 4-step run, checkpointed at steps 2 and 4.
TrainConfig finished_run(const std::string& name) {
  TrainConfig c = testing::tiny_config(name);
  c.max_steps = 4;
  c.ckpt_every = 2;
  c.val_every = 2;
  train(c);
  c.resume = true;
  return c;
}

void edit_config(const TrainConfig& c, const std::string& field, const nlohmann::json& value) {
  const fs::path p = fs::path(c.run_dir) / "config.json";
  nlohmann::json j = io::read_json_file(p, "test");
  j["train"][field] = value;
  std::ofstream(p) << j.dump(2);
}
}  // namespace

TEST_CASE("resuming a finished run succeeds and changes nothing") {
  TrainConfig c = finished_run("finished");
  const auto before = snapshot(c.run_dir);
  c.log_every = 3;  // a field resume may change: a rewrite of config.json would show
  const TrainResult r = train(c);
  CHECK(r.already_finished);
  CHECK(r.steps == 4);
  CHECK(snapshot(c.run_dir) == before);
}

TEST_CASE("a hostile config.json is refused on resume with the field named, and left as it was") {
  const TrainConfig base = finished_run("hostile_config");
  const fs::path config = fs::path(base.run_dir) / "config.json";
  const std::string original = io::read_file(config, "test");
  struct Case {
    const char* field;
    nlohmann::json value;
    const char* says;
  };
  const Case cases[] = {
      {"grad_accum", int64_t{1} << 62, "--grad-accum: must be in [1, 2^20]"},
      {"grad_accum", 0, "--grad-accum: must be in [1, 2^20]"},
      {"batch_size", int64_t{1} << 40, "--batch-size: must be in [1, 2^20]"},
      {"batch_size", -4, "--batch-size: must be in [1, 2^20]"},
      {"seq_len", int64_t{1} << 30, "--seq-len: must be in [1, 2^20]"},
      {"seq_len", -7, "--seq-len: must be in [1, 2^20]"},  // (0 is how old runs wrote "not given")
  };
  for (const Case& k : cases) {
    INFO(k.field << " = " << k.value.dump());
    std::ofstream(config) << original;
    edit_config(base, k.field, k.value);
    const std::string edited = io::read_file(config, "test");
    const std::string e = error_of<ConfigError>([&] { train(base); });
    CHECK_MESSAGE(e.find(config.string()) != std::string::npos, e);
    CHECK_MESSAGE(e.find(k.says) != std::string::npos, e);
    CHECK(io::read_file(config, "test") == edited);
  }
  // Each field in range, but the global batch they make (2^40 sequences) needs an accumulation
  // no fresh run could ask for once the batch shrinks to 4.
  std::ofstream(config) << original;
  edit_config(base, "batch_size", int64_t{1} << 20);
  edit_config(base, "grad_accum", int64_t{1} << 20);
  const std::string e = error_of<ConfigError>([&] { train(base); });
  CHECK_MESSAGE(e.find("--grad-accum: must be in [1, 2^20]") != std::string::npos, e);
  std::ofstream(config) << original;
}

TEST_CASE("a resume that fails on a corrupt checkpoint leaves every file of the run byte-identical") {
  TrainConfig c = finished_run("corrupt_resume");
  const fs::path model = *latest_checkpoint(c.run_dir) / "model.safetensors";
  const std::string bytes = io::read_file(model, "test");
  std::ofstream(model, std::ios::binary) << bytes.substr(0, bytes.size() / 2);  // truncated
  const auto before = snapshot(c.run_dir);
  c.log_every = 3;  // would be recorded in config.json by a resume that went on
  CHECK_THROWS_AS(train(c), IoError);
  CHECK(snapshot(c.run_dir) == before);
}

TEST_CASE("a checkpoint that cannot be pruned (read-only directory) is a keel IoError naming it") {
  TrainConfig c = testing::tiny_config("read_only");
  c.max_steps = 3;
  c.ckpt_every = 1;
  c.keep_checkpoints = 2;
  c.val_every = 0;
  train(c);
  // As if killed after step 2: the resume takes step 3, checkpoints it and prunes step 2.
  fs::remove_all(fs::path(c.run_dir) / "checkpoints" / "step_00000003");
  const fs::path step2 = fs::path(c.run_dir) / "checkpoints" / "step_00000002";
  c.resume = true;
  c.keep_checkpoints = 1;
  std::string e;
  {
    // A directory that cannot be moved: pruning renames it away before deleting it.
    test::ReadOnlyDir frozen(step2);
    REQUIRE_MESSAGE(frozen.engaged(), "cannot make a directory read-only here");
    e = error_of<IoError>([&] { train(c); });
  }
  CHECK_MESSAGE(e.find("IoError in checkpoint") != std::string::npos, e);
  CHECK_MESSAGE(e.find(step2.string() + ": cannot rename to ") != std::string::npos, e);
  CHECK(e.find("filesystem error") == std::string::npos);
}
