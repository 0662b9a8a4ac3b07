// libFuzzer target: a Hugging Face GPT-2 config.json (GPT2Config::from_json and validate).
#include "fuzz_util.h"
#include "nn/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return keel::fuzz::run([&] {
    keel::nn::GPT2Config::from_json(std::string(reinterpret_cast<const char*>(data), size), "config.json");
  });
}
