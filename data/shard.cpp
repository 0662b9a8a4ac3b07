// Token shard writing and validated memory-mapped reading (format in shard.h).
#include "data/shard.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "core/error.h"
#include "core/io.h"

namespace keel::data {

namespace {

template <class T>
void put(std::string& buf, size_t offset, T value) {
  std::memcpy(buf.data() + offset, &value, sizeof value);  // hosts are little-endian (x86, arm)
}
template <class T>
T get(const unsigned char* p, size_t offset) {
  T v;
  std::memcpy(&v, p + offset, sizeof v);
  return v;
}

}  // namespace

uint32_t token_bytes_for(uint32_t vocab_size) { return vocab_size <= 65536 ? 2 : 4; }

std::string shard_header(uint32_t vocab_size, uint64_t num_tokens) {
  std::string buf(kShardHeaderBytes, '\0');
  std::memcpy(buf.data(), kShardMagic, sizeof kShardMagic);
  put<uint32_t>(buf, 8, kShardVersion);
  put<uint32_t>(buf, 12, kShardHeaderBytes);
  put<uint32_t>(buf, 16, vocab_size);
  put<uint32_t>(buf, 20, token_bytes_for(vocab_size));
  put<uint64_t>(buf, 24, num_tokens);
  return buf;
}

void write_shard(const std::filesystem::path& path, std::span<const uint32_t> tokens,
                 uint32_t vocab_size) {
  const uint32_t tb = token_bytes_for(vocab_size);
  std::string buf = shard_header(vocab_size, tokens.size());
  buf.resize(kShardHeaderBytes + tokens.size() * tb, '\0');
  char* out = buf.data() + kShardHeaderBytes;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] >= vocab_size)
      throw ValueError("write_shard", fmt::format("{}: token {} at {} is not below vocab size {}",
                                                  path.string(), tokens[i], i, vocab_size));
    if (tb == 2) {
      const auto v = static_cast<uint16_t>(tokens[i]);
      std::memcpy(out + 2 * i, &v, 2);
    } else {
      std::memcpy(out + 4 * i, &tokens[i], 4);
    }
  }
  io::write_file_atomic(path, buf, "write_shard");
}

void ShardReader::fail(const std::string& what, const std::string& hint) {
  if (map_) munmap(map_, map_bytes_);
  map_ = nullptr;
  throw IoError("ShardReader", fmt::format("{}: {}", path_.string(), what),
                !hint.empty() ? hint
                : !hint_.empty() ? hint_
                                 : "re-run `gpt2 prepare` to regenerate the shards");
}

void ShardReader::map_file() {
  // O_NONBLOCK: a FIFO in place of a shard must fail below, not block the open forever.
  const int fd = open(path_.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) fail(fmt::format("cannot open: {}", std::strerror(errno)));
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    fail("not a regular file");
  }
  map_bytes_ = static_cast<size_t>(st.st_size);
  if (map_bytes_ == 0) {  // mmap refuses length 0; the size checks report the empty file
    close(fd);
    return;
  }
  void* m = mmap(nullptr, map_bytes_, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (m == MAP_FAILED) fail(fmt::format("cannot map: {}", std::strerror(errno)));
  map_ = m;
}

// The file must be exactly header + num_tokens * token_bytes, and every id below the vocab size.
void ShardReader::check_size_and_ids(uint64_t header_bytes) {
  const uint64_t want = header_bytes + header_.num_tokens * header_.token_bytes;
  if (header_.num_tokens > (UINT64_MAX - header_bytes) / 4 || want != map_bytes_)
    fail(fmt::format("size disagrees with the header: {} tokens of {} bytes need {} bytes, the "
                     "file has {} (truncated or corrupt)",
                     header_.num_tokens, header_.token_bytes, want, map_bytes_));
  tokens_ = static_cast<const unsigned char*>(map_) + header_bytes;
  // One pass over the ids, so that a corrupt shard fails here and not as an out-of-range
  // embedding lookup hours into training.
  for (uint64_t i = 0; i < header_.num_tokens; ++i) {
    const uint32_t v = header_.token_bytes == 2 ? get<uint16_t>(tokens_, 2 * i)
                                                : get<uint32_t>(tokens_, 4 * i);
    if (v >= header_.vocab_size)
      fail(fmt::format("token {} at position {} is not below the vocab size {}", v, i,
                       header_.vocab_size));
  }
}

ShardReader::ShardReader(const std::filesystem::path& path) : path_(path) {
  map_file();
  if (map_bytes_ < kShardHeaderBytes)
    fail(fmt::format("truncated: {} bytes, less than the {}-byte header", map_bytes_,
                     kShardHeaderBytes));
  const auto* p = static_cast<const unsigned char*>(map_);
  if (std::memcmp(p, kShardMagic, sizeof kShardMagic) != 0)
    fail("not a keel token shard (wrong magic)");
  const auto version = get<uint32_t>(p, 8);
  if (version != kShardVersion)
    fail(fmt::format("format version {} is not supported (this build reads version {})", version,
                     kShardVersion));
  const auto header_bytes = get<uint32_t>(p, 12);
  header_.vocab_size = get<uint32_t>(p, 16);
  header_.token_bytes = get<uint32_t>(p, 20);
  header_.num_tokens = get<uint64_t>(p, 24);
  if (header_bytes != kShardHeaderBytes)
    fail(fmt::format("corrupt header: header size {} (expected {})", header_bytes,
                     kShardHeaderBytes));
  if (header_.vocab_size == 0 || header_.token_bytes != token_bytes_for(header_.vocab_size))
    fail(fmt::format("corrupt header: {} bytes per token for vocab size {}", header_.token_bytes,
                     header_.vocab_size));
  check_size_and_ids(kShardHeaderBytes);
}

ShardReader::ShardReader(const std::filesystem::path& path, const RawTokenLayout& layout)
    : path_(path) {
  const std::string hint = "check that the file was written completely and in this format";
  if (layout.token_bytes != 2 && layout.token_bytes != 4)
    fail(fmt::format("{} bytes per token is not supported (2 or 4)", layout.token_bytes), hint);
  map_file();
  if (map_bytes_ < layout.header_bytes)
    fail(fmt::format("truncated: {} bytes, less than the {}-byte header", map_bytes_,
                     layout.header_bytes), hint);
  header_.vocab_size = layout.vocab_size;
  header_.token_bytes = layout.token_bytes;
  header_.num_tokens = layout.num_tokens;
  if (layout.num_tokens == 0) {
    const uint64_t body = map_bytes_ - layout.header_bytes;
    if (body % layout.token_bytes != 0)
      fail(fmt::format("odd length: {} bytes of tokens is not a whole number of {}-byte ids",
                       body, layout.token_bytes), hint);
    header_.num_tokens = body / layout.token_bytes;
  }
  hint_ = hint;
  check_size_and_ids(layout.header_bytes);
}

ShardReader::~ShardReader() {
  if (map_) munmap(map_, map_bytes_);
}

ShardReader::ShardReader(ShardReader&& o) noexcept
    : path_(std::move(o.path_)), header_(o.header_), map_(o.map_), map_bytes_(o.map_bytes_),
      tokens_(o.tokens_), hint_(std::move(o.hint_)) {
  o.map_ = nullptr;
  o.tokens_ = nullptr;
}

void ShardReader::read(uint64_t begin, uint64_t n, int32_t* out) const {
  if (header_.token_bytes == 2) {
    for (uint64_t i = 0; i < n; ++i) out[i] = get<uint16_t>(tokens_, 2 * (begin + i));
  } else {
    for (uint64_t i = 0; i < n; ++i) out[i] = static_cast<int32_t>(get<uint32_t>(tokens_, 4 * (begin + i)));
  }
}

}  // namespace keel::data
