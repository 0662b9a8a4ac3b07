// libFuzzer target: the corpus readers. The first byte b picks the file name (b % 6: .txt,
// .txt.gz, .txt.xz, .jsonl, .jsonl.gz, .jsonl.xz) and the reader ((b / 6) % 2): read_text_file
// whole (as eval --text does), or prepare's DocumentStream. Both get small memory limits, so
// that decompression bombs and endless lines hit them instead of the fuzzer's memory limit;
// every streamed document must be non-empty and at most max_chars long.
#include <cstdlib>

#include "data/doc_stream.h"
#include "data/file_io.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static const char* kNames[] = {"in.txt", "in.txt.gz", "in.txt.xz", "in.jsonl", "in.jsonl.gz", "in.jsonl.xz"};
  const auto p = keel::fuzz::write_file(kNames[data[0] % 6], {reinterpret_cast<const char*>(data) + 1, size - 1});
  if ((data[0] / 6) % 2 == 0) return keel::fuzz::run([&] { (void)keel::data::read_text_file(p, 1 << 20); });
  return keel::fuzz::run([&] {
    const keel::data::DocumentRule rule{.min_chars = 64, .max_chars = 256};
    keel::data::DocumentStream ds({p, keel::data::format_for(p)}, rule, "text", 64 << 10);
    for (std::string doc; ds.next(doc);)
      if (doc.empty() || doc.size() > rule.max_chars) std::abort();
  });
}
