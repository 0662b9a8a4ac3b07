// File helpers shared by the data layer: whole-file reads (with .xz / .gz decompression),
// atomic writes, and a directory that replaces another only once it is complete.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace keel::data {

// The bytes of a file. IoError (naming the file) when it is missing, a directory or unreadable.
std::string read_file(const std::filesystem::path& path);

// The text of a corpus file, decompressed when its name ends in .xz (liblzma) or .gz (zlib).
// IoError on a missing file or corrupt / truncated compressed data.
std::string read_text_file(const std::filesystem::path& path);

// Writes data to path.tmp-<pid> and renames it over path, so readers see old or new, never half.
void write_file_atomic(const std::filesystem::path& path, std::string_view data);

// A staging directory next to `target` (same filesystem). commit() swaps it into place
// (atomically when the filesystem supports RENAME_EXCHANGE) and deletes the old contents; if
// commit() is never reached (an exception), the destructor deletes the staging directory and
// `target` is untouched.
//
// resumable: the staging directory is TARGET.partial and what an earlier, interrupted run left
// in it is kept (the caller decides whether it can be reused); it is still deleted on an error.
class StagingDir {
 public:
  explicit StagingDir(std::filesystem::path target, bool resumable = false);
  ~StagingDir();
  StagingDir(const StagingDir&) = delete;
  StagingDir& operator=(const StagingDir&) = delete;

  const std::filesystem::path& path() const { return staging_; }
  void commit();

 private:
  std::filesystem::path target_, staging_;
  bool committed_ = false;
};

}  // namespace keel::data
