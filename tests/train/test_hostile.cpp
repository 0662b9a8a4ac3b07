// Hostile input and faults around training: checkpoints and run state that lie about
// themselves, configuration values that would wrap or be silently replaced, and the order of
// the last checkpoint and the last validation. Each case was a crash, a hang, undefined
// behaviour or silent acceptance before its fix.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>

#include "apps/gpt2/infer/run_model.h"
#include "apps/gpt2/run/checkpoint.h"
#include "apps/gpt2/train/memory_check.h"
#include "apps/gpt2/train/trainer.h"
#include "core/factory.h"
#include "core/io.h"
#include "cuda_test.h"
#include "nn/safetensors.h"
#include "train_fixture.h"

using namespace keel;
using namespace keel::app;
namespace fs = std::filesystem;

namespace {
template <typename E, typename F>
void expect_error(F&& f, const std::string& needle) {
  try {
    f();
    FAIL("no error for: " << needle);
  } catch (const E& e) {
    CHECK_MESSAGE(std::string(e.what()).find(needle) != std::string::npos, e.what());
  }
}

// A 2-step run checkpointed at both steps, then its last checkpoint removed (as if it died
// after step 1), so that resuming it with the same configuration reads step_00000001.
TrainConfig run_to_resume(const std::string& name) {
  TrainConfig c = testing::tiny_config(name);
  c.max_steps = 2;
  c.ckpt_every = 1;
  c.keep_checkpoints = 5;
  train(c);
  fs::remove_all(fs::path(c.run_dir) / "checkpoints" / "step_00000002");
  c.resume = true;
  return c;
}

void edit_trainer_json(const fs::path& ckpt, const std::string& key, const nlohmann::json& value) {
  nlohmann::json j = io::read_json_file(ckpt / "trainer.json", "test");
  j[key] = value;
  std::ofstream(ckpt / "trainer.json") << j.dump(2);
}

// Sets trainer.json's `key`.`field` (e.g. loader.batch_size) of checkpoint ckpt.
void edit_trainer_field(const fs::path& ckpt, const std::string& key, const std::string& field,
                        const nlohmann::json& value) {
  nlohmann::json object = io::read_json_file(ckpt / "trainer.json", "test")[key];
  object[field] = value;
  edit_trainer_json(ckpt, key, object);
}
}  // namespace

TEST_CASE("a checkpoint directory named with a step beyond int64 is ignored, not overflowed") {
  TrainConfig c = run_to_resume("huge_step_name");
  fs::path huge = fs::path(c.run_dir) / "checkpoints" / "step_99999999999999999999";
  fs::copy(*latest_checkpoint(c.run_dir), huge);
  CHECK(latest_checkpoint(c.run_dir)->filename() == "step_00000001");
}

TEST_CASE("trainer.json must agree with its directory, and its numbers must fit") {
  TrainConfig c = run_to_resume("lying_state");
  const fs::path ckpt = *latest_checkpoint(c.run_dir);
  // A step from the past: resume would truncate the metrics and overwrite newer checkpoints.
  edit_trainer_json(ckpt, "step", 0);
  expect_error<IoError>([&] { load_checkpoint(ckpt); }, "disagrees with the directory name");
  edit_trainer_json(ckpt, "step", 1e30);  // was a float-to-integer overflow
  expect_error<IoError>([&] { load_checkpoint(ckpt); }, "trainer.json");
  edit_trainer_json(ckpt, "step", 1);
  nlohmann::json loader = io::read_json_file(ckpt / "trainer.json", "test")["loader"];
  loader["seq_len"] = 1e30;
  edit_trainer_json(ckpt, "loader", loader);
  expect_error<IoError>([&] { train(c); }, "seq_len");
  loader["seq_len"] = 32;
  edit_trainer_json(ckpt, "loader", loader);
  edit_trainer_json(ckpt, "dropout_rng", nlohmann::json::parse("[[[[1]]]]"));
  expect_error<IoError>([&] { load_checkpoint(ckpt); }, "dropout_rng");
  std::ofstream(ckpt / "trainer.json") << std::string(100000, '[') << std::string(100000, ']');
  expect_error<IoError>([&] { load_checkpoint(ckpt); }, "nested deeper");
}

TEST_CASE("a checkpoint's trainer.json must agree with the run's config.json, field by field") {
  // Checkpointed at step 4, resumed there: with batch 4, a loader state of batch 3 (12
  // sequences) converted silently into loader step 3, one of world 2 into step 8.
  TrainConfig c = testing::tiny_config("foreign_state");
  c.max_steps = 5;
  c.ckpt_every = 4;
  c.keep_checkpoints = 5;
  train(c);
  fs::remove_all(fs::path(c.run_dir) / "checkpoints" / "step_00000005");
  c.resume = true;
  const fs::path ckpt = fs::path(c.run_dir) / "checkpoints" / "step_00000004";
  const std::string tj = (ckpt / "trainer.json").string(), config = (fs::path(c.run_dir) / "config.json").string();
  const std::string original = io::read_file(ckpt / "trainer.json", "test");
  auto refused = [&](const std::string& key, const std::string& field, const nlohmann::json& value,
                     const std::string& says) {
    edit_trainer_field(ckpt, key, field, value);
    try {
      train(c);
      FAIL_CHECK("resumed from a trainer.json with " << key << "." << field << " = " << value.dump());
      fs::remove_all(fs::path(c.run_dir) / "checkpoints" / "step_00000005");  // so the next edit resumes at 4
    } catch (const Error& e) {
      const std::string m = e.what();
      CHECK_MESSAGE(m.find(tj + ": " + says) != std::string::npos, m);
    }
    std::ofstream(ckpt / "trainer.json") << original;
  };
  refused("loader", "batch_size", 3, "loader.batch_size is 3, but " + config + " has train.batch_size 4");
  refused("loader", "world_size", 2, "loader.world_size is 2, but " + config + " has distributed.world 1");
  refused("loader", "step", 5, "loader.step is 5, but step 4 x train.grad_accum 1 in " + config + " is 4");
  refused("loader", "seed", 7, "loader.seed is 7, but " + config + " has train.seed 1337");
  refused("loader", "seq_len", 16, "loader.seq_len is 16, but " + config + " has train.seq_len 32");
  const uint64_t tokens = io::read_json_file(ckpt / "trainer.json", "test")["loader"]["split_tokens"];
  refused("loader", "split_tokens", tokens + 1,
          fmt::format("loader.split_tokens is {}, but the training split", tokens + 1));
  refused("dropout_rng", "seed", 5, "dropout_rng.seed is 5, but the run's train.seed 1337");
  refused("identity", "lr", 0.5,
          "identity differs from " + config + " (lr: 0.5 in trainer.json, 0.003 in config.json)");

  // What a launch may change: the same global batch of 4 as 2 micro-batches of 2 per step.
  edit_trainer_field(ckpt, "loader", "batch_size", 2);
  edit_trainer_field(ckpt, "loader", "step", 8);
  CHECK(train(c).steps == 5);
}

TEST_CASE("a damaged optimizer state is refused at resume, with or without ZeRO, naming its file") {
  TrainConfig c = run_to_resume("bad_optimizer");
  const fs::path file = *latest_checkpoint(c.run_dir) / "optimizer.safetensors";
  const nn::SafetensorsFile good = nn::load_safetensors(file);
  // The entries with `key` removed, or with element `at` of its tensor set to x (a new tensor:
  // the handles in `good` share their storage with the copy).
  auto without = [&](const std::string& key) {
    NamedTensors t;
    for (const auto& [name, tensor] : good.tensors)
      if (name != key) t.emplace_back(name, tensor);
    REQUIRE(t.size() + 1 == good.tensors.size());
    return t;
  };
  auto with_value = [&](const std::string& key, size_t at, float x) {
    NamedTensors t = good.tensors;
    auto it = std::find_if(t.begin(), t.end(), [&](const auto& e) { return e.first == key; });
    REQUIRE(it != t.end());
    std::vector<float> values = it->second.to_vector<float>();
    values.at(at) = x;
    it->second = from_vector<float>(values, it->second.shape());
    return t;
  };
  auto refused = [&](const NamedTensors& damaged, const std::string& says) {
    nn::save_safetensors(file, damaged, good.metadata);
    for (int64_t zero : {0, 1}) {
      CAPTURE(zero);
      c.zero = zero;
      try {
        train(c);
        FAIL_CHECK("resumed from a damaged optimizer state: " << says);
      } catch (const Error& e) {
        const std::string m = e.what();
        CHECK_MESSAGE(m.find(file.string() + ": " + says) != std::string::npos, m);
      }
      fs::remove_all(fs::path(c.run_dir) / "checkpoints" / "step_00000002");  // so each try resumes at 1
    }
  };
  refused(without("transformer.wte.weight.m"), "state entry 'transformer.wte.weight.m' is missing");
  refused(without("scaler.scale"), "loss scaler (entries \"scaler.*\"): state entry 'scale' is missing");
  // Accepted before, and the first step made the parameter NaN (or, for an inf in v, froze it).
  refused(with_value("transformer.wte.weight.m", 0, NAN),
          "state entry 'transformer.wte.weight.m' holds NaN at element 0");
  refused(with_value("transformer.h.0.attn.c_attn.weight.v", 3, INFINITY),
          "state entry 'transformer.h.0.attn.c_attn.weight.v' holds inf at element 3");
  refused(with_value("transformer.h.1.mlp.c_fc.weight.v", 5, -1.0f),
          "state entry 'transformer.h.1.mlp.c_fc.weight.v' holds -1.000000 at element 5: a second moment must be "
          "finite and non-negative");

  nn::save_safetensors(file, good.tensors, good.metadata);
  c.zero = 0;
  CHECK(train(c).steps == 2);
}

TEST_CASE("the world size a run's config.json records must be an integer in range") {
  TrainConfig c = run_to_resume("lying_world");
  const fs::path config = fs::path(c.run_dir) / "config.json";
  nlohmann::json j = io::read_json_file(config, "test");
  j["distributed"] = {{"world", 1e30}};  // was a float-to-integer overflow on resume
  std::ofstream(config) << j.dump();
  expect_error<ConfigError>([&] { train(c); }, "distributed.world");
}

TEST_CASE("a checkpoint tensor relabelled from F32 to I32 is refused, naming the file") {
  TrainConfig c = run_to_resume("relabelled");
  const fs::path model = *latest_checkpoint(c.run_dir) / "model.safetensors";
  std::string bytes = io::read_file(model, "test");
  const size_t at = bytes.find("\"F32\"");
  REQUIRE(at != std::string::npos);
  bytes.replace(at, 5, "\"I32\"");
  std::ofstream(model, std::ios::binary) << bytes;
  expect_error<IoError>([&] { load_run_model(c.run_dir); }, "model.safetensors");
  expect_error<IoError>([&] { train(c); }, "floating-point");
}

TEST_CASE("pruning never leaves a listed checkpoint incomplete, and stale temporaries go") {
  TrainConfig c = testing::tiny_config("prune");
  c.max_steps = 4;
  c.ckpt_every = 1;
  c.keep_checkpoints = 2;
  train(c);
  const fs::path root = fs::path(c.run_dir) / "checkpoints";
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(root)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  CHECK(names == std::vector<std::string>{"step_00000003", "step_00000004"});
  fs::remove_all(root / "step_00000004");  // as if it died after step 3
  // What a kill -9 mid-save or mid-prune leaves: temporaries of a process that is gone
  // (pid 2^31 - 1 cannot exist on Linux) and one of a live process (ours would be removed too,
  // so use pid 1).
  fs::create_directories(root / ".tmp-step_00000005-2147483646");
  fs::create_directories(root / ".del-step_00000001-2147483646");
  fs::create_directories(root / ".tmp-step_00000005-1");
  CHECK(latest_checkpoint(c.run_dir)->filename() == "step_00000003");
  c.resume = true;
  train(c);
  CHECK_FALSE(fs::exists(root / ".tmp-step_00000005-2147483646"));
  CHECK_FALSE(fs::exists(root / ".del-step_00000001-2147483646"));
  CHECK(fs::exists(root / ".tmp-step_00000005-1"));  // not ours to judge: pid 1 is alive
}

TEST_CASE("flag values are never silently replaced or ignored") {
  TrainConfig c = testing::tiny_config("ls_negative");
  c.model.attention = "ls";
  c.model.ls_window = -3;
  expect_error<ConfigError>([&] { train(c); }, "--ls-window");
  c.model.ls_window = 8;
  c.model.ls_local_heads = -2;
  expect_error<ConfigError>([&] { train(c); }, "--ls-local-heads");
  c = testing::tiny_config("init_and_shape");
  c.init_from = KEEL_SOURCE_DIR "/tests/nn/data/hf_tiny";
  c.model.n_layer = 7;
  expect_error<ConfigError>([&] { train(c); }, "--init-from");
  c = testing::tiny_config("forever");
  c.max_steps = INT64_MAX;
  expect_error<ConfigError>([&] { train(c); }, "--max-steps");
  c = testing::tiny_config("huge_model");
  c.model.n_layer = 1000000;  // allocated for over a minute, then blamed the batch size
  expect_error<ConfigError>([&] { train(c); }, "--n-layer");
  c = testing::tiny_config("too_big");
  c.model.n_layer = 4096;  // within the flag's range, but about 200 billion parameters at width 2048
  c.model.n_embd = 2048;
  c.model.n_head = 16;
  expect_error<ConfigError>([&] { train(c); }, "more than this machine's");
  c = testing::tiny_config("seed_wrapped");
  c.seed = ~uint64_t{0};  // what --seed -1 became
  expect_error<ConfigError>([&] { train(c); }, "--seed");
}

TEST_CASE("a model too large for the device's memory is refused before anything is allocated") {
  nn::GPT2Config big;
  big.n_layer = 4096, big.n_head = 16, big.n_embd = 2048;  // about 200 billion parameters
  // The comparison a GPU run makes against cudaMemGetInfo's free memory.
  expect_error<ConfigError>([&] { check_model_fits(big, 80e9, "the 80 GB free on cuda:0 (a GPU)"); },
                            "more than the 80 GB free on cuda:0");
  expect_error<ConfigError>([&] { check_model_fits(big, 80e9, "the 80 GB free on cuda:0 (a GPU)"); }, "--n-layer 4096");
  nn::GPT2Config small;
  small.n_layer = 2, small.n_head = 2, small.n_embd = 32, small.vocab_size = 300, small.block_size = 32;
  check_model_fits(small, 80e9, "the 80 GB free on cuda:0");  // fits: no error
  expect_error<ConfigError>([&] { check_model_fits(small, 0, "the 0 GB free on cuda:0"); }, "0 GB free");
}

TEST_CASE("CUDA: a model larger than the GPU's free memory is refused with the device named") {
  KEEL_REQUIRE_CUDA();
  TrainConfig c = testing::tiny_config("too_big_gpu");
  c.device = "cuda:0";
  c.model.n_layer = 4096;
  c.model.n_embd = 2048;
  c.model.n_head = 16;
  expect_error<ConfigError>([&] { train(c); }, "free on cuda:0");
  CHECK_FALSE(fs::exists(fs::path(c.run_dir) / "checkpoints"));
}

TEST_CASE("config values from a file are range-checked: no wrap, no float cast") {
  TrainConfig c;
  expect_error<ConfigError>([&] { c.merge_json(nlohmann::json{{"max_steps", 1e30}}, "cfg.json"); }, "max_steps");
  expect_error<ConfigError>([&] { c.merge_json(nlohmann::json{{"seed", -1}}, "cfg.json"); }, "seed");
  expect_error<ConfigError>([&] { c.merge_json(nlohmann::json::parse(R"({"lr": [[[1]]]})"), "cfg.json"); },
                            "an array of 1 elements");
  c.merge_json(nlohmann::json{{"seed", 7}, {"max_steps", 9}}, "cfg.json");
  CHECK(c.seed == 7);
  CHECK(c.max_steps == 9);
}

TEST_CASE("a dataset without a validation split is refused at start, before any training") {
  fs::path data = testing::scratch_dir("no_val_data");
  data::PrepareOptions o;
  o.inputs = {data::bundled_corpus_path()};
  o.out = data;
  o.train_vocab = 300;
  o.val_fraction = 0;
  o.progress = false;
  data::prepare_dataset(o);
  TrainConfig c = testing::tiny_config("no_val");
  c.data = data.string();
  expect_error<ConfigError>([&] { train(c); }, "no validation split");
  CHECK_FALSE(fs::exists(fs::path(c.run_dir) / "checkpoints"));
}
