// Streaming shard writer (see shard_stream.h).
#include "data/shard_stream.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "data/shard.h"

namespace keel::data {

namespace fs = std::filesystem;

ShardStream::ShardStream(std::string name, fs::path dir, uint32_t vocab_size, uint64_t shard_tokens)
    : name_(std::move(name)), dir_(std::move(dir)), vocab_size_(vocab_size),
      shard_tokens_(shard_tokens), tb_(token_bytes_for(vocab_size)) {}

ShardStream::~ShardStream() {
  if (file_) std::fclose(file_);
}

void ShardStream::restore(const ShardStreamState& s) {
  info.shards = s.shards;
  next_doc_ = s.next_doc;
  next_skip_ = s.next_skip;
  info.tokens = info.shards.size() * shard_tokens_;
  resumed = info.shards.size();
}

void ShardStream::add(uint64_t doc, const std::vector<int32_t>& ids, uint64_t from,
                      const OnShard& on_shard) {
  for (uint64_t k = from; k < ids.size();) {
    if (!file_) open_part();
    const uint64_t take = std::min<uint64_t>(ids.size() - k, shard_tokens_ - in_shard_);
    encode(ids.data() + k, take);
    k += take, in_shard_ += take, info.tokens += take;
    if (in_shard_ == shard_tokens_) {
      // The next shard starts at token k of this document, or with the next document.
      if (k < ids.size()) next_doc_ = doc, next_skip_ = k;
      else next_doc_ = doc + 1, next_skip_ = 0;
      close_part();
      if (on_shard) on_shard(info.shards.back());
    }
  }
}

void ShardStream::finish(const OnShard& on_shard) {
  if (!file_ || in_shard_ == 0) return;
  close_part();
  if (on_shard) on_shard(info.shards.back());
}

fs::path ShardStream::part_path() const { return dir_ / (name_ + ".part"); }

void ShardStream::open_part() {
  file_ = std::fopen(part_path().c_str(), "wb");
  if (!file_)
    throw IoError("prepare", fmt::format("{}: cannot write: {}", part_path().string(), std::strerror(errno)));
  const std::string header = shard_header(vocab_size_, 0);  // the count is set on close
  std::fwrite(header.data(), 1, header.size(), file_);
  in_shard_ = 0;
}

void ShardStream::encode(const int32_t* ids, uint64_t n) {
  buf_.resize(n * tb_);
  for (uint64_t i = 0; i < n; ++i) {
    if (ids[i] < 0 || uint32_t(ids[i]) >= vocab_size_)
      throw ValueError("prepare", fmt::format("token {} is not below vocab size {}", ids[i], vocab_size_));
    if (tb_ == 2) {
      const auto v = static_cast<uint16_t>(ids[i]);
      std::memcpy(buf_.data() + 2 * i, &v, 2);
    } else {
      std::memcpy(buf_.data() + 4 * i, &ids[i], 4);
    }
  }
  if (std::fwrite(buf_.data(), 1, buf_.size(), file_) != buf_.size())
    throw IoError("prepare", fmt::format("{}: write failed (disk full?)", part_path().string()));
}

// The header gets the real count and the file is flushed to disk before the rename, so a
// shard under its final name is always whole, even after a power cut.
void ShardStream::close_part() {
  const std::string header = shard_header(vocab_size_, in_shard_);
  const bool ok = std::fseek(file_, 0, SEEK_SET) == 0 &&
                  std::fwrite(header.data(), 1, header.size(), file_) == header.size() &&
                  std::fflush(file_) == 0 && fsync(fileno(file_)) == 0;
  std::fclose(file_);
  file_ = nullptr;
  if (!ok) throw IoError("prepare", fmt::format("{}: write failed (disk full?)", part_path().string()));
  const std::string name = fmt::format("{}_{:06d}.bin", name_, info.shards.size());
  fs::rename(part_path(), dir_ / name);
  info.shards.push_back(name);
  in_shard_ = 0;
}

}  // namespace keel::data
