// Small file helpers for nn's formats (safetensors, config.json). nn and data are sibling layers,
// so nn keeps its own few lines instead of reaching into data/file_io.h.
#pragma once

#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>

namespace keel::nn {

// The bytes of a file; IoError naming `op` and the file when missing or unreadable.
std::string read_whole_file(const std::filesystem::path& path, const char* op);

// Writes a file so that readers see the old version or the complete new one, never half of it,
// even across a crash: the bytes go to a temporary name beside the target, are fsync'd, and
// the temporary is renamed over the target (then the directory is fsync'd). If commit() is never
// reached (an exception), the destructor removes the temporary and the target is untouched.
class AtomicWriter {
 public:
  AtomicWriter(std::filesystem::path target, const char* op);
  ~AtomicWriter();
  AtomicWriter(const AtomicWriter&) = delete;
  AtomicWriter& operator=(const AtomicWriter&) = delete;

  void write(const void* data, size_t n);
  void write(std::string_view s) { write(s.data(), s.size()); }
  void commit();

 private:
  std::filesystem::path target_, tmp_;
  const char* op_;
  int fd_ = -1;
  bool committed_ = false;
};

void write_file_atomic(const std::filesystem::path& path, std::string_view data, const char* op);

}  // namespace keel::nn
