// Incremental byte-level BPE training (see bpe_trainer.h).
#include "data/tokenizer/bpe_trainer.h"

#include <fmt/format.h>

#include <algorithm>
#include <queue>

#include "core/error.h"
#include "data/tokenizer/pretokenize.h"

namespace keel::data {

namespace {

using Pair = uint64_t;  // (left id << 32) | right id; ordering by key = ordering by (left, right)
Pair make_pair(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }
int32_t left_of(Pair p) { return int32_t(p >> 32); }
int32_t right_of(Pair p) { return int32_t(p & 0xFFFFFFFFu); }

struct HeapEntry {
  int64_t count;
  Pair pair;
  // Max-heap on count; on equal counts the smaller pair wins.
  bool operator<(const HeapEntry& o) const {
    return count != o.count ? count < o.count : pair > o.pair;
  }
};

struct Word {
  std::vector<int32_t> symbols;
  int64_t count;
  uint32_t seen_at = UINT32_MAX;  // last merge that visited this word (dedupes the index)
};

}  // namespace

void BpeTrainer::add_text(std::string_view text) {
  for_each_piece(text, [&](std::string_view piece) {
    auto it = counts_.find(std::string(piece));
    if (it == counts_.end()) counts_.emplace(std::string(piece), 1);
    else ++it->second;
  });
}

Vocab BpeTrainer::train(const BpeTrainerOptions& options) const {
  if (options.vocab_size < 257)
    throw ValueError("BpeTrainer", fmt::format("vocab_size {} is too small", options.vocab_size),
                     "a byte-level vocabulary needs 256 byte tokens + <|endoftext|>: use >= 257");
  if (counts_.empty())
    throw ValueError("BpeTrainer", "no text to learn from", "add_text() some non-empty text");

  Vocab vocab;
  int32_t byte_id[256];
  for (uint8_t b : gpt2_byte_order()) {  // ids 0..255 as in GPT-2, so byte tokens agree
    byte_id[b] = vocab.size();
    vocab.tokens.emplace_back(1, static_cast<char>(b));
  }
  std::unordered_map<std::string, int32_t> id_of;
  for (int32_t i = 0; i < vocab.size(); ++i) id_of.emplace(vocab.tokens[i], i);

  // Words in sorted order, so that everything downstream is independent of hash order.
  std::vector<std::pair<std::string_view, int64_t>> sorted(counts_.begin(), counts_.end());
  std::sort(sorted.begin(), sorted.end());
  std::vector<Word> words;
  words.reserve(sorted.size());
  for (const auto& [piece, count] : sorted) {
    if (piece.size() < 2) continue;  // nothing to merge in one byte
    Word w{{}, count};
    for (unsigned char b : piece) w.symbols.push_back(byte_id[b]);
    words.push_back(std::move(w));
  }

  std::unordered_map<Pair, int64_t> pair_count;
  std::unordered_map<Pair, std::vector<uint32_t>> where;  // may hold stale or repeated words
  for (uint32_t wi = 0; wi < words.size(); ++wi) {
    const auto& s = words[wi].symbols;
    for (size_t i = 0; i + 1 < s.size(); ++i) {
      const Pair p = make_pair(s[i], s[i + 1]);
      pair_count[p] += words[wi].count;
      auto& list = where[p];
      if (list.empty() || list.back() != wi) list.push_back(wi);
    }
  }
  std::priority_queue<HeapEntry> heap;
  for (const auto& [p, c] : pair_count) heap.push({c, p});

  const int64_t merges_wanted = options.vocab_size - 1 - 256;
  std::vector<int32_t> merged;
  std::vector<Pair> touched;
  while (vocab.size() < options.vocab_size - 1 && !heap.empty()) {
    const HeapEntry top = heap.top();
    heap.pop();
    const int64_t current = pair_count[top.pair];
    if (current != top.count) {  // stale: counts of old pairs only fall, so re-queue
      if (current > 0) heap.push({current, top.pair});
      continue;
    }
    if (current <= 0) break;
    const int32_t a = left_of(top.pair), b = right_of(top.pair);
    const std::string text = vocab.tokens[a] + vocab.tokens[b];
    int32_t t;
    if (auto it = id_of.find(text); it != id_of.end()) {
      t = it->second;  // the same bytes reached by another split: reuse the token
    } else {
      t = vocab.size();
      vocab.tokens.push_back(text);
      id_of.emplace(text, t);
    }
    const uint32_t merge_index = static_cast<uint32_t>(vocab.merges.size());
    vocab.merges.emplace_back(a, b);

    touched.clear();
    const std::vector<uint32_t> list = std::move(where[top.pair]);
    where.erase(top.pair);
    for (uint32_t wi : list) {
      Word& w = words[wi];
      if (w.seen_at == merge_index) continue;
      w.seen_at = merge_index;
      auto& s = w.symbols;
      merged.clear();
      for (size_t i = 0; i < s.size(); ++i) {
        if (i + 1 < s.size() && s[i] == a && s[i + 1] == b) merged.push_back(t), ++i;
        else merged.push_back(s[i]);
      }
      if (merged.size() == s.size()) continue;  // stale index entry
      for (size_t i = 0; i + 1 < s.size(); ++i) pair_count[make_pair(s[i], s[i + 1])] -= w.count;
      for (size_t i = 0; i + 1 < merged.size(); ++i) {
        const Pair p = make_pair(merged[i], merged[i + 1]);
        pair_count[p] += w.count;
        if (merged[i] == t || merged[i + 1] == t) {
          touched.push_back(p);
          auto& l = where[p];
          if (l.empty() || l.back() != wi) l.push_back(wi);
        }
      }
      s.swap(merged);
    }
    // Pairs with the new token are the only ones whose count can have risen: queue them.
    std::sort(touched.begin(), touched.end());
    touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
    for (Pair p : touched)
      if (pair_count[p] > 0) heap.push({pair_count[p], p});
    if (options.on_progress && (merge_index % 64 == 0))
      options.on_progress(merge_index + 1, merges_wanted);
  }
  if (options.on_progress) options.on_progress(vocab.merges.size(), merges_wanted);
  vocab.eot_id = vocab.size();
  vocab.tokens.emplace_back(kEndOfText);
  return vocab;
}

}  // namespace keel::data
