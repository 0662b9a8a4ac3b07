// A scratch directory for tests that write files.
#pragma once

#include <unistd.h>

#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace keel::test {

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
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

// Makes directory `dir` read-only while the object lives: nothing in it can be created, renamed
// or removed. chmod does not stop root (CI runs as root), so root sets the immutable attribute
// (chattr +i) instead. engaged() is false where neither works (a filesystem without attributes).
class ReadOnlyDir {
 public:
  explicit ReadOnlyDir(std::filesystem::path dir) : dir_(std::move(dir)) {
    if (::geteuid() != 0)
      engaged_ = ::chmod(dir_.c_str(), 0555) == 0;
    else
      engaged_ = std::system(("chattr +i '" + dir_.string() + "' 2>/dev/null").c_str()) == 0;
  }
  ~ReadOnlyDir() {
    if (!engaged_) return;
    if (::geteuid() != 0)
      ::chmod(dir_.c_str(), 0755);
    else
      (void)std::system(("chattr -i '" + dir_.string() + "' 2>/dev/null").c_str());
  }
  ReadOnlyDir(const ReadOnlyDir&) = delete;
  ReadOnlyDir& operator=(const ReadOnlyDir&) = delete;
  bool engaged() const { return engaged_; }

 private:
  std::filesystem::path dir_;
  bool engaged_ = false;
};

}  // namespace keel::test
