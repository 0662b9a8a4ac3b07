#include "nn/file_util.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace keel::nn {
namespace fs = std::filesystem;

namespace {
std::string why() { return std::strerror(errno); }
}  // namespace

std::string read_whole_file(const fs::path& path, const char* op) {
  std::error_code ec;
  if (!fs::exists(path, ec)) throw IoError(op, path.string() + ": no such file");
  if (fs::is_directory(path, ec)) throw IoError(op, path.string() + ": is a directory, expected a file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(op, path.string() + ": cannot open: " + why());
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw IoError(op, path.string() + ": read failed");
  return ss.str();
}

AtomicWriter::AtomicWriter(fs::path target, const char* op) : target_(std::move(target)), op_(op) {
  tmp_ = target_;
  tmp_ += ".tmp-" + std::to_string(::getpid());
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw IoError(op_, tmp_.string() + ": cannot create: " + why(), "does the directory exist and is it writable?");
}

AtomicWriter::~AtomicWriter() {
  if (committed_) return;
  if (fd_ >= 0) ::close(fd_);
  std::error_code ec;
  fs::remove(tmp_, ec);
}

void AtomicWriter::write(const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd_, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw IoError(op_, tmp_.string() + ": write failed: " + why(), "is the disk full?");
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void AtomicWriter::commit() {
  if (::fsync(fd_) != 0) throw IoError(op_, tmp_.string() + ": fsync failed: " + why());
  if (::close(fd_) != 0) {
    fd_ = -1;
    throw IoError(op_, tmp_.string() + ": close failed: " + why());
  }
  fd_ = -1;
  std::error_code ec;
  fs::rename(tmp_, target_, ec);
  if (ec) throw IoError(op_, target_.string() + ": cannot rename into place: " + ec.message());
  committed_ = true;
  // The rename itself lives in the directory: sync it too, or a crash may forget the new name.
  fs::path dir = target_.parent_path().empty() ? fs::path(".") : target_.parent_path();
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

void write_file_atomic(const fs::path& path, std::string_view data, const char* op) {
  AtomicWriter w(path, op);
  w.write(data);
  w.commit();
}

}  // namespace keel::nn
