// GPT-2's pre-tokenization rule as a scanner (see pretokenize.h for the regex it mirrors).
#include "data/tokenizer/pretokenize.h"

#include "data/tokenizer/unicode.h"

namespace keel::data {

namespace {

// Bytes of a run of code points of class cls starting at pos.
size_t run_end(const unsigned char* s, size_t n, size_t pos, CharClass cls) {
  while (pos < n) {
    const CodeUnit u = decode_utf8(s + pos, n - pos);
    if (u.cls != cls) break;
    pos += u.len;
  }
  return pos;
}

// Length of the contraction suffix after an apostrophe at pos ('s 't 're 've 'm 'll 'd), or 0.
// The regex is case-sensitive, so "'S" is not a contraction.
size_t contraction(const unsigned char* s, size_t n, size_t pos) {
  if (pos + 1 >= n) return 0;
  const unsigned char c1 = s[pos + 1];
  if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return 2;
  if (pos + 2 >= n) return 0;
  const unsigned char c2 = s[pos + 2];
  if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return 3;
  return 0;
}

}  // namespace

size_t next_piece(std::string_view text, size_t pos) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  if (s[pos] == '\'') {
    if (size_t len = contraction(s, n, pos)) return pos + len;
  }
  const CodeUnit first = decode_utf8(s + pos, n - pos);
  // " ?X+" for X in letters, numbers, other: a single ASCII space joins the run after it.
  if (s[pos] == ' ' && pos + 1 < n) {
    const CodeUnit next = decode_utf8(s + pos + 1, n - pos - 1);
    if (next.cls != CharClass::Space) return run_end(s, n, pos + 1 + next.len, next.cls);
  }
  if (first.cls != CharClass::Space) return run_end(s, n, pos + first.len, first.cls);

  // Whitespace: find the run and the start of its last code point.
  size_t last = pos, end = pos;
  while (end < n) {
    const CodeUnit u = decode_utf8(s + end, n - end);
    if (u.cls != CharClass::Space) break;
    last = end;
    end += u.len;
  }
  if (end == n) return end;        // \s+(?!\S) takes a run that ends the text
  if (last > pos) return last;     // ... or all but the last one, which joins the next piece
  return end;                      // \s+ takes a lone whitespace before a non-space
}

std::vector<std::string_view> pretokenize(std::string_view text) {
  std::vector<std::string_view> pieces;
  for_each_piece(text, [&](std::string_view p) { pieces.push_back(p); });
  return pieces;
}

}  // namespace keel::data
