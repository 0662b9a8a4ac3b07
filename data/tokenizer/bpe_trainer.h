// Learns a byte-level BPE vocabulary (GPT-2 style) from text, deterministically.
//
// Text is pre-tokenized exactly as the tokenizer does, so merges never cross piece
// boundaries, and distinct pieces are counted once with their frequency. Training then
// repeatedly merges the most frequent adjacent pair. Ties go to the smaller (left id, right
// id), so the result depends only on the text, never on hash order or thread timing.
//
// Cost: pair counts are updated incrementally, touching only the words that contain the
// merged pair (an index pair -> words), and the best pair comes from a max-heap whose stale
// entries are refreshed lazily when popped.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "data/tokenizer/vocab.h"

namespace keel::data {

struct BpeTrainerOptions {
  // Final vocabulary size: 256 byte tokens + merges + <|endoftext|>. GPT-2 used 50,257;
  // the LS-attention paper 10,000.
  int32_t vocab_size = 10000;
  // Called now and then with (merges done, merges wanted), e.g. for a progress bar.
  std::function<void(int64_t, int64_t)> on_progress;
};

class BpeTrainer {
 public:
  // Counts the pre-tokenized pieces of text (call once per document or file).
  void add_text(std::string_view text);
  // Learns the vocabulary. It has fewer than vocab_size tokens only when the text runs out of
  // pairs to merge. ValueError if vocab_size < 257 or no text was added.
  Vocab train(const BpeTrainerOptions& options) const;

  size_t distinct_pieces() const { return counts_.size(); }

 private:
  std::unordered_map<std::string, int64_t> counts_;
};

}  // namespace keel::data
