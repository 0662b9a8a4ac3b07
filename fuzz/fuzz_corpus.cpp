// libFuzzer target: the corpus readers (.txt, .gz, .xz). The first byte picks the suffix.
#include "data/file_io.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static const char* kNames[] = {"in.txt", "in.txt.gz", "in.txt.xz"};
  const auto p = keel::fuzz::write_file(kNames[data[0] % 3], {reinterpret_cast<const char*>(data) + 1, size - 1});
  return keel::fuzz::run([&] { (void)keel::data::read_text_file(p); });
}
