// File reading with decompression, atomic writes and staged directories (see file_io.h).
#include "data/file_io.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <lzma.h>
#include <stdio.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "core/error.h"

namespace keel::data {

namespace fs = std::filesystem;

namespace {

std::string errno_text() { return std::strerror(errno); }

void check_regular_file(const fs::path& path, const char* op) {
  std::error_code ec;
  const auto st = fs::status(path, ec);
  if (ec || !fs::exists(st))
    throw IoError(op, fmt::format("{}: file not found", path.string()), "check the path");
  if (fs::is_directory(st))
    throw IoError(op, fmt::format("{}: is a directory, expected a file", path.string()));
}

std::string decompress_xz(const std::string& in, const fs::path& path) {
  lzma_stream strm = LZMA_STREAM_INIT;
  if (lzma_stream_decoder(&strm, UINT64_MAX, LZMA_CONCATENATED) != LZMA_OK)
    throw IoError("read_text_file", fmt::format("{}: cannot start the xz decoder", path.string()));
  std::string out;
  out.resize(std::max<size_t>(in.size() * 4, 1 << 16));
  strm.next_in = reinterpret_cast<const uint8_t*>(in.data());
  strm.avail_in = in.size();
  size_t produced = 0;
  lzma_ret ret = LZMA_OK;
  while (ret == LZMA_OK) {
    if (produced == out.size()) out.resize(out.size() * 2);
    strm.next_out = reinterpret_cast<uint8_t*>(out.data()) + produced;
    strm.avail_out = out.size() - produced;
    ret = lzma_code(&strm, LZMA_FINISH);
    produced = out.size() - strm.avail_out;
  }
  lzma_end(&strm);
  if (ret != LZMA_STREAM_END)
    throw IoError("read_text_file",
                  fmt::format("{}: corrupt or truncated xz data (liblzma error {})", path.string(),
                              static_cast<int>(ret)),
                  "re-download the file or check it with `xz -t`");
  out.resize(produced);
  return out;
}

std::string decompress_gz(const fs::path& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) throw IoError("read_text_file", fmt::format("{}: cannot open: {}", path.string(),
                                                      errno_text()));
  std::string out;
  char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof buf)) > 0) out.append(buf, n);
  int err = Z_OK;
  const char* msg = gzerror(f, &err);
  const std::string message = msg ? msg : "";
  gzclose(f);
  if (n < 0 || (err != Z_OK && err != Z_STREAM_END))
    throw IoError("read_text_file",
                  fmt::format("{}: corrupt or truncated gzip data ({})", path.string(), message),
                  "check the file with `gzip -t`");
  return out;
}

}  // namespace

std::string read_file(const fs::path& path) {
  check_regular_file(path, "read_file");
  std::ifstream f(path, std::ios::binary);
  if (!f) throw IoError("read_file", fmt::format("{}: cannot open: {}", path.string(),
                                                 errno_text()));
  std::string data;
  f.seekg(0, std::ios::end);
  const auto size = f.tellg();
  if (size < 0) throw IoError("read_file", fmt::format("{}: cannot read", path.string()));
  data.resize(static_cast<size_t>(size));
  f.seekg(0);
  f.read(data.data(), size);
  if (!f) throw IoError("read_file", fmt::format("{}: read failed: {}", path.string(),
                                                 errno_text()));
  return data;
}

std::string read_text_file(const fs::path& path) {
  const std::string ext = path.extension().string();
  if (ext == ".gz") {
    check_regular_file(path, "read_text_file");
    return decompress_gz(path);
  }
  std::string raw = read_file(path);
  if (ext == ".xz") return decompress_xz(raw, path);
  return raw;
}

void write_file_atomic(const fs::path& path, std::string_view data) {
  const fs::path tmp = path.string() + fmt::format(".tmp-{}", getpid());
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) throw IoError("write_file", fmt::format("{}: cannot create: {}", tmp.string(),
                                                    errno_text()));
    f.write(data.data(), static_cast<std::streamsize>(data.size()));
    f.flush();
    if (!f) {
      std::error_code ec;
      fs::remove(tmp, ec);
      throw IoError("write_file", fmt::format("{}: write failed: {}", tmp.string(), errno_text()),
                    "is the disk full?");
    }
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    throw IoError("write_file", fmt::format("{}: cannot rename into place: {}", path.string(),
                                            ec.message()));
  }
}

StagingDir::StagingDir(fs::path target, bool resumable) : target_(std::move(target)) {
  if (target_.filename().empty()) target_ = target_.parent_path();  // "out/" -> "out"
  staging_ = target_.string() + (resumable ? std::string(".partial") : fmt::format(".tmp-{}", getpid()));
  std::error_code ec;
  if (!resumable) fs::remove_all(staging_, ec);  // a leftover from a crashed run with the same pid
  if (!target_.parent_path().empty()) fs::create_directories(target_.parent_path(), ec);
  if (resumable && fs::is_directory(staging_, ec)) return;
  if (!fs::create_directory(staging_, ec) || ec)
    throw IoError("prepare", fmt::format("{}: cannot create directory: {}", staging_.string(),
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
  if (!fs::exists(target_, ec)) {
    fs::rename(staging_, target_, ec);
    if (ec) throw IoError("prepare", fmt::format("{}: cannot rename into place: {}",
                                                 target_.string(), ec.message()));
    committed_ = true;
    return;
  }
  // Swap in one step, so that `target` is never missing or half-written.
  if (renameat2(AT_FDCWD, staging_.c_str(), AT_FDCWD, target_.c_str(), RENAME_EXCHANGE) != 0) {
    // Filesystems without RENAME_EXCHANGE: move the old one aside first.
    const fs::path old = target_.string() + fmt::format(".old-{}", getpid());
    fs::rename(target_, old, ec);
    if (ec) throw IoError("prepare", fmt::format("{}: cannot move the old output aside: {}",
                                                 target_.string(), ec.message()));
    fs::rename(staging_, target_, ec);
    if (ec) {
      std::error_code ec2;
      fs::rename(old, target_, ec2);
      throw IoError("prepare", fmt::format("{}: cannot rename into place: {}", target_.string(),
                                           ec.message()));
    }
    fs::remove_all(old, ec);
  } else {
    fs::remove_all(staging_, ec);  // now holds the old contents
  }
  committed_ = true;
}

}  // namespace keel::data
