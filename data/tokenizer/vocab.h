// A byte-level BPE vocabulary and its on-disk form, GPT-2's two files:
//   encoder.json  {"token": id, ...}  tokens spelled in GPT-2's byte-to-unicode alphabet
//   vocab.bpe     "#version: 0.2" then one merge "left right" per line, in priority order
// Both keel's tokenizer and other GPT-2 tools (Hugging Face, tiktoken loaders, gpt-3-encoder)
// read these files, so a vocabulary trained by keel works everywhere.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace keel::data {

inline constexpr std::string_view kEndOfText = "<|endoftext|>";

struct Vocab {
  std::vector<std::string> tokens;                  // id -> raw bytes of the token
  std::vector<std::pair<int32_t, int32_t>> merges;  // (left id, right id), rank order
  int32_t eot_id = -1;                              // id of <|endoftext|>, -1 if absent

  int32_t size() const { return static_cast<int32_t>(tokens.size()); }
};

// GPT-2's reversible byte <-> printable code point map (bytes_to_unicode in encoder.py).
char32_t byte_to_unicode(uint8_t b);
// The 256 bytes in the order GPT-2 gives them ids 0..255 (printable ones first).
const std::vector<uint8_t>& gpt2_byte_order();
// Raw bytes -> GPT-2 alphabet (UTF-8), and back. from_gpt2_alphabet returns false on a
// character outside the alphabet.
std::string to_gpt2_alphabet(std::string_view bytes);
bool from_gpt2_alphabet(std::string_view text, std::string& bytes);

// Loads dir/encoder.json and dir/vocab.bpe. Throws IoError naming the file and the problem
// (missing, unreadable, malformed JSON, ids not 0..N-1, a merge naming an unknown token).
Vocab load_vocab(const std::filesystem::path& dir);
// Writes both files into dir (which must exist), each via a temporary name and a rename.
void save_vocab(const Vocab& vocab, const std::filesystem::path& dir);

}  // namespace keel::data
