// The token shard file format: one flat array of token ids behind a fixed 64-byte header.
//
//   offset  size  field (little-endian)
//        0     8  magic "KEELTOK\0"
//        8     4  format version (1)
//       12     4  header size in bytes (64)
//       16     4  vocabulary size (every token id is below it)
//       20     4  bytes per token: 2 (u16, vocabularies up to 65,536) or 4 (u32)
//       24     8  token count
//       32    32  reserved, zero
//       64     -  the tokens
//
// Readers check every field and that the file size equals header + count * bytes per token,
// so truncated or padded files are caught before training starts.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>

namespace keel::data {

inline constexpr char kShardMagic[8] = {'K', 'E', 'E', 'L', 'T', 'O', 'K', '\0'};
inline constexpr uint32_t kShardVersion = 1;
inline constexpr uint32_t kShardHeaderBytes = 64;

struct ShardHeader {
  uint32_t vocab_size = 0;
  uint32_t token_bytes = 0;
  uint64_t num_tokens = 0;
};

// Where the tokens sit in a file of another tool's format (data/token_files.h reads those
// headers): header_bytes to skip, then little-endian ids of token_bytes each, all < vocab_size.
// num_tokens = 0 means "as many as the rest of the file holds" (an odd remainder is an error).
struct RawTokenLayout {
  uint64_t header_bytes = 0;
  uint32_t token_bytes = 2;
  uint32_t vocab_size = 0;
  uint64_t num_tokens = 0;
};

// 2 when every id of a vocabulary this size fits in u16, else 4.
uint32_t token_bytes_for(uint32_t vocab_size);

// The 64-byte header of a shard (what write_shard puts first), for writers that stream tokens.
std::string shard_header(uint32_t vocab_size, uint64_t num_tokens);

// Writes tokens (each < vocab_size, else ValueError) to path, atomically.
void write_shard(const std::filesystem::path& path, std::span<const uint32_t> tokens,
                 uint32_t vocab_size);

// A read-only, memory-mapped shard. The constructor validates the header, the size and every
// token id, and throws IoError naming the file and what is wrong.
class ShardReader {
 public:
  explicit ShardReader(const std::filesystem::path& path);
  // A file in another format whose header the caller has already checked; the size and every
  // id are validated as for a keel shard.
  ShardReader(const std::filesystem::path& path, const RawTokenLayout& layout);
  ~ShardReader();
  ShardReader(ShardReader&& o) noexcept;
  ShardReader& operator=(ShardReader&&) = delete;
  ShardReader(const ShardReader&) = delete;

  const ShardHeader& header() const { return header_; }
  uint64_t size() const { return header_.num_tokens; }
  const std::filesystem::path& path() const { return path_; }
  // Copies tokens [begin, begin + n) as int32 (the caller keeps begin + n <= size()).
  void read(uint64_t begin, uint64_t n, int32_t* out) const;

 private:
  std::filesystem::path path_;
  ShardHeader header_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  const unsigned char* tokens_ = nullptr;
  std::string hint_;  // what to do about a bad file of this format

  [[noreturn]] void fail(const std::string& what, const std::string& hint = {});
  void map_file();
  void check_size_and_ids(uint64_t header_bytes);
};

}  // namespace keel::data
