// One split's token shards written as the tokens arrive, for `gpt2 prepare` (prepare.h): the
// current shard grows in DIR/NAME.part and is renamed to NAME_NNNNNN.bin once it holds
// shard_tokens tokens (or the input ends), so memory does not grow with the shard size.
// After each finished shard it knows where the next one starts (a document and a token offset
// in it), which is what an interrupted run needs to continue.
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace keel::data {

// What a finished shard leaves behind: the shards so far, and where the next one starts.
struct ShardStreamState {
  std::vector<std::string> shards;
  uint64_t next_doc = 0;   // the document the next shard starts in
  uint64_t next_skip = 0;  // tokens of that document already in the finished shards
};

class ShardStream {
 public:
  using OnShard = std::function<void(const std::string& file)>;
  ShardStream(std::string name, std::filesystem::path dir, uint32_t vocab_size,
              uint64_t shard_tokens);
  ~ShardStream();
  ShardStream(const ShardStream&) = delete;
  ShardStream& operator=(const ShardStream&) = delete;

  // Continues after the shards an interrupted run finished.
  void restore(const ShardStreamState& s);
  ShardStreamState state() const { return {info.shards, next_doc_, next_skip_}; }
  // Tokens of document `doc` that an earlier run already wrote: all of them (UINT64_MAX) for
  // documents before the resume point, some for the one it is in, else 0.
  uint64_t already_written(uint64_t doc) const {
    return doc < next_doc_ ? UINT64_MAX : doc == next_doc_ ? next_skip_ : 0;
  }

  // Appends ids[from:] of document `doc` (ids: <|endoftext|> then its tokens); calls on_shard
  // after each shard it finishes. ValueError for an id outside the vocabulary, IoError when
  // the disk refuses.
  void add(uint64_t doc, const std::vector<int32_t>& ids, uint64_t from, const OnShard& on_shard);
  // Closes the last, partial shard (if any tokens are in it).
  void finish(const OnShard& on_shard);

  SplitInfo info;     // shards, tokens, documents (the caller counts documents)
  size_t resumed = 0;  // shards kept from an interrupted run

 private:
  std::filesystem::path part_path() const;
  void open_part();
  void encode(const int32_t* ids, uint64_t n);
  void close_part();

  std::string name_;
  std::filesystem::path dir_;
  uint32_t vocab_size_;
  uint64_t shard_tokens_, in_shard_ = 0;
  uint32_t tb_;
  FILE* file_ = nullptr;
  std::string buf_;
  uint64_t next_doc_ = 0, next_skip_ = 0;
};

}  // namespace keel::data
