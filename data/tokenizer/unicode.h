// UTF-8 decoding and the Unicode character classes GPT-2's pre-tokenizer needs.
//
// Classes come from ICU (General_Category L* / N* and the White_Space property), never from
// an ASCII approximation. Invalid UTF-8 never throws: each bad byte decodes as one
// "invalid" unit of class Other, so the byte survives tokenization unchanged (GPT-2 works on
// bytes, and an invalid byte behaves like the U+FFFD a Python decoder would put there).
#pragma once

#include <cstddef>
#include <cstdint>

namespace keel::data {

enum class CharClass : uint8_t { Letter, Number, Space, Other };

// One decoded code point (or one invalid byte) starting at some byte offset.
struct CodeUnit {
  char32_t cp;     // the code point; kInvalidCodePoint for an invalid byte
  uint8_t len;     // bytes consumed, 1..4
  CharClass cls;
};

inline constexpr char32_t kInvalidCodePoint = 0xFFFFFFFFu;

// Class of a valid code point (ICU for non-ASCII, a table for ASCII).
CharClass classify(char32_t cp);

namespace detail {
extern const CharClass kAsciiClass[128];
CodeUnit decode_multibyte(const unsigned char* p, size_t avail);
}  // namespace detail

// Decodes the code point at p (avail > 0 bytes available). Rejects overlong forms,
// surrogates, code points above U+10FFFF and truncated sequences (one invalid byte each).
inline CodeUnit decode_utf8(const unsigned char* p, size_t avail) {
  if (p[0] < 0x80) return {p[0], 1, detail::kAsciiClass[p[0]]};
  return detail::decode_multibyte(p, avail);
}

// True when the bytes form valid UTF-8.
bool is_valid_utf8(const char* s, size_t n);

}  // namespace keel::data
