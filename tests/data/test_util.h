// Helpers shared by the data tests: paths to bundled assets, prepare options, and scratch
// directories (temp_dir.h).
#pragma once

#include "temp_dir.h"

#include <filesystem>
#include <string>
#include <vector>

#include "core/io.h"
#include "data/file_io.h"
#include "data/prepare.h"

namespace keel::test {

inline std::filesystem::path source_dir() { return KEEL_SOURCE_DIR; }
inline std::filesystem::path gpt2_vocab_dir() { return source_dir() / "data/assets/gpt2"; }

// A slice of the bundled Austen corpus (decompressed once per process).
inline std::string austen_slice(size_t begin, size_t len) {
  static const std::string text =
      keel::data::read_text_file(source_dir() / "data/corpora/austen_6novels.txt.xz");
  return text.substr(begin, len);
}

// prepare options for a test: no progress bar, documents of 2,000 to 20,000 characters.
inline keel::data::PrepareOptions quiet_prepare(std::vector<std::filesystem::path> inputs,
                                                std::filesystem::path out) {
  keel::data::PrepareOptions o;
  o.inputs = std::move(inputs);
  o.out = std::move(out);
  o.progress = false;
  o.documents = {.min_chars = 2000, .max_chars = 20000};
  return o;
}

}  // namespace keel::test
