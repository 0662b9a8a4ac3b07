// Locating bundled data files (see assets.h for the lookup order).
#include "data/assets.h"

#include <fmt/format.h>

#include <cstdlib>

#include "core/error.h"

namespace keel::data {

namespace fs = std::filesystem;

fs::path data_root() {
  std::vector<fs::path> candidates;
  if (const char* env = std::getenv("KEEL_DATA_DIR"); env && *env) candidates.emplace_back(env);
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) candidates.push_back(exe.parent_path() / ".." / "share" / "keel");
  candidates.emplace_back(KEEL_DATA_SOURCE_DIR);
  for (const auto& c : candidates)
    if (fs::is_directory(c / "assets" / "gpt2", ec)) return c;
  std::string tried;
  for (const auto& c : candidates) tried += "\n    " + c.string();
  throw IoError("data_root", "cannot find keel's data directory; tried:" + tried,
                "set KEEL_DATA_DIR to a directory holding assets/gpt2/, or pass --vocab DIR");
}

fs::path default_vocab_dir() { return data_root() / "assets" / "gpt2"; }

fs::path bundled_corpus_path() { return data_root() / "corpora" / "austen_6novels.txt.xz"; }

}  // namespace keel::data
