// Safe file reads and writes and bounded JSON parsing (see io.h).
#include "core/io.h"

#include <fcntl.h>
#include <poll.h>
#include <fmt/format.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <utility>

#include "core/error.h"

namespace keel::io {
namespace fs = std::filesystem;

namespace {
std::string why() { return std::strerror(errno); }

std::string kind_of(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISCHR(m) || S_ISBLK(m)) return "a device";
  if (S_ISSOCK(m)) return "a socket";
  return "not a regular file";
}

void check_mode(const struct stat& st, const fs::path& path, const char* op) {
  if (!S_ISREG(st.st_mode))
    throw IoError(op, fmt::format("{}: is {}, expected a regular file", path.string(), kind_of(st.st_mode)),
                  "pass the path of an ordinary file");
}

// Closes a descriptor on every path out of a function.
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};
}  // namespace

void require_regular_file(const fs::path& path, const char* op) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT || errno == ENOTDIR)
      throw IoError(op, fmt::format("{}: file not found", path.string()), "check the path");
    throw IoError(op, fmt::format("{}: cannot stat: {}", path.string(), why()));
  }
  check_mode(st, path, op);
}

int open_regular_file(const fs::path& path, const char* op) {
  require_regular_file(path, op);
  // O_NONBLOCK: if the path became a FIFO after the check, open() returns instead of waiting
  // for a writer, and fstat below refuses it.
  Fd f{::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK)};
  if (f.fd < 0) throw IoError(op, fmt::format("{}: cannot open: {}", path.string(), why()), "check the permissions");
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) throw IoError(op, fmt::format("{}: cannot stat: {}", path.string(), why()));
  check_mode(st, path, op);
  // A regular file never blocks anyway; cleared so that the descriptor behaves as an ordinary one.
  ::fcntl(f.fd, F_SETFL, ::fcntl(f.fd, F_GETFL) & ~O_NONBLOCK);
  return std::exchange(f.fd, -1);
}

std::string read_file(const fs::path& path, const char* op, uint64_t max_bytes) {
  Fd f{open_regular_file(path, op)};
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) throw IoError(op, fmt::format("{}: cannot stat: {}", path.string(), why()));
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size > max_bytes)
    throw IoError(op, fmt::format("{}: {} bytes, more than the limit of {} for this kind of file", path.string(),
                                  size, max_bytes),
                  "is this the right file?");
  std::string data(size, '\0');
  size_t got = 0;
  while (got < size) {
    ssize_t r = ::read(f.fd, data.data() + got, size - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw IoError(op, fmt::format("{}: read failed: {}", path.string(), why()));
    if (r == 0) break;  // the file shrank while we read it
    got += static_cast<size_t>(r);
  }
  data.resize(got);
  return data;
}

std::string read_fd(int fd, const std::string& source, const char* op, uint64_t max_bytes, const std::string& hint) {
  std::string data;
  size_t got = 0;
  while (true) {
    if (got == data.size()) {
      if (got > max_bytes)
        throw IoError(op, fmt::format("{}: more than {} bytes, the limit for this input", source, max_bytes), hint);
      data.resize(static_cast<size_t>(std::min<uint64_t>(std::max<size_t>(2 * got, 1 << 16), max_bytes + 1)));
    }
    const ssize_t r = ::read(fd, data.data() + got, data.size() - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {  // a non-blocking descriptor: wait
      struct pollfd p {fd, POLLIN, 0};
      ::poll(&p, 1, -1);
      continue;
    }
    if (r < 0) throw IoError(op, fmt::format("{}: read failed: {}", source, why()));
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  data.resize(got);
  return data;
}

AtomicWriter::AtomicWriter(fs::path target, const char* op) : target_(std::move(target)), op_(op) {
  if (target_.has_parent_path()) create_directories(target_.parent_path(), op_);
  tmp_ = target_;
  tmp_ += ".tmp-" + std::to_string(::getpid());
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0)
    throw IoError(op_, tmp_.string() + ": cannot create: " + why(), "does the directory exist and is it writable?");
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
  if (::fsync(fd_) != 0) throw IoError(op_, tmp_.string() + ": fsync failed: " + why(), "is the disk full?");
  if (::close(fd_) != 0) {
    fd_ = -1;
    throw IoError(op_, tmp_.string() + ": close failed: " + why(), "is the disk full?");
  }
  fd_ = -1;
  std::error_code ec;
  fs::rename(tmp_, target_, ec);
  if (ec) throw IoError(op_, target_.string() + ": cannot rename into place: " + ec.message());
  committed_ = true;
  // The rename itself lives in the directory: sync it too, or a crash may forget the new name.
  fsync_dir(target_.parent_path().empty() ? fs::path(".") : target_.parent_path());
}

void write_file_atomic(const fs::path& path, std::string_view data, const char* op) {
  AtomicWriter w(path, op);
  w.write(data);
  w.commit();
}

void create_directories(const fs::path& dir, const char* op) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  std::error_code ec2;
  if (!ec && fs::is_directory(dir, ec2)) return;
  // The nearest part of the path that exists: if it is not a directory, it is the culprit.
  for (fs::path p = dir; !p.empty(); p = p.parent_path()) {
    struct stat st {};
    if (::stat(p.c_str(), &st) == 0) {
      if (!S_ISDIR(st.st_mode))
        throw IoError(op,
                      fmt::format("{}: cannot create directory: {} is {}, not a directory", dir.string(), p.string(),
                                  S_ISREG(st.st_mode) ? "a file" : kind_of(st.st_mode)),
                      "choose another path, or move " + p.string() + " out of the way");
      break;
    }
    if (p == p.parent_path()) break;  // the root
  }
  throw IoError(op, fmt::format("{}: cannot create directory: {}", dir.string(),
                                ec ? ec.message() : "it does not exist after creating it"),
                "check that the parent directory is writable and the disk is not full");
}

void rename(const fs::path& from, const fs::path& to, const char* op) {
  std::error_code ec;
  fs::rename(from, to, ec);
  if (ec)
    throw IoError(op, fmt::format("{}: cannot rename to {}: {}", from.string(), to.string(), ec.message()),
                  "check that the directory is writable and the disk is not full");
}

void remove_all(const fs::path& path, const char* op) {
  std::error_code ec;
  fs::remove_all(path, ec);
  if (ec)
    throw IoError(op, fmt::format("{}: cannot remove: {}", path.string(), ec.message()),
                  "check that its directory is writable");
}

std::vector<fs::path> list_directory(const fs::path& dir, const char* op) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) out.push_back(it->path());
  if (ec) throw IoError(op, fmt::format("{}: cannot list the directory: {}", dir.string(), ec.message()));
  return out;
}

void fsync_dir(const fs::path& dir) {
  Fd f{::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
  if (f.fd >= 0) ::fsync(f.fd);
}

StagingDir::StagingDir(fs::path target, const char* op, bool resumable) : target_(std::move(target)), op_(op) {
  if (target_.filename().empty()) target_ = target_.parent_path();  // "out/" -> "out"
  staging_ = target_.string() + (resumable ? std::string(".partial") : fmt::format(".tmp-{}", getpid()));
  std::error_code ec;
  if (!resumable) fs::remove_all(staging_, ec);  // a leftover from a crashed run with the same pid
  if (!target_.parent_path().empty()) create_directories(target_.parent_path(), op_);
  if (resumable && fs::is_directory(staging_, ec)) return;
  if (!fs::create_directory(staging_, ec) || ec)
    throw IoError(op_, fmt::format("{}: cannot create directory: {}", staging_.string(),
                                   ec ? ec.message() : "already exists"));
}

StagingDir::~StagingDir() {
  if (!committed_) {
    std::error_code ec;
    fs::remove_all(staging_, ec);
  }
}

void StagingDir::commit() {
  std::error_code ec;
  const fs::path parent = target_.parent_path().empty() ? fs::path(".") : target_.parent_path();
  if (!fs::exists(target_, ec)) {
    fs::rename(staging_, target_, ec);
    if (ec) throw IoError(op_, fmt::format("{}: cannot rename into place: {}", target_.string(), ec.message()));
    committed_ = true;
    fsync_dir(parent);
    return;
  }
  // Swap in one step, so that `target` is never missing or half-written.
  if (renameat2(AT_FDCWD, staging_.c_str(), AT_FDCWD, target_.c_str(), RENAME_EXCHANGE) != 0) {
    // Filesystems without RENAME_EXCHANGE: move the old one aside first.
    const fs::path old = target_.string() + fmt::format(".old-{}", getpid());
    fs::rename(target_, old, ec);
    if (ec) throw IoError(op_, fmt::format("{}: cannot move the old output aside: {}", target_.string(), ec.message()));
    fs::rename(staging_, target_, ec);
    if (ec) {
      std::error_code ec2;
      fs::rename(old, target_, ec2);
      throw IoError(op_, fmt::format("{}: cannot rename into place: {}", target_.string(), ec.message()));
    }
    fs::remove_all(old, ec);
  } else {
    fs::remove_all(staging_, ec);  // now holds the old contents
  }
  committed_ = true;
  fsync_dir(parent);
}

void throw_json_too_large(const std::string& source, const char* op, uint64_t size) {
  throw IoError(op, fmt::format("{}: {} bytes of JSON, more than the limit of {}", source, size, kMaxJsonBytes),
                "is this the right file?");
}

void throw_json_too_deep(const std::string& source, const char* op, int max_depth) {
  throw IoError(op, fmt::format("{}: JSON nested deeper than {} levels", source, max_depth),
                "no keel file nests that deep; is this the right file?");
}

void throw_json_malformed(const std::string& source, const char* op, size_t byte) {
  throw IoError(op, byte ? fmt::format("{}: malformed JSON near byte {}", source, byte)
                         : fmt::format("{}: malformed JSON (a number out of range?)", source),
                "check the syntax (e.g. with `python3 -m json.tool`)");
}

void throw_int_out_of_range(const std::string& what, const std::string& got, int64_t lo, int64_t hi) {
  throw ConfigError("config", fmt::format("{} must be an integer in [{}, {}], got {}", what, lo, hi, got));
}

nlohmann::json read_json_file(const fs::path& path, const char* op, int max_depth) {
  return parse_json(read_file(path, op, kMaxJsonBytes), path.string(), op, max_depth);
}

std::string quote(std::string_view s, size_t max_chars) {
  std::string out = "\"";
  for (size_t i = 0; i < s.size() && i < max_chars; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f || c == '"' || c == '\\')
      out += fmt::format("\\x{:02x}", c);
    else
      out += static_cast<char>(c);
  }
  out += s.size() > max_chars ? "\"..." : "\"";
  return out;
}

bool parse_int(std::string_view s, int64_t lo, int64_t hi, int64_t& out) {
  if (s.empty() || s.front() == '+') return false;
  int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || v < lo || v > hi) return false;
  out = v;
  return true;
}

}  // namespace keel::io
