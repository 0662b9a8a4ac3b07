// GPT-2's pre-tokenization rule and the Unicode classes behind it.
#include <doctest/doctest.h>

#include <unicode/uchar.h>

#include <string>

#include "data/tokenizer/pretokenize.h"
#include "data/tokenizer/unicode.h"

using namespace keel::data;
using Pieces = std::vector<std::string_view>;

TEST_CASE("pretokenize: contractions, words, numbers, punctuation") {
  CHECK(pretokenize("We're here; you've seen it") ==
        Pieces{"We", "'re", " here", ";", " you", "'ve", " seen", " it"});
  CHECK(pretokenize("I'd they'll 's 't 'm 'd") ==
        Pieces{"I", "'d", " they", "'ll", " '", "s", " '", "t", " '", "m", " '", "d"});
  CHECK(pretokenize("DON'T") == Pieces{"DON", "'", "T"});  // case-sensitive, as GPT-2
  CHECK(pretokenize("abc123 456def") == Pieces{"abc", "123", " 456", "def"});
  CHECK(pretokenize("x = f(y)?!") == Pieces{"x", " =", " f", "(", "y", ")?!"});
  CHECK(pretokenize("?!'s") == Pieces{"?!'", "s"});  // an Other run does not stop at '
}

TEST_CASE("pretokenize: whitespace runs give their last space to the next word") {
  CHECK(pretokenize("a  b") == Pieces{"a", " ", " b"});
  CHECK(pretokenize("a    b") == Pieces{"a", "   ", " b"});
  CHECK(pretokenize("trailing   ") == Pieces{"trailing", "   "});
  CHECK(pretokenize("  lead") == Pieces{" ", " lead"});
  CHECK(pretokenize("a\n\nb") == Pieces{"a", "\n", "\n", "b"});
  CHECK(pretokenize("a \n b") == Pieces{"a", " \n", " b"});
  CHECK(pretokenize("a\tb") == Pieces{"a", "\t", "b"});
  CHECK(pretokenize("x\r\ny") == Pieces{"x", "\r", "\n", "y"});
  CHECK(pretokenize(" ") == Pieces{" "});
  CHECK(pretokenize("").empty());
}

TEST_CASE("pretokenize: Unicode letters, numbers and spaces are classed by ICU") {
  CHECK(pretokenize("déjà vu") == Pieces{"déjà", " vu"});
  CHECK(pretokenize("мир 世界 κόσμε") == Pieces{"мир", " 世界", " κόσμε"});
  CHECK(pretokenize("x²½Ⅻ") == Pieces{"x", "²½Ⅻ"});          // No and Nl are numbers
  CHECK(pretokenize("٣٤ ٥") == Pieces{"٣٤", " ٥"});             // Arabic-Indic digits
  CHECK(pretokenize("a\u00a0b") == Pieces{"a", "\u00a0", "b"});  // NBSP is White_Space
  CHECK(pretokenize("a\u3000\u3000b") == Pieces{"a", "\u3000", "\u3000", "b"});
  CHECK(pretokenize("→ ★") == Pieces{"→", " ★"});
  CHECK(pretokenize("e\u0301") == Pieces{"e", "\u0301"});  // a combining mark is not \p{L}
}

TEST_CASE("pretokenize: invalid UTF-8 bytes act as 'other' characters and are kept") {
  const std::string s = "ab\xff\xfe cd \x80";
  const auto p = pretokenize(s);
  CHECK(p == Pieces{"ab", "\xff\xfe", " cd", " \x80"});
  std::string joined;
  for (auto v : p) joined += v;
  CHECK(joined == s);
  CHECK_FALSE(is_valid_utf8("\xc3", 1));
  CHECK_FALSE(is_valid_utf8("\xed\xa0\x80", 3));  // surrogate
  CHECK_FALSE(is_valid_utf8("\xe0\x80\x80", 3));  // overlong
  CHECK(is_valid_utf8("\xf0\x9f\x9a\x80", 4));
}

TEST_CASE("unicode: the ASCII fast path agrees with ICU for every ASCII character") {
  for (char32_t c = 0; c < 128; ++c) {
    CharClass icu = CharClass::Other;
    if (u_isUWhiteSpace(static_cast<UChar32>(c))) icu = CharClass::Space;
    else if (U_GET_GC_MASK(c) & U_GC_L_MASK) icu = CharClass::Letter;
    else if (U_GET_GC_MASK(c) & U_GC_N_MASK) icu = CharClass::Number;
    CHECK(classify(c) == icu);
  }
}
