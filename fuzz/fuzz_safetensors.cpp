// libFuzzer target: the safetensors reader (header length, JSON header, dtypes, shapes, offsets).
#include "fuzz_util.h"
#include "nn/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto p = keel::fuzz::write_file("in.safetensors", {reinterpret_cast<const char*>(data), size});
  return keel::fuzz::run([&] { keel::nn::load_safetensors(p); });
}
