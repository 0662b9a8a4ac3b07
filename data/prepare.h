// Corpus preparation: text files -> documents -> train/val split -> token shards + vocabulary.
//
// The output directory (layout in dataset.h) is built under a temporary name next to it and
// swapped into place only when complete, so a failed or interrupted run leaves any previous
// output untouched, and re-running on the same input rewrites byte-identical files.
// The validation split takes whole documents, spread evenly through the corpus: document i
// (counting from 0 over all inputs in order) is held out when floor((i+1)*V/D) > floor(i*V/D),
// with D documents and V = round(D * val_fraction) (at least 1 when val_fraction > 0).
// Every document is preceded by <|endoftext|>, so it separates documents and marks the start.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "data/documents.h"

namespace keel::data {

struct PrepareOptions {
  std::vector<std::filesystem::path> inputs;  // .txt, .txt.xz / .xz, .gz
  std::filesystem::path out;
  std::filesystem::path vocab_dir;  // empty: GPT-2's bundled vocabulary (unless train_vocab)
  int32_t train_vocab = 0;          // > 0: learn a vocabulary of this size from the train split
  double val_fraction = 0.05;
  uint64_t shard_tokens = 100'000'000;  // tokens per shard file at most
  DocumentRule documents;
  bool progress = true;                             // progress bars when stderr is a tty
  std::function<void(const std::string&)> log;      // one line per stage, if set
};

struct PrepareResult {
  uint32_t vocab_size = 0;
  uint64_t train_tokens = 0, val_tokens = 0;
  uint64_t train_documents = 0, val_documents = 0;
  size_t train_shards = 0, val_shards = 0;
};

// Throws IoError (unreadable, empty or corrupt inputs, a bad vocabulary directory),
// ConfigError (conflicting options, an output path that is not a keel dataset, too few
// documents for the split) or ValueError (out-of-range values); `out` is then untouched.
PrepareResult prepare_dataset(const PrepareOptions& options);

}  // namespace keel::data
