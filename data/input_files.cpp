// What `--input` names, as corpus files (see input_files.h).
#include "data/input_files.h"

#include <fmt/format.h>
#include <glob.h>

#include <algorithm>
#include <string>
#include <system_error>

#include "core/error.h"
#include "core/io.h"

namespace keel::data {

namespace fs = std::filesystem;

InputFormat format_for(const fs::path& path) {
  std::string name = path.filename().string();
  for (const char* z : {".gz", ".xz"})
    if (name.ends_with(z)) name.resize(name.size() - 3);
  return name.ends_with(".jsonl") || name.ends_with(".json") ? InputFormat::jsonl
                                                             : InputFormat::text;
}

namespace {

bool is_corpus_name(std::string name) {
  if (name.starts_with(".")) return false;
  if (name.ends_with(".gz") || name.ends_with(".xz")) return true;
  return name.ends_with(".txt") || name.ends_with(".jsonl") || name.ends_with(".json");
}

// A FIFO, socket or device (after symlinks): meant as input where a folder or a glob holds one,
// but opening it would block, so it is refused rather than read or skipped.
bool is_special_file(const fs::path& p) {
  std::error_code ec;
  const fs::file_status st = fs::status(p, ec);
  return !ec && fs::exists(st) && !fs::is_regular_file(st) && !fs::is_directory(st);
}

}  // namespace

std::vector<InputFile> expand_inputs(const std::vector<fs::path>& specs) {
  std::vector<InputFile> out;
  bool stdin_seen = false;
  auto add = [&](const fs::path& p) { out.push_back({p, format_for(p)}); };
  for (const auto& spec : specs) {
    const std::string s = spec.string();
    std::error_code ec;
    if (s == "-") {
      if (stdin_seen) throw IoError("prepare", "stdin (-) is named twice in --input");
      stdin_seen = true;
      out.push_back({spec, InputFormat::text});
    } else if (fs::is_directory(spec, ec)) {
      std::vector<fs::path> files;
      for (auto it = fs::recursive_directory_iterator(spec, ec); !ec && it != fs::end(it);
           it.increment(ec)) {
        if (it->path().filename().string().starts_with(".") && it->is_directory()) {
          it.disable_recursion_pending();
          continue;
        }
        if (!is_corpus_name(it->path().filename().string())) continue;
        if (it->is_regular_file())
          files.push_back(it->path());
        else if (is_special_file(it->path()))
          io::require_regular_file(it->path(), "prepare");  // throws: skipping it would drop its text unsaid
      }
      if (ec) throw IoError("prepare", fmt::format("{}: cannot list: {}", s, ec.message()));
      if (files.empty())
        throw IoError("prepare", fmt::format("{}: folder holds no corpus files (.txt, .jsonl, "
                                             ".json, .gz, .xz)", s), "check the --input folder");
      std::sort(files.begin(), files.end());
      for (const auto& f : files) add(f);
    } else if (s.find_first_of("*?[") != std::string::npos && !fs::exists(spec, ec)) {
      glob_t g{};
      const int rc = glob(s.c_str(), GLOB_ERR, nullptr, &g);
      std::vector<fs::path> matches, files;
      for (size_t i = 0; rc == 0 && i < g.gl_pathc; ++i) matches.emplace_back(g.gl_pathv[i]);
      globfree(&g);
      for (const auto& m : matches)
        if (fs::is_regular_file(m, ec))
          files.push_back(m);
        else if (is_special_file(m))
          io::require_regular_file(m, "prepare");  // throws, as in a folder
      if (files.empty())
        throw IoError("prepare", fmt::format("{}: no file matches this pattern", s),
                      "check the --input pattern (quote it so the shell leaves it alone)");
      std::sort(files.begin(), files.end());
      for (const auto& f : files) add(f);
    } else {
      add(spec);
    }
  }
  return out;
}

}  // namespace keel::data
