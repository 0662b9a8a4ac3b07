// Reading corpus text with decompression (see file_io.h).
#include "data/file_io.h"

#include <fmt/format.h>
#include <lzma.h>
#include <zlib.h>

#include <algorithm>

#include "core/error.h"
#include "core/io.h"

namespace keel::data {

namespace fs = std::filesystem;

namespace {

[[noreturn]] void throw_too_large(const fs::path& path, uint64_t max_bytes) {
  throw IoError("read_text_file",
                fmt::format("{}: decompresses to more than {} bytes, the limit for a file read whole",
                            path.string(), max_bytes),
                "split it into smaller files, or use `gpt2 prepare`, which streams files of any size");
}

// Room for more output: double it, but never past max_bytes + 1, so that a bomb is caught by
// producing one byte too many instead of by a huge allocation.
void grow(std::string& out, size_t produced, uint64_t max_bytes, const fs::path& path) {
  if (produced < out.size()) return;
  if (produced > max_bytes) throw_too_large(path, max_bytes);
  out.resize(static_cast<size_t>(std::min<uint64_t>(uint64_t(out.size()) * 2, max_bytes + 1)));
}

size_t first_size(const std::string& in, uint64_t max_bytes) {
  return static_cast<size_t>(std::min<uint64_t>(std::max<uint64_t>(uint64_t(in.size()) * 4, 1 << 16), max_bytes + 1));
}

std::string decompress_xz(const std::string& in, const fs::path& path, uint64_t max_bytes) {
  lzma_stream strm = LZMA_STREAM_INIT;
  if (lzma_stream_decoder(&strm, UINT64_MAX, LZMA_CONCATENATED) != LZMA_OK)
    throw IoError("read_text_file", fmt::format("{}: cannot start the xz decoder", path.string()));
  std::string out(first_size(in, max_bytes), '\0');
  strm.next_in = reinterpret_cast<const uint8_t*>(in.data());
  strm.avail_in = in.size();
  size_t produced = 0;
  lzma_ret ret = LZMA_OK;
  while (ret == LZMA_OK) {
    try {
      grow(out, produced, max_bytes, path);
    } catch (...) {
      lzma_end(&strm);
      throw;
    }
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

std::string decompress_gz(const std::string& in, const fs::path& path, uint64_t max_bytes) {
  // zlib's gzread passes non-gzip data through unchanged ("transparent mode"): a .gz whose magic
  // bytes are damaged would enter the dataset as binary garbage. Check the magic ourselves.
  if (in.size() < 2 || static_cast<unsigned char>(in[0]) != 0x1f || static_cast<unsigned char>(in[1]) != 0x8b)
    throw IoError("read_text_file", fmt::format("{}: not gzip data (the first two bytes are not 1f 8b)", path.string()),
                  "check the file with `gzip -t`, or drop the .gz suffix if it is plain text");
  z_stream strm{};
  // 15 + 32: a 32 KiB window, gzip or zlib header detected automatically.
  if (inflateInit2(&strm, 15 + 32) != Z_OK)
    throw IoError("read_text_file", fmt::format("{}: cannot start the gzip decoder", path.string()));
  std::string out(first_size(in, max_bytes), '\0');
  size_t consumed = 0, produced = 0;
  int ret = Z_OK;
  while (true) {
    try {
      grow(out, produced, max_bytes, path);
    } catch (...) {
      inflateEnd(&strm);
      throw;
    }
    strm.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data())) + consumed;
    strm.avail_in = static_cast<uInt>(std::min<size_t>(in.size() - consumed, 1u << 30));
    strm.next_out = reinterpret_cast<Bytef*>(out.data()) + produced;
    strm.avail_out = static_cast<uInt>(std::min<size_t>(out.size() - produced, 1u << 30));
    const uInt in_before = strm.avail_in, out_before = strm.avail_out;
    ret = inflate(&strm, Z_NO_FLUSH);
    consumed += in_before - strm.avail_in;
    produced += out_before - strm.avail_out;
    if (ret == Z_STREAM_END) {
      // Concatenated members (as `cat a.gz b.gz` makes) are one valid gzip file.
      if (consumed == in.size()) break;
      if (inflateReset(&strm) != Z_OK) break;
      continue;
    }
    if (ret != Z_OK && ret != Z_BUF_ERROR) break;
    if (ret == Z_BUF_ERROR && consumed == in.size() && produced < out.size()) break;  // truncated
  }
  inflateEnd(&strm);
  if (ret != Z_STREAM_END || consumed != in.size())
    throw IoError("read_text_file",
                  fmt::format("{}: corrupt or truncated gzip data (zlib error {})", path.string(), ret),
                  "check the file with `gzip -t`");
  out.resize(produced);
  return out;
}

}  // namespace

std::string read_text_file(const fs::path& path, uint64_t max_bytes) {
  std::string raw = io::read_file(path, "read_text_file", max_bytes);
  const std::string ext = path.extension().string();
  if (ext != ".gz" && ext != ".xz") return raw;
  std::string text = ext == ".gz" ? decompress_gz(raw, path, max_bytes) : decompress_xz(raw, path, max_bytes);
  if (text.size() > max_bytes) throw_too_large(path, max_bytes);  // ended just past the limit
  return text;
}

}  // namespace keel::data
