// UTF-8 decoding and ICU-backed character classes (see unicode.h).
#include "data/tokenizer/unicode.h"

#include <unicode/uchar.h>

namespace keel::data {

namespace detail {

// ASCII classes, checked against ICU by tests (test_pretokenize.cpp).
static constexpr CharClass make_ascii_class(int c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return CharClass::Letter;
  if (c >= '0' && c <= '9') return CharClass::Number;
  if (c == ' ' || (c >= 0x09 && c <= 0x0D)) return CharClass::Space;
  return CharClass::Other;
}

#define KEEL_C(i) make_ascii_class(i)
#define KEEL_C8(i) KEEL_C(i), KEEL_C(i + 1), KEEL_C(i + 2), KEEL_C(i + 3), \
                   KEEL_C(i + 4), KEEL_C(i + 5), KEEL_C(i + 6), KEEL_C(i + 7)
const CharClass kAsciiClass[128] = {
    KEEL_C8(0),  KEEL_C8(8),  KEEL_C8(16), KEEL_C8(24), KEEL_C8(32), KEEL_C8(40),
    KEEL_C8(48), KEEL_C8(56), KEEL_C8(64), KEEL_C8(72), KEEL_C8(80), KEEL_C8(88),
    KEEL_C8(96), KEEL_C8(104), KEEL_C8(112), KEEL_C8(120)};
#undef KEEL_C8
#undef KEEL_C

CodeUnit decode_multibyte(const unsigned char* p, size_t avail) {
  const CodeUnit invalid{kInvalidCodePoint, 1, CharClass::Other};
  const unsigned char b0 = p[0];
  size_t len;
  char32_t cp, min;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2, cp = b0 & 0x1F, min = 0x80;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3, cp = b0 & 0x0F, min = 0x800;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4, cp = b0 & 0x07, min = 0x10000;
  } else {
    return invalid;  // continuation byte, C0/C1 overlong lead, or F5..FF
  }
  if (avail < len) return invalid;
  for (size_t i = 1; i < len; ++i) {
    if ((p[i] & 0xC0) != 0x80) return invalid;
    cp = (cp << 6) | (p[i] & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return invalid;
  return {cp, static_cast<uint8_t>(len), classify(cp)};
}

}  // namespace detail

CharClass classify(char32_t cp) {
  if (cp < 0x80) return detail::kAsciiClass[cp];
  const auto c = static_cast<UChar32>(cp);
  // The regex's \s is Unicode White_Space; \p{L} and \p{N} are General_Category L* and N*.
  if (u_isUWhiteSpace(c)) return CharClass::Space;
  const uint32_t mask = U_GET_GC_MASK(c);
  if (mask & U_GC_L_MASK) return CharClass::Letter;
  if (mask & U_GC_N_MASK) return CharClass::Number;
  return CharClass::Other;
}

bool is_valid_utf8(const char* s, size_t n) {
  const auto* p = reinterpret_cast<const unsigned char*>(s);
  for (size_t i = 0; i < n;) {
    const CodeUnit u = decode_utf8(p + i, n - i);
    if (u.cp == kInvalidCodePoint) return false;
    i += u.len;
  }
  return true;
}

}  // namespace keel::data
