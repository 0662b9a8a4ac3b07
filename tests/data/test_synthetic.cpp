// The synthetic corpora of `gpt2 prepare --synthetic`: the rule holds where the noise allows,
// recall pairs repeat the document's key, the text is a pure function of the options, and bad
// options are refused by name.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>

#include "core/error.h"
#include "data/synthetic.h"

using namespace keel;
using namespace keel::data;

TEST_CASE("synthetic markov text follows its rule except for the noise") {
  SyntheticOptions o;
  o.doc_words = 20000;
  o.documents = 2;
  const std::vector<int64_t> w = synthetic_document_words(o, 1);
  REQUIRE(w.size() == 20000);
  int64_t follows = 0;
  for (size_t t = 3; t < w.size(); ++t) {
    REQUIRE(w[t] >= 0);
    REQUIRE(w[t] < 64);
    follows += w[t] == (5 * w[t - 1] + 3 * w[t - 2] + 7 * w[t - 3] + 1) % 64;
  }
  // The rule's word with probability 0.9 + 0.1/64: 90.16%, 0.2% standard deviation here.
  const double share = double(follows) / double(w.size() - 3);
  CHECK(share > 0.89);
  CHECK(share < 0.913);

  o.noise = 0;
  o.order = 1;
  const std::vector<int64_t> exact = synthetic_document_words(o, 0);
  for (size_t t = 1; t < exact.size(); ++t) REQUIRE(exact[t] == (5 * exact[t - 1] + 1) % 64);
}

TEST_CASE("synthetic recall text repeats the document's key after every recall marker") {
  SyntheticOptions o;
  o.kind = "recall";
  o.recall_rate = 0.05;
  o.doc_words = 4000;
  const std::vector<int64_t> w = synthetic_document_words(o, 3);
  REQUIRE(w[0] == -2);  // the "key" marker opens the document
  const int64_t key = w[1];
  int64_t recalls = 0;
  std::vector<int64_t> chain;
  for (size_t t = 2; t < w.size(); ++t) {
    if (w[t] == -1) {
      REQUIRE(w[t + 1] == key);
      ++recalls, ++t;
    } else {
      chain.push_back(w[t]);
    }
  }
  CHECK(chain.size() == 4000);
  CHECK(recalls > 150);  // 0.05 * 4000 = 200 expected
  CHECK(recalls < 250);
  // The chain reads through the pairs: the rule still holds for about 90% of it.
  int64_t follows = 0;
  for (size_t t = 3; t < chain.size(); ++t)
    follows += chain[t] == (5 * chain[t - 1] + 3 * chain[t - 2] + 7 * chain[t - 3] + 1) % 64;
  CHECK(double(follows) / double(chain.size() - 3) > 0.88);
  const std::string text = synthetic_document(o, 3);
  CHECK(text.rfind("key ", 0) == 0);
  CHECK(text.find(" recall ") != std::string::npos);
}

TEST_CASE("synthetic text is a pure function of its options") {
  SyntheticOptions o;
  o.doc_words = 300;
  const std::vector<std::string> vocab = synthetic_vocabulary(o);
  CHECK(vocab.size() == 64);
  CHECK(std::set<std::string>(vocab.begin(), vocab.end()).size() == 64);
  for (const std::string& w : vocab) CHECK(w.size() == 4);
  const std::string a = synthetic_document(o, 5);
  CHECK(a == synthetic_document(o, 5));
  CHECK(a != synthetic_document(o, 6));
  // 300 words, 16 to a line: 19 lines, words of the vocabulary separated by single spaces.
  std::istringstream lines(a);
  int n = 0;
  for (std::string line; std::getline(lines, line); ++n) {
    std::istringstream words(line);
    for (std::string word; words >> word;) CHECK(std::find(vocab.begin(), vocab.end(), word) != vocab.end());
  }
  CHECK(n == 19);
  SyntheticOptions other = o;
  other.seed = 2;
  CHECK(synthetic_vocabulary(other) != vocab);
  CHECK(synthetic_document(other, 5) != a);
}

TEST_CASE("synthetic options out of range are refused by name") {
  auto message = [](SyntheticOptions o) -> std::string {
    try {
      validate(o);
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "";
  };
  SyntheticOptions o;
  CHECK(message(o).empty());
  o.kind = "zipf";
  CHECK(message(o).find("unknown kind 'zipf'") != std::string::npos);
  o = {};
  o.words = 1;
  CHECK(message(o).find("--words") != std::string::npos);
  o = {};
  o.order = 9;
  CHECK(message(o).find("--order") != std::string::npos);
  o = {};
  o.noise = 1.5;
  CHECK(message(o).find("--noise") != std::string::npos);
  o = {};
  o.noise = std::nan("");
  CHECK(message(o).find("--noise") != std::string::npos);
  o = {};
  o.recall_rate = 0.9;
  CHECK(message(o).find("--recall-rate") != std::string::npos);
  o = {};
  o.documents = 1;
  CHECK(message(o).find("--documents") != std::string::npos);
  o = {};
  o.doc_words = 3;
  CHECK(message(o).find("--doc-words") != std::string::npos);
}
