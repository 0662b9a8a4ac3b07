// BPE trainer: agrees with a naive trainer, is deterministic, and writes loadable files.
#include <doctest/doctest.h>

#include <map>

#include "core/error.h"
#include "data/tokenizer/bpe_trainer.h"
#include "data/tokenizer/pretokenize.h"
#include "data/tokenizer/tokenizer.h"
#include "test_util.h"

using namespace keel::data;

namespace {

// Recounts every pair before every merge: slow, obviously right, same tie rule.
std::vector<std::pair<int32_t, int32_t>> naive_merges(const std::string& text, int32_t vocab_size) {
  std::map<std::string, int64_t> counts;
  for (auto p : pretokenize(text)) ++counts[std::string(p)];
  std::vector<std::string> tokens;
  int32_t byte_id[256];
  for (uint8_t b : gpt2_byte_order()) byte_id[b] = tokens.size(), tokens.emplace_back(1, char(b));
  std::vector<std::pair<std::vector<int32_t>, int64_t>> words;
  for (const auto& [w, c] : counts) {
    std::vector<int32_t> s;
    for (unsigned char b : w) s.push_back(byte_id[b]);
    words.emplace_back(s, c);
  }
  std::vector<std::pair<int32_t, int32_t>> merges;
  while (static_cast<int32_t>(tokens.size()) < vocab_size - 1) {
    std::map<std::pair<int32_t, int32_t>, int64_t> pc;
    for (const auto& [s, c] : words)
      for (size_t i = 0; i + 1 < s.size(); ++i) pc[{s[i], s[i + 1]}] += c;
    if (pc.empty()) break;
    auto best = pc.begin();
    for (auto it = pc.begin(); it != pc.end(); ++it)
      if (it->second > best->second) best = it;  // map order: ties keep the smaller pair
    const auto [a, b] = best->first;
    const std::string merged = tokens[a] + tokens[b];
    int32_t t = std::find(tokens.begin(), tokens.end(), merged) - tokens.begin();
    if (t == static_cast<int32_t>(tokens.size())) tokens.push_back(merged);
    merges.push_back({a, b});
    for (auto& [s, c] : words) {
      std::vector<int32_t> out;
      for (size_t i = 0; i < s.size(); ++i)
        if (i + 1 < s.size() && s[i] == a && s[i + 1] == b) out.push_back(t), ++i;
        else out.push_back(s[i]);
      s = out;
    }
  }
  return merges;
}

}  // namespace

TEST_CASE("bpe_trainer: the incremental trainer makes the same merges as a naive one") {
  const std::string text = keel::test::austen_slice(100000, 30000) + " aaaa aaa aa a ababab";
  BpeTrainer trainer;
  trainer.add_text(text);
  const Vocab v = trainer.train({.vocab_size = 600, .on_progress = {}});
  CHECK(v.size() == 600);
  CHECK(v.eot_id == 599);
  CHECK(v.merges == naive_merges(text, 600));
}

TEST_CASE("bpe_trainer: deterministic, independent of how text is fed") {
  const std::string a = keel::test::austen_slice(0, 50000), b = keel::test::austen_slice(50000, 50000);
  BpeTrainer t1, t2;
  t1.add_text(a);
  t1.add_text(b);
  t2.add_text(b);
  t2.add_text(a);
  const Vocab v1 = t1.train({.vocab_size = 1000, .on_progress = {}});
  const Vocab v2 = t2.train({.vocab_size = 1000, .on_progress = {}});
  CHECK(v1.tokens == v2.tokens);
  CHECK(v1.merges == v2.merges);
}

TEST_CASE("bpe_trainer: writes GPT-2 format files that load and round-trip text") {
  const std::string text = keel::test::austen_slice(0, 80000);
  BpeTrainer trainer;
  trainer.add_text(text);
  const Vocab v = trainer.train({.vocab_size = 1200, .on_progress = {}});
  keel::test::TempDir dir("bpe");
  save_vocab(v, dir.path());
  const Vocab loaded = load_vocab(dir.path());
  CHECK(loaded.tokens == v.tokens);
  CHECK(loaded.merges == v.merges);
  CHECK(loaded.eot_id == 1199);
  // Byte tokens get GPT-2's ids, so small vocabularies agree with GPT-2 on single bytes.
  const Tokenizer gpt2 = Tokenizer::from_dir(keel::test::gpt2_vocab_dir());
  for (int i = 0; i < 256; ++i) CHECK(loaded.tokens[i] == gpt2.vocab().tokens[i]);
  Tokenizer tok(loaded);
  const auto ids = tok.encode(text);
  CHECK(tok.decode(ids) == text);
  CHECK(ids.size() < text.size() / 2);  // the merges compress the text they were learned on
}

TEST_CASE("bpe_trainer: stops early when the text runs out of pairs") {
  BpeTrainer trainer;
  trainer.add_text("ab ab ab");
  const Vocab v = trainer.train({.vocab_size = 5000, .on_progress = {}});
  CHECK(v.merges.size() == 2);  // "ab" (3 times), then " ab" (twice)
  CHECK(v.size() == 256 + 2 + 1);
  CHECK(v.eot_id == v.size() - 1);
}

TEST_CASE("bpe_trainer: rejects a too-small vocabulary and empty text") {
  BpeTrainer empty;
  CHECK_THROWS_AS(empty.train({.vocab_size = 1000, .on_progress = {}}), keel::ValueError);
  BpeTrainer t;
  t.add_text("hello");
  CHECK_THROWS_AS(t.train({.vocab_size = 256, .on_progress = {}}), keel::ValueError);
}
