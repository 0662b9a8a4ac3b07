// Corpus preparation: text or JSON Lines files -> documents -> train/val split -> token shards
// + vocabulary, streamed: memory stays under a bound whatever the corpus size.
//
// Pipeline: the inputs (files, folders, globs, stdin; doc_stream.h) are read in order and cut
// into documents; documents are taken in rounds of about memory_mb / 4 of text, tokenized on
// `threads` threads (one Tokenizer each), and appended in document order to the split's current
// shard file, which is closed and renamed once it holds shard_tokens tokens. The output is the
// same byte for byte whatever the number of threads or the memory bound.
//
// The output directory (layout in dataset.h) is built in OUT.partial next to it and swapped
// into place only when complete, so a failed run leaves any previous output untouched. After
// each finished shard, OUT.partial/state.json records it and where the next shard starts (a
// document and a token offset in it); a run interrupted by a signal, a crash or a power cut
// and started again with the same inputs and options keeps the finished shards and tokenizes
// only from there on (inputs are re-read and re-split, which is cheap, but not re-tokenized).
// An error that is the input's fault (corrupt file, bad option) deletes OUT.partial.
//
// The validation split takes whole documents, spread evenly through the corpus as it streams:
// document i (counting from 0 over all inputs in order) is held out when
// floor((i+1)*f + 1/2) > floor(i*f + 1/2), f = val_fraction: one document in every 1/f, the
// first at about 1/(2f). When that holds out none (a corpus of fewer documents) and f > 0, the
// last document is held out instead. Every document is preceded by <|endoftext|>, so it separates
// documents and marks the start.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "data/doc_stream.h"

namespace keel::data {

// Whether document i belongs to the validation split by the rule above (without the
// small-corpus exception for the last document).
bool is_validation_document(uint64_t i, double val_fraction);

struct PrepareOptions {
  std::vector<std::filesystem::path> inputs;  // files, folders, globs, "-" (doc_stream.h)
  std::filesystem::path out;
  std::filesystem::path vocab_dir;  // empty: GPT-2's bundled vocabulary (unless train_vocab)
  int32_t train_vocab = 0;          // > 0: learn a vocabulary of this size from the train split
  double val_fraction = 0.05;
  uint64_t shard_tokens = 100'000'000;  // tokens per shard file at most
  DocumentRule documents;
  std::string text_field = "text";  // the document field of JSON Lines records
  int threads = 0;                  // tokenizing threads; 0 = every core
  uint64_t memory_mb = 1024;        // bound on text and tokens in flight (>= 16)
  // Called after each finished shard is recorded (file name): tests interrupt here.
  std::function<void(const std::string&)> on_shard;
  bool progress = true;                             // progress bars when stderr is a tty
  std::function<void(const std::string&)> log;      // one line per stage, if set
};

struct PrepareResult {
  uint32_t vocab_size = 0;
  uint64_t train_tokens = 0, val_tokens = 0;
  uint64_t train_documents = 0, val_documents = 0;
  size_t train_shards = 0, val_shards = 0;
  size_t resumed_shards = 0;  // shards kept from an interrupted run
};

// Throws IoError (unreadable, empty or corrupt inputs, a bad vocabulary directory),
// ConfigError (conflicting options, an output path that is not a keel dataset, too few
// documents for the split) or ValueError (out-of-range values); `out` is then untouched.
PrepareResult prepare_dataset(const PrepareOptions& options);

}  // namespace keel::data
