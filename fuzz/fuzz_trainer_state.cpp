// libFuzzer target: a checkpoint's trainer.json (load_checkpoint's cross-checks) and the loader
// state inside it (LoaderState::from_json). The two safetensors files are valid and empty.
#include "apps/gpt2/run/checkpoint.h"
#include "core/io.h"
#include "data/loader.h"
#include "fuzz_util.h"
#include "nn/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace fs = std::filesystem;
  static const fs::path dir = [] {
    fs::path d = keel::fuzz::scratch() / "run/checkpoints/step_00000007";
    fs::create_directories(d);
    keel::nn::save_safetensors(d / "model.safetensors", {});
    keel::nn::save_safetensors(d / "optimizer.safetensors", {});
    return d;
  }();
  keel::io::write_file_atomic(dir / "trainer.json", std::string_view(reinterpret_cast<const char*>(data), size), "fuzz");
  return keel::fuzz::run([&] {
    keel::app::Checkpoint c = keel::app::load_checkpoint(dir);
    keel::data::LoaderState::from_json(c.trainer["loader"].dump());
  });
}
