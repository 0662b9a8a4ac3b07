// A prepared dataset directory (what `gpt2 prepare` writes) and its splits as token streams.
//
//   DIR/meta.json            format, vocab size, <|endoftext|> id, shard lists, counts, inputs
//   DIR/vocab/               encoder.json + vocab.bpe used to make the shards
//   DIR/train_000000.bin ... token shards (shard.h), read in order as one stream per split
//   DIR/val_000000.bin  ...
//
// A directory of llm.c shards or nanoGPT's train.bin/val.bin opens as a dataset too
// (data/token_files.h): GPT-2's vocabulary, its files as the shards.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "data/shard.h"
#include "data/token_files.h"

namespace keel::data {

inline constexpr const char* kDatasetFormat = "keel-token-shards";
inline constexpr int kDatasetVersion = 1;

struct SplitInfo {
  std::vector<std::string> shards;  // file names inside the dataset directory
  uint64_t tokens = 0;
  uint64_t documents = 0;
};

struct DatasetMeta {
  DatasetFormat format = DatasetFormat::keel;
  uint32_t vocab_size = 0;
  int32_t eot_id = -1;
  uint32_t token_bytes = 0;
  SplitInfo train, val;
  std::string json;  // the whole meta.json, for fields only the app cares about
};

// Reads and checks DIR/meta.json, or describes an llm.c / nanoGPT directory. IoError when
// missing or malformed.
DatasetMeta read_dataset_meta(const std::filesystem::path& dir);

// One split of a dataset as a single stream of tokens across its shards.
class TokenSplit {
 public:
  // Opens DIR's split ("train" or "val"), validating every shard and that the shards agree
  // with meta.json. With expected_vocab_size > 0, ConfigError unless the dataset's vocabulary
  // has exactly that size (a model and its data must agree).
  static std::shared_ptr<const TokenSplit> open(const std::filesystem::path& dir,
                                                const std::string& split,
                                                uint32_t expected_vocab_size = 0);
  // An in-memory split (tests, tools).
  static std::shared_ptr<const TokenSplit> from_tokens(std::vector<int32_t> tokens,
                                                       uint32_t vocab_size);

  uint64_t size() const { return total_; }
  uint32_t vocab_size() const { return vocab_size_; }
  // Copies tokens [pos, pos + n) into out, across shard boundaries. IndexError past the end.
  void read(uint64_t pos, uint64_t n, int32_t* out) const;

 private:
  TokenSplit() = default;
  std::vector<ShardReader> shards_;
  std::vector<uint64_t> starts_;  // first stream position of each shard
  std::vector<int32_t> memory_;   // from_tokens only
  uint64_t total_ = 0;
  uint32_t vocab_size_ = 0;
};

}  // namespace keel::data
