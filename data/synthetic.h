// Synthetic corpora for controlled experiments: text whose dependencies are known exactly, so
// that what a model must attend to is a knob, not a guess about English. `gpt2 prepare
// --synthetic KIND` writes one and prepares it like any corpus.
//
// Text is made of W pseudo-words ("bako", "tiru", ...: two consonant-vowel syllables, picked
// from the seed), separated by spaces, 16 words to a line. Kinds:
//
//   markov  dense local structure. Word t follows from the k words before it by the rule
//             x_t = (c_1 x_{t-1} + c_2 x_{t-2} + ... + c_k x_{t-k} + 1) mod W,
//           c = 5, 3, 7, 9, 11, 13, 15, 17 (the first k), with probability 1 - noise; otherwise
//           x_t is drawn uniformly. With the defaults (W = 64, k = 3, noise 0.1) the rule's word
//           comes with probability p = 0.9 + 0.1/64, so the best possible next-word loss is
//           -p ln p - (1 - p) ln(0.1/64) = 0.73 nats per word; a model that sees no context can do
//           no better than ln 64 = 4.16.
//   recall  markov plus one sparse long-range dependency: each document opens with the marker
//           word "key" and a key word drawn uniformly; later, with probability recall_rate at
//           each position, the pair "recall <key word>" is inserted (the chain goes on as if the
//           pair were not there). The word after "recall" is predictable only by looking back to
//           the start of the document, however far that is: the kind of dependency LS-attention
//           leaves to its global heads.
//
// Each document starts with a fresh random context. Everything is a function of the options:
// the same options give the same text, byte for byte, on every machine (keel's Philox stream).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace keel::data {

struct SyntheticOptions {
  std::string kind = "markov";  // markov | recall
  int64_t words = 64;           // W, in [2, 4096]
  int64_t order = 3;            // k, in [1, 8]
  double noise = 0.1;           // in [0, 1]
  double recall_rate = 0.02;    // recall: probability of a "recall <key>" pair at each position, in [0, 0.5]
  int64_t documents = 200;      // in [2, 10^6]
  int64_t doc_words = 2500;     // words per document (before recall pairs), in [k + 1, 10^6]
  uint64_t seed = 1;
};

// The kinds, for help texts and messages: "markov, recall".
std::string synthetic_kind_names();

// ConfigError naming the option (and the accepted range) for anything out of range.
void validate(const SyntheticOptions& options);

// The W pseudo-words of a corpus, index order (word i is the rule's value i).
std::vector<std::string> synthetic_vocabulary(const SyntheticOptions& options);

// Document d of the corpus as the word indices of the rule (a recall pair is the two entries
// -1 ("recall") and the key; the opening "key" marker is -2): what the text spells, for tests
// and analyses.
std::vector<int64_t> synthetic_document_words(const SyntheticOptions& options, int64_t d);

// Document d as text.
std::string synthetic_document(const SyntheticOptions& options, int64_t d);

// Writes every document as one JSON Lines record {"text": ...} to `path` (atomically).
// IoError when the file cannot be written. Returns the number of bytes of text.
uint64_t write_synthetic_corpus(const SyntheticOptions& options, const std::string& path);

}  // namespace keel::data
