// Bad input to gpt2 train: each is refused with one typed error that names the problem, and
// nothing in an existing run directory is overwritten.
#include <doctest/doctest.h>

#include <fstream>

#include "apps/gpt2/run/checkpoint.h"
#include "apps/gpt2/train/trainer.h"
#include "train_fixture.h"

using namespace keel;
using namespace keel::app;
namespace fs = std::filesystem;

namespace {
template <typename E>
void expect_error(const TrainConfig& c, const std::string& needle) {
  try {
    train(c);
    FAIL("no error for: " << needle);
  } catch (const E& e) {
    CHECK_MESSAGE(std::string(e.what()).find(needle) != std::string::npos, e.what());
  }
}
}  // namespace

TEST_CASE("contradictory model configurations are refused") {
  TrainConfig c = testing::tiny_config("bad_model");
  c.model.attention = "ls";
  c.model.ls_window = 32;  // >= the context of 32
  expect_error<ConfigError>(c, "window");
  c = testing::tiny_config("bad_heads");
  c.model.n_head = 3;  // does not divide 64
  expect_error<ConfigError>(c, "n_head");
  c = testing::tiny_config("bad_local");
  c.model.attention = "ls";
  c.model.ls_local_heads = 5;  // more local heads than the 4 heads
  expect_error<ConfigError>(c, "local");
  c = testing::tiny_config("bad_variant");
  c.model.attention = "linear";
  expect_error<ConfigError>(c, "attention");
  c = testing::tiny_config("bad_lr");
  c.min_lr = 1.0;
  expect_error<ConfigError>(c, "min-lr");
}

TEST_CASE("missing data and CPU half precision are refused") {
  TrainConfig c = testing::tiny_config("no_data");
  c.data = "/nonexistent/dataset";
  expect_error<IoError>(c, "/nonexistent/dataset");
  c = testing::tiny_config("bf16_cpu");
  c.dtype = "bf16";
  expect_error<ConfigError>(c, "needs a GPU");
  c = testing::tiny_config("too_long");
  c.batch_size = 100000;  // more windows than the split has
  expect_error<ConfigError>(c, "");
}

TEST_CASE("--cuda-graph 1 on the CPU, or other than 0 and 1, is refused") {
  TrainConfig c = testing::tiny_config("graph_cpu");
  c.cuda_graph = 1;  // tiny_config trains on the CPU
  expect_error<ConfigError>(c, "--cuda-graph 1 needs a CUDA device");
  c = testing::tiny_config("graph_two");
  c.cuda_graph = 2;
  expect_error<ConfigError>(c, "cuda-graph");
}

TEST_CASE("--attention-kernel on the CPU, or one keel does not have, is refused") {
  TrainConfig c = testing::tiny_config("kernel_cpu");
  c.attention_kernel = "sm90";  // tiny_config trains on the CPU
  expect_error<ConfigError>(c, "--attention-kernel sm90 picks GPU kernels");
  c = testing::tiny_config("kernel_fa9");
  c.attention_kernel = "fa9";
  expect_error<ConfigError>(c, "use mma or sm90");
}

TEST_CASE("an unknown ZeRO stage or reduce dtype is refused before anything is written") {
  TrainConfig c = testing::tiny_config("zero2");
  c.zero = 2;
  expect_error<ConfigError>(c, "--zero: ZeRO stage 2 is not available");
  CHECK(!fs::exists(c.run_dir));
  c = testing::tiny_config("reduce_f16");
  c.reduce_dtype = "f16";
  expect_error<ConfigError>(c, "--reduce-dtype: unknown dtype 'f16'");
  CHECK(!fs::exists(c.run_dir));
}

TEST_CASE("a run directory with checkpoints is not overwritten, and resume must match") {
  TrainConfig c = testing::tiny_config("existing");
  c.max_steps = 2;
  train(c);
  auto before = fs::last_write_time(*latest_checkpoint(c.run_dir) / "model.safetensors");
  expect_error<ConfigError>(c, "already holds a run");
  CHECK(fs::last_write_time(*latest_checkpoint(c.run_dir) / "model.safetensors") == before);

  TrainConfig other = c;
  other.resume = true;
  other.max_steps = 4;
  other.lr = 1e-2;  // a different run
  expect_error<ConfigError>(other, "configuration differs");

  TrainConfig done = c;
  done.resume = true;  // already at max_steps: nothing to do, which is not an error (test_resume.cpp)
  CHECK(train(done).already_finished);

  TrainConfig fresh = testing::tiny_config("nothing_to_resume");
  fresh.resume = true;
  expect_error<ConfigError>(fresh, "no checkpoint");
}

TEST_CASE("a corrupt or truncated checkpoint is refused on resume") {
  TrainConfig c = testing::tiny_config("corrupt");
  c.max_steps = 2;
  train(c);
  fs::path model = *latest_checkpoint(c.run_dir) / "model.safetensors";
  fs::resize_file(model, fs::file_size(model) / 2);
  c.resume = true;
  expect_error<IoError>(c, "model.safetensors");
  std::ofstream(*latest_checkpoint(c.run_dir) / "trainer.json") << "{ not json";
  expect_error<IoError>(c, "");
}

TEST_CASE("a model whose vocabulary disagrees with the data is refused") {
  TrainConfig c = testing::tiny_config("vocab_mismatch");
  c.init_from = KEEL_SOURCE_DIR "/tests/nn/data/hf_tiny";  // vocabulary 97, the data's is 512
  c.model.n_embd.reset();  // the model's shape comes from --init-from
  expect_error<ConfigError>(c, "vocabulary");
}

TEST_CASE("a Hugging Face init directory that is missing or malformed is refused") {
  TrainConfig c = testing::tiny_config("bad_init");
  c.model.n_embd.reset();  // the model's shape comes from --init-from
  c.init_from = "/nonexistent/hf";
  expect_error<IoError>(c, "/nonexistent/hf");
  fs::path dir = testing::scratch_dir("bad_init_dir");
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << R"({"model_type": "bert"})";
  c.init_from = dir.string();
  expect_error<Error>(c, "");
}
