// GPT-2's pre-tokenizer: splits text into the pieces that byte-level BPE encodes one by one.
//
// It is a hand-written, allocation-free equivalent of GPT-2's regular expression
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// tried in that order at each position. The one subtle branch is \s+(?!\S): a whitespace
// run followed by a non-space gives up its last character, so that " word" keeps its space
// (and "\n\nword" splits as "\n", "\n", "word").
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

namespace keel::data {

// End (byte offset) of the piece that starts at byte offset pos < text.size().
size_t next_piece(std::string_view text, size_t pos);

// Calls f(std::string_view piece) for every piece, in order; the pieces concatenate to text.
template <class F>
void for_each_piece(std::string_view text, F&& f) {
  for (size_t pos = 0; pos < text.size();) {
    const size_t end = next_piece(text, pos);
    f(text.substr(pos, end - pos));
    pos = end;
  }
}

std::vector<std::string_view> pretokenize(std::string_view text);

}  // namespace keel::data
