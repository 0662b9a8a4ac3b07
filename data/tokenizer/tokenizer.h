// GPT-2's byte-level BPE tokenizer: encode(text) gives exactly GPT-2's ids.
//
// Text is split by GPT-2's pre-tokenizer (pretokenize.h); each piece's bytes start as one
// token per byte and are merged pair by pair, lowest merge rank first, as GPT-2's bpe()
// does. Pieces repeat a lot in natural text, so encoded pieces are cached; that makes
// encode() non-const in effect: use one Tokenizer per thread.
//
// Any byte string round-trips: decode(encode(x)) == x, including invalid UTF-8.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizer/vocab.h"

namespace keel::data {

class Tokenizer {
 public:
  explicit Tokenizer(Vocab vocab);
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;

  // Loads encoder.json + vocab.bpe from dir (IoError when missing or malformed).
  static Tokenizer from_dir(const std::filesystem::path& dir);

  // Plain GPT-2 encoding: "<|endoftext|>" in the text is ordinary text, as in GPT-2's encoder.
  std::vector<int32_t> encode(std::string_view text);
  // Appends to out instead of returning a new vector.
  void encode_append(std::string_view text, std::vector<int32_t>& out);
  // As encode, but each literal "<|endoftext|>" becomes eot_id().
  std::vector<int32_t> encode_with_special(std::string_view text);

  // Concatenated bytes of the tokens. ValueError on an id outside [0, vocab_size).
  std::string decode(const std::vector<int32_t>& ids) const;

  int32_t vocab_size() const;
  int32_t eot_id() const;  // <|endoftext|>; ConfigError if the vocabulary has none
  const Vocab& vocab() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace keel::data
