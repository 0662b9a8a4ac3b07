// Incremental byte-level BPE training (see bpe_trainer.h).
#include "data/tokenizer/bpe_trainer.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <optional>
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

// The 256 byte tokens, ids 0..255 in GPT-2's order, so byte tokens agree; byte_id[b]: b's id.
Vocab byte_vocab(std::array<int32_t, 256>& byte_id) {
  Vocab vocab;
  for (uint8_t b : gpt2_byte_order()) {
    byte_id[b] = vocab.size();
    vocab.tokens.emplace_back(1, static_cast<char>(b));
  }
  return vocab;
}

// The pieces of two bytes or more as words of byte tokens, in sorted order, so that everything
// downstream is independent of hash order.
std::vector<Word> split_words(const std::unordered_map<std::string, int64_t>& counts,
                              const std::array<int32_t, 256>& byte_id) {
  std::vector<std::pair<std::string_view, int64_t>> sorted(counts.begin(), counts.end());
  std::sort(sorted.begin(), sorted.end());
  std::vector<Word> words;
  words.reserve(sorted.size());
  for (const auto& [piece, count] : sorted) {
    if (piece.size() < 2) continue;  // nothing to merge in one byte
    Word w{{}, count};
    for (unsigned char b : piece) w.symbols.push_back(byte_id[b]);
    words.push_back(std::move(w));
  }
  return words;
}

// What training keeps between merges: the words, each adjacent pair's count over them, an index
// pair -> words, and a max-heap of pairs by count whose stale entries are refreshed when popped.
struct MergeState {
  std::vector<Word> words;
  std::unordered_map<Pair, int64_t> pair_count;
  std::unordered_map<Pair, std::vector<uint32_t>> where;  // may hold stale or repeated words
  std::priority_queue<HeapEntry> heap;
  std::vector<int32_t> merged;  // scratch: a word's symbols after a merge
  std::vector<Pair> touched;    // scratch: the pairs a merge created
};

// Counts every adjacent pair of the words, indexes where each occurs, and queues them all.
void count_pairs(MergeState& m) {
  for (uint32_t wi = 0; wi < m.words.size(); ++wi) {
    const auto& s = m.words[wi].symbols;
    for (size_t i = 0; i + 1 < s.size(); ++i) {
      const Pair p = make_pair(s[i], s[i + 1]);
      m.pair_count[p] += m.words[wi].count;
      auto& list = m.where[p];
      if (list.empty() || list.back() != wi) list.push_back(wi);
    }
  }
  for (const auto& [p, c] : m.pair_count) m.heap.push({c, p});
}

// The most frequent pair (ties: the smaller), or nullopt when no pair is left to merge.
std::optional<Pair> pop_best(MergeState& m) {
  while (!m.heap.empty()) {
    const HeapEntry top = m.heap.top();
    m.heap.pop();
    const int64_t current = m.pair_count[top.pair];
    if (current != top.count) {  // stale: counts of old pairs only fall, so re-queue
      if (current > 0) m.heap.push({current, top.pair});
      continue;
    }
    if (current <= 0) return std::nullopt;
    return top.pair;
  }
  return std::nullopt;
}

// The token for the bytes of a then b, added to the vocabulary unless it is there already.
int32_t token_of(Vocab& vocab, std::unordered_map<std::string, int32_t>& id_of, int32_t a, int32_t b) {
  const std::string text = vocab.tokens[a] + vocab.tokens[b];
  if (auto it = id_of.find(text); it != id_of.end())
    return it->second;  // the same bytes reached by another split: reuse the token
  const int32_t t = vocab.size();
  vocab.tokens.push_back(text);
  id_of.emplace(text, t);
  return t;
}

// Replaces pair ab by token t in every word that holds it, moving those words' counts from the
// pairs they lose to the pairs they gain.
void merge_pair(MergeState& m, Pair ab, int32_t t, uint32_t merge_index) {
  const int32_t a = left_of(ab), b = right_of(ab);
  m.touched.clear();
  const std::vector<uint32_t> list = std::move(m.where[ab]);
  m.where.erase(ab);
  for (uint32_t wi : list) {
    Word& w = m.words[wi];
    if (w.seen_at == merge_index) continue;
    w.seen_at = merge_index;
    auto& s = w.symbols;
    m.merged.clear();
    for (size_t i = 0; i < s.size(); ++i) {
      if (i + 1 < s.size() && s[i] == a && s[i + 1] == b) m.merged.push_back(t), ++i;
      else m.merged.push_back(s[i]);
    }
    if (m.merged.size() == s.size()) continue;  // stale index entry
    for (size_t i = 0; i + 1 < s.size(); ++i) m.pair_count[make_pair(s[i], s[i + 1])] -= w.count;
    for (size_t i = 0; i + 1 < m.merged.size(); ++i) {
      const Pair p = make_pair(m.merged[i], m.merged[i + 1]);
      m.pair_count[p] += w.count;
      if (m.merged[i] == t || m.merged[i + 1] == t) {
        m.touched.push_back(p);
        auto& l = m.where[p];
        if (l.empty() || l.back() != wi) l.push_back(wi);
      }
    }
    s.swap(m.merged);
  }
  // Pairs with the new token are the only ones whose count can have risen: queue them.
  std::sort(m.touched.begin(), m.touched.end());
  m.touched.erase(std::unique(m.touched.begin(), m.touched.end()), m.touched.end());
  for (Pair p : m.touched)
    if (m.pair_count[p] > 0) m.heap.push({m.pair_count[p], p});
}

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

  std::array<int32_t, 256> byte_id;
  Vocab vocab = byte_vocab(byte_id);
  std::unordered_map<std::string, int32_t> id_of;
  for (int32_t i = 0; i < vocab.size(); ++i) id_of.emplace(vocab.tokens[i], i);
  MergeState m;
  m.words = split_words(counts_, byte_id);
  count_pairs(m);

  const int64_t merges_wanted = options.vocab_size - 1 - 256;
  while (vocab.size() < options.vocab_size - 1) {
    const std::optional<Pair> best = pop_best(m);
    if (!best) break;
    const int32_t a = left_of(*best), b = right_of(*best);
    const int32_t t = token_of(vocab, id_of, a, b);
    const uint32_t merge_index = static_cast<uint32_t>(vocab.merges.size());
    vocab.merges.emplace_back(a, b);
    merge_pair(m, *best, t, merge_index);
    if (options.on_progress && (merge_index % 64 == 0))
      options.on_progress(merge_index + 1, merges_wanted);
  }
  if (options.on_progress) options.on_progress(vocab.merges.size(), merges_wanted);
  vocab.eot_id = vocab.size();
  vocab.tokens.emplace_back(kEndOfText);
  return vocab;
}

}  // namespace keel::data
