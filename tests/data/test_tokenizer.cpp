// GPT-2 tokenizer: reference ids from an independent encoder, round trips, invalid UTF-8.
#include <doctest/doctest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "core/error.h"
#include "data/tokenizer/tokenizer.h"
#include "test_util.h"

using namespace keel::data;

namespace {
Tokenizer& gpt2() {
  static Tokenizer tok = Tokenizer::from_dir(keel::test::gpt2_vocab_dir());
  return tok;
}
}  // namespace

TEST_CASE("tokenizer: GPT-2 vocabulary loads with <|endoftext|> = 50256") {
  CHECK(gpt2().vocab_size() == 50257);
  CHECK(gpt2().eot_id() == 50256);
  CHECK(gpt2().vocab().merges.size() == 50000);
  CHECK(gpt2().decode({50256}) == "<|endoftext|>");
}

TEST_CASE("tokenizer: reproduces the reference GPT-2 ids exactly and round-trips") {
  std::ifstream f(std::string(KEEL_SOURCE_DIR) + "/tests/data/gpt2_cases.json");
  REQUIRE(f);
  const auto cases = nlohmann::json::parse(f);
  REQUIRE(cases.size() == 22);
  for (const auto& c : cases) {
    const std::string text = c["text"];
    const std::vector<int32_t> want = c["ids"];
    const std::vector<int32_t> got = gpt2().encode(text);
    INFO("text: " << text.substr(0, 80));
    CHECK(got == want);
    CHECK(gpt2().decode(got) == text);
  }
}

TEST_CASE("tokenizer: cached and uncached encodings agree") {
  const std::string text = "the the the cat's hat, the cat's HAT! 123 123 1234";
  Tokenizer fresh = Tokenizer::from_dir(keel::test::gpt2_vocab_dir());
  const auto a = fresh.encode(text);
  const auto b = fresh.encode(text);  // second time from the cache
  CHECK(a == b);
}

TEST_CASE("tokenizer: special tokens only when asked") {
  const std::string text = "a<|endoftext|>b";
  const auto plain = gpt2().encode(text);
  CHECK(std::find(plain.begin(), plain.end(), 50256) == plain.end());
  CHECK(gpt2().encode_with_special(text) == std::vector<int32_t>{64, 50256, 65});
  CHECK(gpt2().decode(plain) == text);
}

TEST_CASE("tokenizer: empty text, invalid UTF-8 and random bytes round-trip") {
  CHECK(gpt2().encode("").empty());
  CHECK(gpt2().decode({}).empty());
  const std::vector<std::string> nasty = {
      std::string("\xff\xfe\xfd"), std::string("ab\x80" "cd"), std::string("\xc3"),
      std::string("caf\xc3\xa9\xe2\x82"), std::string("\xed\xa0\x80 surrogate"),
      std::string("\xc0\xaf overlong"), std::string("\xf4\x90\x80\x80 too big"),
      std::string("nul\0byte", 8), std::string(" \xe2\x80\xa8\xe3\x80\x80 spaces")};
  for (const auto& s : nasty) CHECK(gpt2().decode(gpt2().encode(s)) == s);
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 200; ++trial) {
    std::string s(rng() % 64, '\0');
    for (auto& ch : s) ch = static_cast<char>(rng() % 256);
    CHECK(gpt2().decode(gpt2().encode(s)) == s);
  }
}

TEST_CASE("tokenizer: decode rejects ids outside the vocabulary") {
  CHECK_THROWS_AS(gpt2().decode({1, 50257}), keel::ValueError);
  CHECK_THROWS_AS(gpt2().decode({-1}), keel::ValueError);
}

TEST_CASE("tokenizer: a prose slice round-trips") {
  const std::string text = keel::test::austen_slice(0, 200000);
  const auto ids = gpt2().encode(text);
  CHECK(ids.size() > 40000);
  CHECK(gpt2().decode(ids) == text);
}
