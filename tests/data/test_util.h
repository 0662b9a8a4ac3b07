// Helpers shared by the data tests: paths to bundled assets and scratch directories.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

#include "data/file_io.h"

namespace keel::test {

inline std::filesystem::path source_dir() { return KEEL_SOURCE_DIR; }
inline std::filesystem::path gpt2_vocab_dir() { return source_dir() / "data/assets/gpt2"; }

// A slice of the bundled Austen corpus (decompressed once per process).
inline std::string austen_slice(size_t begin, size_t len) {
  static const std::string text =
      keel::data::read_text_file(source_dir() / "data/corpora/austen_6novels.txt.xz");
  return text.substr(begin, len);
}

// A fresh, empty directory under the system temp dir, removed when the object dies.
class TempDir {
 public:
  explicit TempDir(const std::string& tag) {
    static int counter = 0;
    path_ = std::filesystem::temp_directory_path() /
            ("keel-test-" + tag + "-" + std::to_string(getpid()) + "-" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

}  // namespace keel::test
