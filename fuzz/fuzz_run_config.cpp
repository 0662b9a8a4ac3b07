// libFuzzer target: a run's train config (`--config FILE` and a run directory's config.json):
// bounded JSON parse, TrainConfig::merge_json, then validate.
#include "apps/gpt2/train/train_config.h"
#include "core/io.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return keel::fuzz::run([&] {
    const auto j = keel::io::parse_json(std::string_view(reinterpret_cast<const char*>(data), size), "--config", "fuzz");
    keel::app::TrainConfig cfg;
    cfg.merge_json(j.is_object() && j.contains("train") ? j["train"] : j, "--config");
    cfg.validate();
    (void)keel::app::identity_of(cfg).dump();
  });
}
