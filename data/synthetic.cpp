#include "data/synthetic.h"

#include <fmt/format.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/io.h"
#include "core/philox.h"

namespace keel::data {

namespace {

constexpr const char* kKinds[] = {"markov", "recall"};
constexpr int64_t kCoefficients[] = {5, 3, 7, 9, 11, 13, 15, 17};  // odd: each term alone is a bijection mod 2^n
constexpr int64_t kRecall = -1, kKeyMarker = -2;                   // the two words outside the rule's W
constexpr int kWordsPerLine = 16;

// A stream of 32-bit draws from keel's Philox generator: (seed, stream) picks the sequence, so
// every document has its own stream and any document can be generated without the others.
class Draws {
 public:
  Draws(uint64_t seed, uint64_t stream) : key_(seed), counter_(stream << 32) {}
  uint32_t next() {
    if (lane_ == 4) block_ = philox::philox4x32(counter_++, key_), lane_ = 0;
    return block_.x[lane_++];
  }
  // Uniform in [0, n) (n < 2^32): the high half of a 64-bit product, bias below n / 2^32.
  int64_t below(int64_t n) { return static_cast<int64_t>((uint64_t{next()} * uint64_t(n)) >> 32); }
  // True with probability p.
  bool chance(double p) { return double(next()) < p * 4294967296.0; }

 private:
  uint64_t key_, counter_;
  philox::Block block_{};
  int lane_ = 4;
};

}  // namespace

std::string synthetic_kind_names() {
  std::string out;
  for (const char* k : kKinds) out += (out.empty() ? "" : ", ") + std::string(k);
  return out;
}

void validate(const SyntheticOptions& o) {
  auto need = [](bool ok, const std::string& flag, const std::string& what) {
    if (!ok) throw ConfigError("prepare --synthetic", fmt::format("--{} {}", flag, what));
  };
  bool known = false;
  for (const char* k : kKinds) known = known || o.kind == k;
  if (!known)
    throw ConfigError("prepare --synthetic", fmt::format("unknown kind '{}'", o.kind),
                      "use one of " + synthetic_kind_names() + " (docs/instability.md, section 2)");
  need(o.words >= 2 && o.words <= 4096, "words", fmt::format("is {}; use 2 to 4096 words", o.words));
  need(o.order >= 1 && o.order <= 8, "order", fmt::format("is {}; the rule looks back 1 to 8 words", o.order));
  need(o.noise >= 0 && o.noise <= 1, "noise", fmt::format("is {}; it is a probability in [0, 1]", o.noise));
  need(o.recall_rate >= 0 && o.recall_rate <= 0.5, "recall-rate",
       fmt::format("is {}; use a probability in [0, 0.5]", o.recall_rate));
  need(o.documents >= 2 && o.documents <= 1000000, "documents",
       fmt::format("is {}; use 2 to 10^6 (the validation split needs one)", o.documents));
  need(o.doc_words > o.order && o.doc_words <= 1000000, "doc-words",
       fmt::format("is {}; a document needs more words than --order and at most 10^6", o.doc_words));
}

std::vector<std::string> synthetic_vocabulary(const SyntheticOptions& o) {
  // 14 x 5 syllables, 4900 two-syllable words: a seeded partial shuffle picks W distinct ones.
  static const char kConsonants[] = "bdfgklmnprstvz", kVowels[] = "aeiou";
  constexpr int64_t kSyllables = 14 * 5, kAll = kSyllables * kSyllables;
  std::vector<int64_t> pick(kAll);
  for (int64_t i = 0; i < kAll; ++i) pick[i] = i;
  Draws draw(o.seed, 0);
  std::vector<std::string> out;
  for (int64_t i = 0; i < o.words; ++i) {
    std::swap(pick[i], pick[i + draw.below(kAll - i)]);
    std::string w;
    for (int64_t s : {pick[i] / kSyllables, pick[i] % kSyllables}) {
      w += kConsonants[s / 5];
      w += kVowels[s % 5];
    }
    out.push_back(w);
  }
  return out;
}

std::vector<int64_t> synthetic_document_words(const SyntheticOptions& o, int64_t d) {
  Draws draw(o.seed, uint64_t(d) + 1);  // stream 0 is the vocabulary's
  std::vector<int64_t> out, chain;
  const bool recall = o.kind == "recall";
  int64_t key = 0;
  if (recall) {
    key = draw.below(o.words);
    out.push_back(kKeyMarker);
    out.push_back(key);
  }
  for (int64_t t = 0; t < o.doc_words; ++t) {
    int64_t x;
    if (t < o.order || draw.chance(o.noise)) {
      x = draw.below(o.words);  // the first k words have no full context: a random start
    } else {
      x = 1;
      for (int64_t i = 0; i < o.order; ++i) x += kCoefficients[i] * chain[chain.size() - 1 - i];
      x %= o.words;
    }
    chain.push_back(x);
    out.push_back(x);
    if (recall && draw.chance(o.recall_rate)) {
      out.push_back(kRecall);
      out.push_back(key);
    }
  }
  return out;
}

std::string synthetic_document(const SyntheticOptions& o, int64_t d) {
  const std::vector<std::string> vocab = synthetic_vocabulary(o);
  std::string text;
  int column = 0;
  for (int64_t w : synthetic_document_words(o, d)) {
    if (column) text += column == kWordsPerLine ? '\n' : ' ';
    if (column == kWordsPerLine) column = 0;
    text += w == kRecall ? "recall" : w == kKeyMarker ? "key" : vocab[size_t(w)];
    ++column;
  }
  return text;
}

uint64_t write_synthetic_corpus(const SyntheticOptions& o, const std::string& path) {
  validate(o);
  std::string out;
  uint64_t bytes = 0;
  for (int64_t d = 0; d < o.documents; ++d) {
    const std::string doc = synthetic_document(o, d);
    bytes += doc.size();
    out += nlohmann::json{{"text", doc}}.dump() + "\n";
  }
  io::write_file_atomic(path, out, "prepare --synthetic");
  return bytes;
}

}  // namespace keel::data
