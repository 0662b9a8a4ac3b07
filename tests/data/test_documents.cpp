// The document rule used by prepare.
#include <doctest/doctest.h>

#include "data/documents.h"
#include "test_util.h"

using namespace keel::data;
using Docs = std::vector<std::string_view>;

TEST_CASE("documents: split at two or more blank lines, never at one") {
  const DocumentRule tiny{1, 1000};
  CHECK(split_documents("a\n\nb\n\n\nc\n \n\t\nd", tiny) == Docs{"a\n\nb", "c", "d"});
  CHECK(split_documents("\n\n\nx\n\n\n\n", tiny) == Docs{"x"});
  CHECK(split_documents("  \n\n\n \n", tiny).empty());
  CHECK(split_documents("", tiny).empty());
}

TEST_CASE("documents: short sections join the following text") {
  const DocumentRule rule{30, 1000};
  CHECK(split_documents("TITLE\n\n\nCHAPTER 1\n\n\nIt was a dark night.\n\n\nEnd", rule) ==
        Docs{"TITLE\n\n\nCHAPTER 1\n\n\nIt was a dark night.", "End"});
}

TEST_CASE("documents: long documents are cut at paragraph breaks") {
  const DocumentRule rule{1, 25};
  const auto docs = split_documents("aaaa aaaa aaaa\n\nbbbb bbbb bbbb\n\ncccc", rule);
  CHECK(docs == Docs{"aaaa aaaa aaaa", "bbbb bbbb bbbb\n\ncccc"});
  const auto hard = split_documents(std::string(60, 'x'), rule);
  CHECK(hard.size() == 3);
  const auto utf8 = split_documents("ééééééééééééééé", DocumentRule{1, 5});  // 2-byte chars
  for (auto d : utf8) CHECK(d.size() % 2 == 0);
}

TEST_CASE("documents: the Austen novels split into chapter-sized documents") {
  const std::string text = keel::test::austen_slice(0, std::string::npos);
  const auto docs = split_documents(text);
  CHECK(docs.size() > 250);
  CHECK(docs.size() < 320);
  for (auto d : docs) {
    CHECK(d.size() <= DocumentRule{}.max_chars);
    CHECK(d.front() != '\n');
    CHECK(d.back() != '\n');
  }
}
